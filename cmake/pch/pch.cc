// The translation unit that builds the precompiled header of the libraries (cmake/pch.cmake).
