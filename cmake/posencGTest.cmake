# GoogleTest for posenc's tests: the installed package when there is one, otherwise the sources
# (Debian's googletest package puts them in /usr/src/googletest; elsewhere pass
# -DPOSENC_GOOGLETEST_SOURCE_DIR=...). POSENC_GTEST_FROM_SOURCE=ON forces the sources, which the
# sanitizer builds use so that GoogleTest is instrumented too.

option(POSENC_GTEST_FROM_SOURCE "Build GoogleTest from POSENC_GOOGLETEST_SOURCE_DIR" OFF)
set(POSENC_GOOGLETEST_SOURCE_DIR "/usr/src/googletest" CACHE PATH "GoogleTest sources (fallback)")

if(NOT POSENC_GTEST_FROM_SOURCE)
  find_package(GTest QUIET)
endif()

if(NOT TARGET GTest::gtest_main)
  if(NOT EXISTS "${POSENC_GOOGLETEST_SOURCE_DIR}/CMakeLists.txt")
    message(FATAL_ERROR
      "posenc: GoogleTest was not found as a package, and POSENC_GOOGLETEST_SOURCE_DIR "
      "(${POSENC_GOOGLETEST_SOURCE_DIR}) holds no sources. Install libgtest-dev or googletest, or "
      "pass -DPOSENC_GOOGLETEST_SOURCE_DIR=<path to googletest sources>.")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory("${POSENC_GOOGLETEST_SOURCE_DIR}" "${PROJECT_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL)
  if(NOT TARGET GTest::gtest_main)  # GoogleTest >= 1.11 defines these aliases itself
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
  message(STATUS "posenc: GoogleTest built from ${POSENC_GOOGLETEST_SOURCE_DIR}")
else()
  message(STATUS "posenc: GoogleTest package found")
endif()

include(GoogleTest)
