// CUDA kernels of the positional-encoding family: the same operations as ../cpu, one pass over the
// data, float16/bfloat16 converted in registers. Arguments are checked on the host by the shared
// prepare_* functions (../op_arguments.h) before anything is launched.
// Loads and stores are 16 bytes wide where the row width and the pointers allow.

#include "ops/backend_entries.h"
#include "ops/cuda/cuda_helpers.cuh"
#include "ops/kernel_helpers.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

template <typename scalar_t, typename table_t, int N>
__global__ void add_rows_kernel(const scalar_t* x, scalar_t* out, const table_t* table,
                                int64_t width, int64_t packs, SequenceRows where, double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  const bool unit = scale == 1.0;
  const int64_t per_row = width / N;
  for (int64_t pack = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; pack < packs;
       pack += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = pack / per_row;
    const int64_t column = (pack - row * per_row) * N;
    const int64_t p = where.position(row);
    const Pack<scalar_t, N> in =
        *reinterpret_cast<const Pack<scalar_t, N>*>(x + row * width + column);
    Pack<scalar_t, N> result;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const acc_t t = p < 0 ? acc_t(0) : static_cast<acc_t>(table[p * width + column + k]);
      const acc_t v = static_cast<acc_t>(in.value[k]);
      result.value[k] = static_cast<scalar_t>(unit ? v + t : t + s * v);
    }
    *reinterpret_cast<Pack<scalar_t, N>*>(out + row * width + column) = result;
  }
}

template <typename scalar_t, typename table_t>
void launch_add(const scalar_t* x, scalar_t* out, const table_t* table, int64_t width, int64_t rows,
                SequenceRows where, double scale) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int n = vector_width<scalar_t>(width, {x, out});
  const int64_t packs = rows * width / n;
  if (packs == 0) {
    return;
  }
  if (n == 8) {
    add_rows_kernel<scalar_t, table_t, 8>
        <<<blocks_for(packs), kThreads, 0, stream>>>(x, out, table, width, packs, where, scale);
  } else if (n == 4) {
    add_rows_kernel<scalar_t, table_t, 4>
        <<<blocks_for(packs), kThreads, 0, stream>>>(x, out, table, width, packs, where, scale);
  } else if (n == 2) {
    add_rows_kernel<scalar_t, table_t, 2>
        <<<blocks_for(packs), kThreads, 0, stream>>>(x, out, table, width, packs, where, scale);
  } else {
    add_rows_kernel<scalar_t, table_t, 1>
        <<<blocks_for(packs), kThreads, 0, stream>>>(x, out, table, width, packs, where, scale);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void run_add(const at::Tensor& x, at::Tensor& out, const TableCall& call) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t width = call.width;
  const int64_t rows = x.numel() == 0 ? 0 : x.numel() / width;
  const SequenceRows where = SequenceRows::of(call);
  const at::Tensor table = call.kernel_table();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "posenc_add_position_table_cuda", [&] {
                                    with_table_data(table, [&](const auto* t) {
                                      launch_add(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                                 t, width, rows, where, call.scale);
                                    });
                                  });
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
