# ctest architecture.cuda_architectures (cmake -P): the CUDA architectures posenc picks when
# TORCH_CUDA_ARCH_LIST is not set, and its refusals, for nvcc 13's list (which has no compute < 7.5)
# and nvcc 12's, without nvcc or a GPU (posenc_select_cuda_architectures, cmake/posencCuda.cmake).
cmake_minimum_required(VERSION 3.18)
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/posencCuda.cmake")

set(nvcc13 7.5 8.0 8.6 8.7 8.8 8.9 9.0 10.0 11.0 10.3 12.0 12.1)
set(nvcc12 5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 7.5 8.0 8.6 8.7 8.9 9.0)
set(torch_2_15 7.5 8.0 8.6 9.0 10.0 12.0)   # torch.cuda.get_arch_list() of torch 2.15.0+cu132
set(torch_cu126 5.0 6.0 7.0 7.5 8.0 8.6 9.0) # of a CUDA 12.6 build

function(expect what chosen error expected_chosen expected_error)
  if(NOT chosen STREQUAL expected_chosen)
    message(FATAL_ERROR "${what}: chose '${chosen}', expected '${expected_chosen}'")
  endif()
  if(expected_error AND NOT error MATCHES "${expected_error}")
    message(FATAL_ERROR "${what}: error '${error}' does not match '${expected_error}'")
  elseif(NOT expected_error AND error)
    message(FATAL_ERROR "${what}: unexpected error '${error}'")
  endif()
  message(STATUS "${what}: ok")
endfunction()

# torch's own list, as far as nvcc builds it, PTX for the newest
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED ${torch_2_15} GIVEN "" NVCC "13.0" FROM "torch")
expect("torch 2.15 with nvcc 13" "${chosen}" "${error}" "7.5 8.0 8.6 9.0 10.0 12.0+PTX" "")
# LibTorch's "Common" start (5.0, 6.0, 7.0) dropped where nvcc 13 cannot build it
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED ${torch_cu126} GIVEN "" NVCC "13.0" FROM "torch")
expect("a cu126 list with nvcc 13" "${chosen}" "${error}" "7.5 8.0 8.6 9.0+PTX" "")
# nvcc 12 builds what nvcc 13 dropped, but not Blackwell
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc12} WANTED ${torch_2_15} GIVEN "" NVCC "12.4" FROM "torch")
expect("torch 2.15's list with nvcc 12.4" "${chosen}" "${error}" "7.5 8.0 8.6 9.0+PTX" "")
# nothing in common: an error that says what to set
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED 5.0 6.1 GIVEN "" NVCC "13.0" FROM "torch")
expect("only old architectures wanted" "${chosen}" "${error}" "" "no CUDA architecture both wanted \\(5.0 6.1, from torch\\).*TORCH_CUDA_ARCH_LIST.*POSENC_CUDA=OFF")
# a list given by the user: kept as given when nvcc builds all of it (suffixes included) ...
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED ${torch_2_15} GIVEN "9.0a;10.0+PTX" NVCC "13.0" FROM "torch")
expect("a buildable TORCH_CUDA_ARCH_LIST" "${chosen}" "${error}" "9.0a;10.0+PTX" "")
# ... and refused, naming the architecture, when nvcc cannot build one of it
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED ${torch_2_15} GIVEN "5.0 9.0" NVCC "13.0" FROM "torch")
expect("TORCH_CUDA_ARCH_LIST naming compute 5.0 for nvcc 13" "${chosen}" "${error}" "" "names compute 5.0, which this nvcc \\(13.0\\) cannot build; it builds 7.5 8.0")
# LibTorch's keywords and names are LibTorch's to expand: passed on unchecked
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED ${torch_2_15} GIVEN "Hopper" NVCC "13.0" FROM "torch")
expect("a named architecture" "${chosen}" "${error}" "Hopper" "")
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED ${torch_2_15} GIVEN "8.0 8.6+PTX" NVCC "13.0" FROM "torch")
expect("a list with +PTX" "${chosen}" "${error}" "8.0 8.6+PTX" "")
# the GPUs of the machine (one wanted architecture): that one, with PTX
posenc_select_cuda_architectures(chosen error BUILDABLE ${nvcc13} WANTED 9.0 GIVEN "" NVCC "13.0" FROM "gpus")
expect("one GPU" "${chosen}" "${error}" "9.0+PTX" "")
# nvcc's and torch's spellings read as TORCH_CUDA_ARCH_LIST writes them, each once
posenc_architectures_of(read "compute" "compute_75\ncompute_90\ncompute_100\ncompute_120\n")
expect("nvcc --list-gpu-arch read" "${read}" "" "7.5;9.0;10.0;12.0" "")
posenc_architectures_of(read "sm" "torch sm_80 sm_90 sm_90 sm_120")
expect("torch's flags read" "${read}" "" "8.0;9.0;12.0" "")
