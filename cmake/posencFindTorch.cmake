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

# pip's torch is a CUDA build, and its TorchConfig.cmake (through Caffe2Config.cmake) fails without
# a CUDA toolkit, even for code that never touches CUDA. With POSENC_CUDA=OFF, or AUTO on a machine
# without a toolkit, posenc links the CPU libraries of that torch directly (the route of
# torch.utils.cpp_extension's CppExtension): CPU kernels only, no nvcc needed. CUDA builds of
# LibTorch are told apart by libtorch_cuda beside libtorch_cpu.
set(_posenc_torch_root "")
foreach(_p IN LISTS CMAKE_PREFIX_PATH Torch_DIR)
  foreach(_candidate "${_p}" "${_p}/../.." "${_p}/../../..")
    get_filename_component(_candidate "${_candidate}" ABSOLUTE)
    if(NOT _posenc_torch_root AND EXISTS "${_candidate}/share/cmake/Torch/TorchConfig.cmake")
      set(_posenc_torch_root "${_candidate}")
    endif()
  endforeach()
endforeach()
set(POSENC_TORCH_DIRECT OFF)
if(_posenc_torch_root AND EXISTS "${_posenc_torch_root}/lib/libtorch_cuda.so"
   AND NOT POSENC_CUDA STREQUAL "ON")
  if(POSENC_CUDA STREQUAL "OFF")
    set(POSENC_TORCH_DIRECT ON)
  else()
    find_package(CUDAToolkit QUIET)
    # The CUDA version the torch package was built for (pip's torch: torch/version.py), whose
    # major version the toolkit must share: kernels from another major version's nvcc are not
    # built against that torch's CUDA runtime.
    set(_posenc_torch_cuda "")
    if(EXISTS "${_posenc_torch_root}/version.py")
      file(STRINGS "${_posenc_torch_root}/version.py" _posenc_cuda_line REGEX "^cuda")
      if(_posenc_cuda_line MATCHES "'([0-9]+)\\.([0-9]+)")
        set(_posenc_torch_cuda "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
        set(_posenc_torch_cuda_major "${CMAKE_MATCH_1}")
      endif()
    endif()
    if(NOT CUDAToolkit_FOUND)
      message(STATUS "posenc: LibTorch at ${_posenc_torch_root} is a CUDA build, but no CUDA "
                     "toolkit was found: CPU kernels only (set CUDAToolkit_ROOT or put nvcc on "
                     "PATH for the CUDA kernels)")
      set(POSENC_TORCH_DIRECT ON)
    elseif(_posenc_torch_cuda AND NOT _posenc_torch_cuda_major EQUAL CUDAToolkit_VERSION_MAJOR)
      message(STATUS "posenc: LibTorch at ${_posenc_torch_root} is built for CUDA "
                     "${_posenc_torch_cuda}, but the CUDA toolkit found is ${CUDAToolkit_VERSION} "
                     "(${CUDAToolkit_NVCC_EXECUTABLE}), another major version: CPU kernels only "
                     "(install CUDA ${_posenc_torch_cuda_major}'s toolkit and set CUDAToolkit_ROOT "
                     "for the CUDA kernels)")
      set(POSENC_TORCH_DIRECT ON)
    endif()
  endif()
endif()

# TORCH_CUDA_ARCH_LIST, which find_package(Torch) reads from the environment, is remembered in the
# cache at the first configure, so that a reconfigure started by the build tool (whose environment
# may lack it) compiles for the same architectures.
if(DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(POSENC_TORCH_CUDA_ARCH_LIST "$ENV{TORCH_CUDA_ARCH_LIST}" CACHE STRING
      "TORCH_CUDA_ARCH_LIST of the first configure (the CUDA architectures compiled for)" FORCE)
elseif(POSENC_TORCH_CUDA_ARCH_LIST)
  set(ENV{TORCH_CUDA_ARCH_LIST} "${POSENC_TORCH_CUDA_ARCH_LIST}")
endif()

# The CUDA architectures, when nobody chose them: LibTorch's own default (its "Common" list) starts
# at compute 5.0, which nvcc 13 no longer builds, so the build would stop in its first CUDA file.
# posenc picks the architectures the torch package itself was built for (torch.cuda.get_arch_list()
# when a Python with that torch is known, else Volta's successors up to Blackwell) that this nvcc
# can build, PTX for the newest; it stops here, with what to set, if none is left, and refuses a
# TORCH_CUDA_ARCH_LIST naming one this nvcc cannot build.
if(_posenc_torch_root AND EXISTS "${_posenc_torch_root}/lib/libtorch_cuda.so" AND NOT POSENC_TORCH_DIRECT)
  include(posencCuda)
  posenc_choose_cuda_architectures("${_posenc_torch_root}")
endif()

if(POSENC_TORCH_DIRECT)
  include(posencTorchDirect)
else()
  find_package(Torch CONFIG REQUIRED)
endif()

# The C++ standard: C++17, or the newer one this LibTorch's headers require (2.15's ATen.h, for
# one, stops with "#error C++20 or later compatible compiler is required"; read from the header,
# not assumed from the version). posenc's targets ask
# for it publicly, so a consumer of the installed package compiles with it too.
set(POSENC_CXX_STANDARD 17)
set(_posenc_aten_header "")
foreach(_dir IN LISTS TORCH_INCLUDE_DIRS)
  if(NOT _posenc_aten_header AND EXISTS "${_dir}/ATen/ATen.h")
    set(_posenc_aten_header "${_dir}/ATen/ATen.h")
  endif()
endforeach()
if(_posenc_aten_header)
  file(STRINGS "${_posenc_aten_header}" _posenc_required REGEX "__cplusplus *< *20[0-9][0-9][0-9][0-9]L")
  foreach(_line IN LISTS _posenc_required)
    if(_line MATCHES "__cplusplus *< *(20[0-9][0-9])[0-9][0-9]L")
      # the year of the value __cplusplus must reach is the standard: 201703L -> 17, 202002L -> 20
      math(EXPR _posenc_standard "${CMAKE_MATCH_1} - 2000")
      if(_posenc_standard GREATER POSENC_CXX_STANDARD)
        set(POSENC_CXX_STANDARD ${_posenc_standard})
      endif()
    endif()
  endforeach()
else()
  message(WARNING "posenc: no ATen/ATen.h in LibTorch's include directories (${TORCH_INCLUDE_DIRS}); "
                  "compiling as C++${POSENC_CXX_STANDARD}")
endif()

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
if(NOT POSENC_TORCH_DIRECT AND (CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES))
  set(POSENC_TORCH_HAS_CUDA ON)
else()
  set(POSENC_TORCH_HAS_CUDA OFF)
endif()
# pip's CUDA torch: its libraries find NVIDIA's (nccl, cudnn, cuSPARSELt, ...) in
# site-packages/nvidia/*/lib through their RPATH. An executable linked against them with a CUDA
# toolkit's library folder on its own -rpath (TorchConfig.cmake puts it there) has the linker
# resolve those from the toolkit's folder instead, where an older nccl may live (torch 2.15 beside
# CUDA 13.0's toolkit: undefined references to ncclCommGrow, ...). -rpath-link points the linker
# at the torch's own (posenc::posenc's interface, src/CMakeLists.txt).
set(POSENC_TORCH_RPATH_LINK "")
if(POSENC_TORCH_HAS_CUDA AND TORCH_INSTALL_PREFIX)
  get_filename_component(_posenc_nvidia "${TORCH_INSTALL_PREFIX}/../nvidia" ABSOLUTE)
  if(IS_DIRECTORY "${_posenc_nvidia}")
    file(GLOB _posenc_nvidia_libs LIST_DIRECTORIES true "${_posenc_nvidia}/*/lib")
    list(JOIN _posenc_nvidia_libs ":" POSENC_TORCH_RPATH_LINK)
  endif()
endif()
message(STATUS "posenc: LibTorch ${POSENC_TORCH_VERSION} at ${_posenc_torch_lib_dir} (CUDA: ${POSENC_TORCH_HAS_CUDA}, C++${POSENC_CXX_STANDARD})")
