# posenc links the C++ library that LibTorch loads: the shared libstdc++ (libstdc++.so.6).
#
# LibTorch's libraries need the system's libstdc++.so.6. A GCC installation without a shared
# libstdc++ of its own (only libstdc++.a beside it: a compiler unpacked next to the system's, as on
# the workplace's GPU image) links a private copy of the C++ library into every shared library and
# program it builds. libposenc.so then carries its own std::locale, whose facets the process's
# libstdc++ never registered: the first number written into a stream (every TORCH_CHECK message
# that prints one) crashes. Seen on an H200 machine on 2026-11-26: each posenc error raised from
# Python ended in a segmentation fault (docs/gpu_check.md).
#
# Where the compiler reports no shared libstdc++ (`-print-file-name=libstdc++.so` answers the bare
# name), the system's libstdc++.so.6 is named on every link line (CMAKE_<LANG>_STANDARD_LIBRARIES,
# which comes before the compiler's own -lstdc++): its symbols then come from the shared library and
# nothing of the archive is linked. POSENC_SHARED_LIBSTDCXX names another file. The test
# architecture.shared_cxx_runtime checks the built library.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  return()
endif()
execute_process(
  COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
  OUTPUT_VARIABLE _posenc_libstdcxx_so
  OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _posenc_libstdcxx_status)
if(NOT _posenc_libstdcxx_status EQUAL 0 OR IS_ABSOLUTE "${_posenc_libstdcxx_so}")
  return()
endif()
find_library(POSENC_SHARED_LIBSTDCXX NAMES libstdc++.so.6
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} /lib/${CMAKE_LIBRARY_ARCHITECTURE}
        /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib
  DOC "The shared libstdc++ that posenc links where the C++ compiler has only a static one")
if(NOT POSENC_SHARED_LIBSTDCXX)
  message(FATAL_ERROR "posenc: the C++ compiler ${CMAKE_CXX_COMPILER} has no shared libstdc++ "
    "(-print-file-name=libstdc++.so: '${_posenc_libstdcxx_so}'), so it would link a private copy of "
    "the C++ library into libposenc.so, which crashes beside LibTorch's; and no libstdc++.so.6 was "
    "found on this system. Pass -DPOSENC_SHARED_LIBSTDCXX=/path/to/libstdc++.so.6 (the one "
    "LibTorch's libraries load), or use a compiler with a shared libstdc++ (CMAKE_CXX_COMPILER).")
endif()
message(STATUS "posenc: ${CMAKE_CXX_COMPILER} has no shared libstdc++; linking ${POSENC_SHARED_LIBSTDCXX}")
foreach(_posenc_lang CXX CUDA)
  string(APPEND CMAKE_${_posenc_lang}_STANDARD_LIBRARIES " \"${POSENC_SHARED_LIBSTDCXX}\"")
endforeach()
