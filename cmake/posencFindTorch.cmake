# Finds LibTorch for posenc and checks that every library comes from one installation.
#
# Two LibTorch installations can live on one machine: pip's torch (its CMake package is at
# `python -c 'import torch; print(torch.utils.cmake_prefix_path)'`, i.e. <torch>/share/cmake) and
# Debian's libtorch-dev (/usr). TorchConfig.cmake looks its libraries up with find_library(... PATHS
# <torch>/lib), and PATHS come after the system directories, so a pip build on a machine that also
# has libtorch-dev would link Debian's libtorch.so. Adding <torch> itself to CMAKE_PREFIX_PATH makes
# <torch>/lib win; the check afterwards turns any remaining mix into a configure error.

set(_posenc_extra_prefixes "")
foreach(_p IN LISTS CMAKE_PREFIX_PATH)
  if(_p MATCHES "/share/cmake/?$")
    get_filename_component(_root "${_p}/../.." ABSOLUTE)
    list(APPEND _posenc_extra_prefixes "${_root}")
  endif()
endforeach()
if(_posenc_extra_prefixes)
  list(PREPEND CMAKE_PREFIX_PATH ${_posenc_extra_prefixes})
endif()

find_package(Torch CONFIG REQUIRED)

get_filename_component(_posenc_torch_lib_dir "${TORCH_LIBRARY}" DIRECTORY)
get_filename_component(_posenc_c10_lib_dir "${c10_LIBRARY}" DIRECTORY)
if(NOT _posenc_torch_lib_dir STREQUAL _posenc_c10_lib_dir)
  message(FATAL_ERROR
    "posenc: libtorch (${TORCH_LIBRARY}) and libc10 (${c10_LIBRARY}) come from different LibTorch "
    "installations. Point CMAKE_PREFIX_PATH at one of them only (for pip's torch: "
    "python -c 'import torch; print(torch.utils.cmake_prefix_path)') and start from an empty build "
    "directory.")
endif()

# Version of the LibTorch found, as MAJOR.MINOR.PATCH, for messages and the package config.
# The directory of the LibTorch libraries, for the RUNPATH of installed binaries.
set(POSENC_TORCH_LIBRARY_DIR "${_posenc_torch_lib_dir}")

set(POSENC_TORCH_VERSION "${Torch_VERSION}")
if(NOT POSENC_TORCH_VERSION)
  set(POSENC_TORCH_VERSION "unknown")
endif()

# CUDA support follows the LibTorch found: pip's torch is built with CUDA, Debian's is CPU only.
if(CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES)
  set(POSENC_TORCH_HAS_CUDA ON)
else()
  set(POSENC_TORCH_HAS_CUDA OFF)
endif()
message(STATUS "posenc: LibTorch ${POSENC_TORCH_VERSION} at ${_posenc_torch_lib_dir} (CUDA: ${POSENC_TORCH_HAS_CUDA})")
