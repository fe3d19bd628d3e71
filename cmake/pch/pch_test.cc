// The program that builds the tests' precompiled header (cmake/pch.cmake); it is never run.
int main() { return 0; }
