# What posenc chooses for its CUDA code where LibTorch's CMake package would choose something the
# installed nvcc cannot build (posencFindTorch.cmake, src/CMakeLists.txt):
#
#   posenc_choose_cuda_architectures(<torch root>)   before find_package(Torch)
#   posenc_cuda_standard(<standard>)                 after enable_language(CUDA)

# Sets ENV{TORCH_CUDA_ARCH_LIST} (which find_package(Torch) reads) when neither the CMake variable
# TORCH_CUDA_ARCH_LIST, nor the environment, nor the cache (POSENC_TORCH_CUDA_ARCH_LIST) names the
# architectures. LibTorch's default ("Auto") detects the GPUs of the machine and, where it finds
# none (a machine that builds wheels, CI), falls back to its "Common" list, which starts at compute
# 5.0: nvcc 13 no longer builds that, and the build would stop in its first CUDA file. posenc's
# choice: the GPUs of this machine when the torch of the Python that builds sees any, else the
# architectures that torch package was built for (torch._C._cuda_getArchFlags(), which needs no
# GPU), else Turing to Blackwell (7.5 8.0 8.6 8.9 9.0 10.0 12.0); of those, the ones this nvcc builds,
# PTX for the newest so that later GPUs can run it. A list given by the user is checked against nvcc
# here (its numbered architectures; names such as "Common" or "Hopper" are left to LibTorch), so
# that an architecture nvcc cannot build stops the configure with what to do, not the build.
function(posenc_choose_cuda_architectures torch_root)
  set(_nvcc "")
  foreach(_candidate IN ITEMS "${CMAKE_CUDA_COMPILER}" "$ENV{CUDACXX}")
    if(NOT _nvcc AND _candidate AND EXISTS "${_candidate}")
      set(_nvcc "${_candidate}")
    endif()
  endforeach()
  if(NOT _nvcc)
    find_package(CUDAToolkit QUIET)
    set(_nvcc "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  if(NOT _nvcc)
    return()  # find_package(Torch) reports the missing toolkit itself
  endif()
  execute_process(COMMAND "${_nvcc}" --version OUTPUT_VARIABLE _nvcc_version_text ERROR_QUIET)
  string(REGEX MATCH "release [0-9]+\\.[0-9]+" _nvcc_release "${_nvcc_version_text}")
  string(REPLACE "release " "" _nvcc_release "${_nvcc_release}")
  execute_process(COMMAND "${_nvcc}" --list-gpu-arch
                  OUTPUT_VARIABLE _nvcc_out RESULT_VARIABLE _nvcc_status ERROR_QUIET)
  if(NOT _nvcc_status EQUAL 0)
    return()  # an nvcc too old for --list-gpu-arch (CUDA < 11): LibTorch's own choice stands
  endif()
  posenc_architectures_of(_buildable "compute" "${_nvcc_out}")

  if(DEFINED TORCH_CUDA_ARCH_LIST)
    set(_given "${TORCH_CUDA_ARCH_LIST}")  # (LibTorch reads the variable before the environment)
    set(_given_hint "")
  elseif(DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(_given "$ENV{TORCH_CUDA_ARCH_LIST}")
    string(CONCAT _given_hint " (A list from an earlier configure is remembered in the cache as "
                  "POSENC_TORCH_CUDA_ARCH_LIST; configure with -U POSENC_TORCH_CUDA_ARCH_LIST, or "
                  "in a new build folder, to forget it.)")
  else()
    set(_given "")
  endif()
  set(_wanted 7.5 8.0 8.6 8.9 9.0 10.0 12.0)
  set(_from "posenc's default")
  # The Python whose torch is this LibTorch (pip install, scripts/build.sh pip): its GPUs, else
  # the architectures its CUDA kernels were built for.
  set(_ask [=[
import os, sys, torch
if os.path.realpath(os.path.dirname(torch.__file__)) != os.path.realpath(sys.argv[1]):
    sys.exit(1)
if torch.cuda.is_available():
    caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    print("gpus", " ".join(f"sm_{a}{b}" for a, b in caps))
else:
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
    print("torch", flags or " ".join(torch.cuda.get_arch_list()))
]=])
  foreach(_python IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_python AND NOT _given)
      execute_process(COMMAND "${_python}" -c "${_ask}" "${torch_root}"
        OUTPUT_VARIABLE _torch_arches OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _torch_status ERROR_QUIET)
      if(_torch_status EQUAL 0 AND _torch_arches MATCHES "sm_[0-9]+")
        posenc_architectures_of(_wanted "sm" "${_torch_arches}")
        if(_torch_arches MATCHES "^gpus")
          set(_from "the GPUs of this machine, as ${_python}'s torch sees them")
        else()
          set(_from "the architectures ${_python}'s torch was built for")
        endif()
        break()
      endif()
    endif()
  endforeach()
  posenc_select_cuda_architectures(_chosen _error BUILDABLE ${_buildable} WANTED ${_wanted} GIVEN "${_given}"
    NVCC "${_nvcc_release}, ${_nvcc}" FROM "${_from}")
  if(_error)
    message(FATAL_ERROR "posenc: ${_error}${_given_hint}")
  endif()
  if(_given)
    return()
  endif()
  message(STATUS "posenc: CUDA architectures ${_chosen} (${_from}, as far as nvcc "
                 "${_nvcc_release} builds them; set TORCH_CUDA_ARCH_LIST to choose)")
  set(ENV{TORCH_CUDA_ARCH_LIST} "${_chosen}")
  set(POSENC_TORCH_CUDA_ARCH_LIST "${_chosen}" CACHE STRING
      "TORCH_CUDA_ARCH_LIST of the first configure (the CUDA architectures compiled for)" FORCE)
endfunction()

# The architectures named in `text` as <prefix>_XY (nvcc's compute_90, torch's sm_90) as TORCH_CUDA_ARCH_LIST
# writes them (9.0), each once, in order.
function(posenc_architectures_of out_var prefix text)
  string(REGEX MATCHALL "${prefix}_[0-9]+" _codes "${text}")
  set(_arches "")
  foreach(_code IN LISTS _codes)
    string(REGEX REPLACE "${prefix}_([0-9]+)([0-9])" "\\1.\\2" _arch "${_code}")
    list(APPEND _arches "${_arch}")
  endforeach()
  list(REMOVE_DUPLICATES _arches)
  set(${out_var} "${_arches}" PARENT_SCOPE)
endfunction()

# The decision alone, without nvcc or Python (test/cmake/cuda_architectures.cmake tests it):
#   posenc_select_cuda_architectures(<chosen> <error> BUILDABLE <nvcc's> WANTED <torch's>
#                                    GIVEN <TORCH_CUDA_ARCH_LIST or ""> NVCC <text> FROM <text>)
# <chosen>: the space-separated list for TORCH_CUDA_ARCH_LIST (the wanted ones nvcc builds, PTX for
# the newest), or GIVEN when that is set and nvcc builds every architecture it names; <error>: what
# to tell the user when nothing can work, else empty.
function(posenc_select_cuda_architectures chosen_var error_var)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "GIVEN;NVCC;FROM" "BUILDABLE;WANTED")
  string(REPLACE ";" " " _buildable_text "${ARG_BUILDABLE}")
  set(${chosen_var} "" PARENT_SCOPE)
  set(${error_var} "" PARENT_SCOPE)
  if(ARG_GIVEN)
    # (the numbered architectures; names and LibTorch's keywords, "All", "Common", "Hopper", are
    # LibTorch's to expand)
    string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _asked "${ARG_GIVEN}")
    foreach(_arch IN LISTS _asked)
      if(NOT _arch IN_LIST ARG_BUILDABLE)
        set(${error_var}
          "TORCH_CUDA_ARCH_LIST=\"${ARG_GIVEN}\" names compute ${_arch}, which this nvcc (${ARG_NVCC}) cannot build; it builds ${_buildable_text}. Set TORCH_CUDA_ARCH_LIST to some of those (e.g. your GPU's: python -c 'import torch; print(torch.cuda.get_device_capability())'), or configure with -DPOSENC_CUDA=OFF for the CPU kernels only."
          PARENT_SCOPE)
        return()
      endif()
    endforeach()
    set(${chosen_var} "${ARG_GIVEN}" PARENT_SCOPE)
    return()
  endif()
  set(_chosen "")
  foreach(_arch IN LISTS ARG_WANTED)
    if(_arch IN_LIST ARG_BUILDABLE)
      list(APPEND _chosen "${_arch}")
    endif()
  endforeach()
  if(NOT _chosen)
    string(REPLACE ";" " " _wanted_text "${ARG_WANTED}")
    set(${error_var}
      "no CUDA architecture both wanted (${_wanted_text}, from ${ARG_FROM}) and buildable by this nvcc (${ARG_NVCC}: ${_buildable_text}). Set TORCH_CUDA_ARCH_LIST to your GPU's architecture, install the CUDA toolkit of your torch's CUDA version, or configure with -DPOSENC_CUDA=OFF for the CPU kernels only."
      PARENT_SCOPE)
    return()
  endif()
  list(POP_BACK _chosen _newest)
  list(APPEND _chosen "${_newest}+PTX")
  string(REPLACE ";" " " _chosen_text "${_chosen}")
  set(${chosen_var} "${_chosen_text}" PARENT_SCOPE)
endfunction()

# CUDA code is compiled with LibTorch's C++ standard. CMake < 3.26 does not know nvcc's flag for
# C++20 ("Target requires the language dialect CUDA20 ... CMake does not know the flags"), which
# torch 2.15's CMake package asks for; nvcc >= 12 takes -std=c++20, so posenc names it for such a CMake.
function(posenc_cuda_standard standard)
  if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND NOT CMAKE_CUDA${standard}_STANDARD_COMPILE_OPTION)
    if(standard GREATER 17 AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
      message(FATAL_ERROR
        "posenc: this LibTorch needs C++${standard}, which nvcc "
        "${CMAKE_CUDA_COMPILER_VERSION} cannot compile (nvcc 12 or newer can). Install the CUDA "
        "toolkit of your torch's CUDA version, or configure with -DPOSENC_CUDA=OFF for the CPU "
        "kernels only.")
    endif()
    set(CMAKE_CUDA${standard}_STANDARD_COMPILE_OPTION "-std=c++${standard}" PARENT_SCOPE)
    set(CMAKE_CUDA${standard}_EXTENSION_COMPILE_OPTION "-std=c++${standard}" PARENT_SCOPE)
  endif()
endfunction()
