# Fails unless LIBRARY (libposenc.so) loads the shared libstdc++ and defines none of the C++
# library's own functions: a private copy of libstdc++ inside posenc crashes beside LibTorch's
# (cmake/posencSharedLibstdcxx.cmake). OBJDUMP: the toolchain's objdump.
execute_process(COMMAND ${OBJDUMP} -p ${LIBRARY} OUTPUT_VARIABLE headers RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -p ${LIBRARY} failed (${status})")
endif()
if(NOT headers MATCHES "NEEDED +libstdc\\+\\+\\.so")
  message(FATAL_ERROR "${LIBRARY} does not load the shared libstdc++ (no NEEDED libstdc++.so): "
    "the compiler linked the C++ library into it; see cmake/posencSharedLibstdcxx.cmake")
endif()
# std::locale::classic() and std::ostream::_M_insert<long>: defined in libstdc++, only referenced
# (*UND*) by a library that uses the shared one.
execute_process(COMMAND ${OBJDUMP} -T ${LIBRARY} OUTPUT_VARIABLE symbols RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -T ${LIBRARY} failed (${status})")
endif()
string(REGEX MATCHALL "[^\n]*(_ZNSt6locale7classicEv|_ZNSo9_M_insertIlEERSoT_)[^\n]*" lines "${symbols}")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "\\*UND\\*")
    message(FATAL_ERROR "${LIBRARY} defines a function of the C++ library itself (a private copy "
      "of libstdc++):\n${line}")
  endif()
endforeach()
message(STATUS "${LIBRARY}: loads the shared libstdc++, defines none of its functions")
