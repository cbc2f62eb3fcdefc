// CUDA kernels of the rotary family: the same operations as ../cpu, one pass over the data,
// float16/bfloat16 converted in registers. Arguments are checked on the host by the shared
// prepare_* functions (../op_arguments.h) before anything is launched.

#include "ops/backend_entries.h"
#include "ops/cuda/cuda_helpers.cuh"
#include "ops/kernel_helpers.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

// One thread per rotated pair; a second grid-stride pass copies the channels past the rotated
// ones (out-of-place only).
template <typename scalar_t, typename table_t>
__global__ void rotary_kernel(const scalar_t* x, scalar_t* out, const table_t* cos,
                              const table_t* sin, int64_t rows, int64_t head_dim, int64_t half,
                              RotaryRows where, bool interleaved, bool inverse, bool copy_rest) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const int64_t pairs = rows * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < pairs;
       index += stride) {
    const int64_t row = index / half;
    const int64_t k = index - row * half;
    const int64_t ia = row * head_dim + (interleaved ? 2 * k : k);
    const int64_t ib = row * head_dim + (interleaved ? 2 * k + 1 : k + half);
    const int64_t p = where.position(row);
    const acc_t a = static_cast<acc_t>(x[ia]);
    const acc_t b = static_cast<acc_t>(x[ib]);
    if (p < 0) { // padding: not rotated
      out[ia] = x[ia];
      out[ib] = x[ib];
      continue;
    }
    const acc_t c = static_cast<acc_t>(cos[p * half + k]);
    const acc_t s =
        inverse ? -static_cast<acc_t>(sin[p * half + k]) : static_cast<acc_t>(sin[p * half + k]);
    out[ia] = static_cast<scalar_t>(a * c - b * s);
    out[ib] = static_cast<scalar_t>(a * s + b * c);
  }
  if (copy_rest) {
    const int64_t rest = head_dim - 2 * half;
    for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         index < rows * rest; index += stride) {
      const int64_t row = index / rest;
      const int64_t c = 2 * half + (index - row * rest);
      out[row * head_dim + c] = x[row * head_dim + c];
    }
  }
}

void run_rotary(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                bool inverse) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = call.batch * call.length * call.heads;
  if (rows == 0) {
    return;
  }
  const RotaryRows where = RotaryRows::of(call);
  const bool copy_rest = !x.is_same(out) && 2 * call.half < call.head_dim;
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_apply_rotary_cuda", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          rotary_kernel<scalar_t, table_t><<<blocks_for(rows * call.half), kThreads, 0, stream>>>(
              x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), c, sin.data_ptr<table_t>(), rows,
              call.head_dim, call.half, where, interleaved, inverse, copy_rest);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
}

// One thread per rotated pair of a query or key head (token t, head slot j < Hq + Hk, pair k);
// channels past the rotated ones are copied (out-of-place only) by a second grid-stride pass over
// (token, head slot, channel).
template <typename scalar_t, typename table_t>
__global__ void rotary_qk_kernel(OperandRows<scalar_t> q, OperandRows<scalar_t> k,
                                 const table_t* cos, const table_t* sin, int64_t tokens,
                                 int64_t length, int64_t half, RotaryRows where, bool interleaved,
                                 bool inverse, int64_t rest_width) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const int64_t slots = q.heads + k.heads;
  const int64_t pairs = tokens * slots * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t index = first; index < pairs; index += stride) {
    const int64_t pair = index % half;
    const int64_t slot = (index / half) % slots;
    const int64_t t = index / (half * slots);
    const bool is_q = slot < q.heads;
    const OperandRows<scalar_t>& side = is_q ? q : k;
    const int64_t h = is_q ? slot : slot - q.heads;
    const int64_t b = t / length;
    const int64_t l = t - b * length;
    const scalar_t* xi = side.in + side.in_rows.row(b, l, h);
    scalar_t* oi = side.out + side.out_rows.row(b, l, h);
    const int64_t ia = interleaved ? 2 * pair : pair;
    const int64_t ib = interleaved ? 2 * pair + 1 : pair + half;
    const int64_t p = where.position(t);
    const acc_t a = static_cast<acc_t>(xi[ia]);
    const acc_t bv = static_cast<acc_t>(xi[ib]);
    if (p < 0) { // padding: not rotated
      oi[ia] = xi[ia];
      oi[ib] = xi[ib];
      continue;
    }
    const acc_t c = static_cast<acc_t>(cos[p * half + pair]);
    const acc_t s = inverse ? -static_cast<acc_t>(sin[p * half + pair])
                            : static_cast<acc_t>(sin[p * half + pair]);
    oi[ia] = static_cast<scalar_t>(a * c - bv * s);
    oi[ib] = static_cast<scalar_t>(a * s + bv * c);
  }
  if (rest_width > 0) { // out-of-place: channels 2 * half .. head_dim - 1 of each head
    for (int64_t index = first; index < tokens * slots * rest_width; index += stride) {
      const int64_t channel = 2 * half + index % rest_width;
      const int64_t slot = (index / rest_width) % slots;
      const int64_t t = index / (rest_width * slots);
      const bool is_q = slot < q.heads;
      const OperandRows<scalar_t>& side = is_q ? q : k;
      if (channel >= side.head_dim) {
        continue;
      }
      const int64_t h = is_q ? slot : slot - q.heads;
      const int64_t b = t / length;
      const int64_t l = t - b * length;
      side.out[side.out_rows.row(b, l, h) + channel] = side.in[side.in_rows.row(b, l, h) + channel];
    }
  }
}

void run_rotary_qk(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                   bool interleaved, bool inverse) {
  const c10::cuda::CUDAGuard guard(q.in.device());
  const int64_t tokens = call.batch * call.length;
  const int64_t slots = q.heads + k.heads;
  if (tokens == 0 || slots == 0) {
    return;
  }
  const RotaryRows where = RotaryRows::tokens_of(call);
  const bool in_place = q.in.is_same(q.out);
  const int64_t rest_width =
      in_place ? 0 : std::max(q.head_dim, k.head_dim) - 2 * call.half; // widest tail
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, q.in.scalar_type(), "posenc_apply_rotary_qk_cuda", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          rotary_qk_kernel<scalar_t, table_t>
              <<<blocks_for(tokens * slots * call.half), kThreads, 0, stream>>>(
                  operand_rows<scalar_t>(q, call.heads_first),
                  operand_rows<scalar_t>(k, call.heads_first),
                  c, sin.data_ptr<table_t>(), tokens, call.length, call.half, where, interleaved,
                  inverse, rest_width);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("apply_rotary", TORCH_FN((apply_rotary_kernel<cuda::run_rotary, cuda::empty_cuda>)));
  m.impl("apply_rotary_",
         TORCH_FN((apply_rotary_inplace_kernel<cuda::run_rotary, cuda::empty_cuda>)));
  m.impl("apply_rotary_qk",
         TORCH_FN((apply_rotary_qk_kernel<cuda::run_rotary_qk, cuda::empty_cuda>)));
  m.impl("apply_rotary_qk_",
         TORCH_FN((apply_rotary_qk_inplace_kernel<cuda::run_rotary_qk, cuda::empty_cuda>)));
}

} // namespace ops
} // namespace posenc
