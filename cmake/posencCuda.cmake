# What posenc chooses for its CUDA code where LibTorch's CMake package would choose something the
# installed nvcc cannot build (posencFindTorch.cmake, src/CMakeLists.txt):
#
#   posenc_choose_cuda_architectures(<torch root>)   before find_package(Torch)
#   posenc_cuda_standard(<standard>)                 after enable_language(CUDA)

# Sets ENV{TORCH_CUDA_ARCH_LIST} (which find_package(Torch) reads) when neither the environment nor
# the cache (POSENC_TORCH_CUDA_ARCH_LIST) names the architectures. LibTorch's default, its "Common"
# list, starts at compute 5.0, which nvcc 13 no longer builds: the build would stop in its first CUDA
# file. The choice: the architectures the torch package itself was built for
# (torch.cuda.get_arch_list(), from the Python that has that torch, when one is known), else Turing
# to Blackwell (7.5 8.0 8.6 8.9 9.0 10.0 12.0); of those, the ones this nvcc builds, with PTX for the
# newest so that later GPUs can run it. A list given by the user is checked against nvcc here, so
# that an architecture it cannot build stops the configure with what to do, not the build.
function(posenc_choose_cuda_architectures torch_root)
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_NVCC_EXECUTABLE)
    return()  # find_package(Torch) reports the missing toolkit itself
  endif()
  execute_process(COMMAND "${CUDAToolkit_NVCC_EXECUTABLE}" --list-gpu-arch
                  OUTPUT_VARIABLE _nvcc_out RESULT_VARIABLE _nvcc_status ERROR_QUIET)
  if(NOT _nvcc_status EQUAL 0)
    return()  # an nvcc too old for --list-gpu-arch (CUDA < 11): LibTorch's own choice stands
  endif()
  string(REGEX MATCHALL "compute_[0-9]+" _codes "${_nvcc_out}")
  set(_buildable "")
  foreach(_code IN LISTS _codes)
    string(REGEX REPLACE "compute_([0-9]+)([0-9])" "\\1.\\2" _arch "${_code}")
    list(APPEND _buildable "${_arch}")
  endforeach()

  set(_given "$ENV{TORCH_CUDA_ARCH_LIST}")
  if(NOT _given AND POSENC_TORCH_CUDA_ARCH_LIST)
    set(_given "${POSENC_TORCH_CUDA_ARCH_LIST}")
  endif()
  set(_wanted 7.5 8.0 8.6 8.9 9.0 10.0 12.0)
  set(_from "posenc's default")
  foreach(_python IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_python AND NOT _given)
      execute_process(
        COMMAND "${_python}" -c "import torch; print(' '.join(torch.cuda.get_arch_list()))"
        OUTPUT_VARIABLE _torch_arches OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _torch_status ERROR_QUIET)
      if(_torch_status EQUAL 0 AND _torch_arches MATCHES "sm_[0-9]+")
        string(REGEX MATCHALL "sm_[0-9]+" _sms "${_torch_arches}")
        set(_wanted "")
        foreach(_sm IN LISTS _sms)
          string(REGEX REPLACE "sm_([0-9]+)([0-9])" "\\1.\\2" _arch "${_sm}")
          list(APPEND _wanted "${_arch}")
        endforeach()
        set(_from "torch.cuda.get_arch_list() of ${_python}")
        break()
      endif()
    endif()
  endforeach()
  posenc_select_cuda_architectures(_chosen _error BUILDABLE ${_buildable} WANTED ${_wanted} GIVEN "${_given}"
    NVCC "${CUDAToolkit_VERSION}, ${CUDAToolkit_NVCC_EXECUTABLE}" FROM "${_from}")
  if(_error)
    message(FATAL_ERROR "posenc: ${_error}")
  endif()
  if(_given)
    return()
  endif()
  message(STATUS "posenc: CUDA architectures ${_chosen} (${_from}, as far as nvcc "
                 "${CUDAToolkit_VERSION} builds them; set TORCH_CUDA_ARCH_LIST to choose)")
  set(ENV{TORCH_CUDA_ARCH_LIST} "${_chosen}")
  set(POSENC_TORCH_CUDA_ARCH_LIST "${_chosen}" CACHE STRING
      "TORCH_CUDA_ARCH_LIST of the first configure (the CUDA architectures compiled for)" FORCE)
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
        "posenc: LibTorch ${POSENC_TORCH_VERSION} needs C++${standard}, which nvcc "
        "${CMAKE_CUDA_COMPILER_VERSION} cannot compile (nvcc 12 or newer can). Install the CUDA "
        "toolkit of your torch's CUDA version, or configure with -DPOSENC_CUDA=OFF for the CPU "
        "kernels only.")
    endif()
    set(CMAKE_CUDA${standard}_STANDARD_COMPILE_OPTION "-std=c++${standard}" PARENT_SCOPE)
    set(CMAKE_CUDA${standard}_EXTENSION_COMPILE_OPTION "-std=c++${standard}" PARENT_SCOPE)
  endif()
endfunction()
