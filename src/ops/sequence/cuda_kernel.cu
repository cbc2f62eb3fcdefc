// CUDA kernels of the positional-encoding family: the thread bodies of ../kernels (the ones the
// tests run on the CPU through an emulated grid) launched on the current stream. Arguments are
// checked on the host by the shared prepare_* functions (arguments.h), without reading
// device data; positions are checked where the threads read them.

#include "ops/common/backend_entries.h"
#include "ops/common/cuda_helpers.cuh"
#include "ops/sequence/backend_entries.h"
#include "ops/sequence/kernels.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

void run_add(const at::Tensor& x, at::Tensor& out, const TableCall& call) {
  const c10::cuda::CUDAGuard guard(x.device());
  kernels::run_add_grid(x, out, call, Launch());
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("add_position_table",
         TORCH_FN((add_position_table_kernel<cuda::run_add, cuda::empty_cuda>)));
  m.impl("add_position_table_",
         TORCH_FN((add_position_table_inplace_kernel<cuda::run_add, cuda::empty_cuda>)));
  m.impl("add_position_table_out",
         TORCH_FN((add_position_table_out_kernel<cuda::run_add, cuda::empty_cuda>)));
}

} // namespace ops
} // namespace posenc
