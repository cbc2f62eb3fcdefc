# The CPU libraries of a CUDA build of torch, without its TorchConfig.cmake (which requires a CUDA
# toolkit): included by posencFindTorch.cmake with _posenc_torch_root, the torch package's root
# (<site-packages>/torch). Sets what find_package(Torch) sets and posenc reads: TORCH_LIBRARIES (an
# imported target, torch::cpu_only), TORCH_LIBRARY, c10_LIBRARY, TORCH_INCLUDE_DIRS,
# TORCH_INSTALL_PREFIX, Torch_DIR and Torch_VERSION.

set(TORCH_INSTALL_PREFIX "${_posenc_torch_root}")
set(Torch_DIR "${_posenc_torch_root}/share/cmake/Torch")
set(TORCH_INCLUDE_DIRS "${_posenc_torch_root}/include"
                       "${_posenc_torch_root}/include/torch/csrc/api/include")
# (own cache names: TorchConfig.cmake caches TORCH_LIBRARY and c10_LIBRARY, and a build directory
# reconfigured with the other route must not keep the other's paths)
find_library(POSENC_TORCH_CPU_LIBRARY torch_cpu PATHS "${_posenc_torch_root}/lib" NO_DEFAULT_PATH
             REQUIRED)
find_library(POSENC_C10_LIBRARY c10 PATHS "${_posenc_torch_root}/lib" NO_DEFAULT_PATH REQUIRED)
set(TORCH_LIBRARY "${POSENC_TORCH_CPU_LIBRARY}")
set(c10_LIBRARY "${POSENC_C10_LIBRARY}")

# The version, from the package's version file (PACKAGE_VERSION "2.11.0").
file(STRINGS "${Torch_DIR}/TorchConfigVersion.cmake" _posenc_version_line
     REGEX "set\\(PACKAGE_VERSION \"[0-9.]+")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" Torch_VERSION "${_posenc_version_line}")

# torch_cpu's interface (Caffe2Targets.cmake): its distributed features, and the C++ ABI torch was
# built with: TorchConfig.cmake's TORCH_CXX_FLAGS where it names it (torch < 2.7), else the torch
# package asked when a Python is known, else the new ABI (torch >= 2.7 knows no other).
set(_posenc_torch_definitions USE_DISTRIBUTED USE_C10D_GLOO USE_RPC USE_TENSORPIPE)
set(_posenc_abi 1)
file(STRINGS "${Torch_DIR}/TorchConfig.cmake" _posenc_abi_line REGEX "_GLIBCXX_USE_CXX11_ABI=[01]")
if(_posenc_abi_line MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
  set(_posenc_abi ${CMAKE_MATCH_1})
  set(_posenc_abi_known ON)
endif()
foreach(_python IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
  if(_python AND NOT _posenc_abi_known)
    execute_process(COMMAND "${_python}" -c "import torch; print(int(torch.compiled_with_cxx11_abi()))"
                    OUTPUT_VARIABLE _posenc_asked OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _posenc_asked_status ERROR_QUIET)
    if(_posenc_asked_status EQUAL 0 AND _posenc_asked MATCHES "^[01]$")
      set(_posenc_abi ${_posenc_asked})
      break()
    endif()
  endif()
endforeach()
list(APPEND _posenc_torch_definitions _GLIBCXX_USE_CXX11_ABI=${_posenc_abi})

if(NOT TARGET torch::cpu_only)
  add_library(torch::cpu_only INTERFACE IMPORTED)
  set_target_properties(torch::cpu_only PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}"
    INTERFACE_COMPILE_DEFINITIONS "${_posenc_torch_definitions}"
    INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARY};${c10_LIBRARY}")
endif()
set(TORCH_LIBRARIES torch::cpu_only)
message(STATUS "posenc: CPU libraries of torch ${Torch_VERSION} at ${_posenc_torch_root}, without "
               "TorchConfig.cmake (no CUDA toolkit needed)")
