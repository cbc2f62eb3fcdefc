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
  string(REPLACE ";" " " _buildable_text "${_buildable}")

  set(_given "$ENV{TORCH_CUDA_ARCH_LIST}")
  if(NOT _given AND POSENC_TORCH_CUDA_ARCH_LIST)
    set(_given "${POSENC_TORCH_CUDA_ARCH_LIST}")
  endif()
  if(_given)
    string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _asked "${_given}")
    foreach(_arch IN LISTS _asked)
      if(NOT _arch IN_LIST _buildable)
        message(FATAL_ERROR
          "posenc: TORCH_CUDA_ARCH_LIST=\"${_given}\" names compute ${_arch}, which this nvcc "
          "(${CUDAToolkit_VERSION}, ${CUDAToolkit_NVCC_EXECUTABLE}) cannot build; it builds "
          "${_buildable_text}. Set TORCH_CUDA_ARCH_LIST to some of those (e.g. your GPU's: "
          "python -c 'import torch; print(torch.cuda.get_device_capability())'), or configure with "
          "-DPOSENC_CUDA=OFF for the CPU kernels only.")
      endif()
    endforeach()
    return()
  endif()

  set(_wanted 7.5 8.0 8.6 8.9 9.0 10.0 12.0)
  set(_from "posenc's default")
  foreach(_python IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_python)
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
  set(_chosen "")
  foreach(_arch IN LISTS _wanted)
    if(_arch IN_LIST _buildable)
      list(APPEND _chosen "${_arch}")
    endif()
  endforeach()
  if(NOT _chosen)
    string(REPLACE ";" " " _wanted_text "${_wanted}")
    message(FATAL_ERROR
      "posenc: no CUDA architecture both wanted (${_wanted_text}, from ${_from}) and buildable by "
      "this nvcc (${CUDAToolkit_VERSION}: ${_buildable_text}). Set TORCH_CUDA_ARCH_LIST to your "
      "GPU's architecture, install the CUDA toolkit of your torch's CUDA version, or configure with "
      "-DPOSENC_CUDA=OFF for the CPU kernels only.")
  endif()
  list(POP_BACK _chosen _newest)
  list(APPEND _chosen "${_newest}+PTX")
  string(REPLACE ";" " " _chosen_text "${_chosen}")
  message(STATUS "posenc: CUDA architectures ${_chosen_text} (${_from}, as far as nvcc "
                 "${CUDAToolkit_VERSION} builds them; set TORCH_CUDA_ARCH_LIST to choose)")
  set(ENV{TORCH_CUDA_ARCH_LIST} "${_chosen_text}")
  set(POSENC_TORCH_CUDA_ARCH_LIST "${_chosen_text}" CACHE STRING
      "TORCH_CUDA_ARCH_LIST of the first configure (the CUDA architectures compiled for)" FORCE)
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
