# Precompiled headers. The standard library, protobuf, fmt, spdlog and cppzmq headers that nearly
# every file includes take about 3 s to parse, a quarter to a third of compiling a typical file;
# GoogleTest adds 2-3 s to each test. Parsed once per build (cmake/pch/pch.h, pch_test.h), they
# cut a clean build on 2 cores by minutes. HETPS_PCH=OFF builds without them (which also checks
# that every file includes what it uses).
#
# GCC uses a precompiled header only where the flags that shape it (-fPIC against -fPIE, macros
# the headers read, ...) match the ones it was built with; CMake adds -Winvalid-pch, an error
# under -Werror, so a mismatch fails the build instead of quietly losing the speed. Hence one
# header for the libraries (PIC) and one for the tests (PIE executables, their own options).
option(HETPS_PCH "Precompile the headers most files include (GCC builds)" ON)
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(HETPS_PCH OFF)
endif()

if(HETPS_PCH)
  # g++ 12 reports out-of-bounds, overlapping and overreading copies inside libstdc++'s
  # std::string that cannot happen (false positives known in that release), and with the headers
  # precompiled it does so in more files; the warnings stay on with other compilers and releases.
  if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    set(false_positives -Wno-array-bounds -Wno-restrict -Wno-stringop-overread
                        -Wno-stringop-overflow)
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${false_positives}>")
  endif()
  add_library(hetps_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch/pch.cc)
  target_link_libraries(hetps_pch PRIVATE cppzmq spdlog::spdlog fmt::fmt protobuf::libprotobuf)
  target_precompile_headers(hetps_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/pch.h)
endif()

# hetps_use_pch(<target>...): the targets' C++ files use the libraries' precompiled header.
function(hetps_use_pch)
  if(HETPS_PCH)
    foreach(target ${ARGN})
      target_precompile_headers(${target} REUSE_FROM hetps_pch)
    endforeach()
  endif()
endfunction()
