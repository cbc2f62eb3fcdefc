// Hand-written CUDA kernels: the same operations as ../cpu, one pass over the data with 16-byte
// vectorized loads and stores where the row width allows, float16/bfloat16 converted in registers,
// dropout from Philox (curand) seeded by the default CUDA generator like ATen's fused dropout.
// Arguments are checked on the host by the shared prepare_* functions; layouts the kernels do not
// cover (non-contiguous inputs, 16-bit tables) go to the composite kernels.

#include "ops/composite/kernels.h"
#include "ops/cpu/loops.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/cuda/PhiloxUtils.cuh>

#include <curand_kernel.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// N values of T moved as one aligned access (16 bytes for the vectorized paths).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T value[N];
};

// Elements per thread for 16-byte accesses of scalar_t, if the row width and every base pointer
// allow it; 1 otherwise.
template <typename scalar_t>
int vector_width(int64_t width, std::initializer_list<const void*> pointers) {
  constexpr int n = 16 / sizeof(scalar_t);
  if (width % n != 0) {
    return 1;
  }
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      return 1;
    }
  }
  return n;
}

int blocks_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  // Enough blocks to fill the device several times; the kernels loop over the rest.
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(blocks, 1), int64_t{1} << 16));
}

SequenceRows sequence_rows(const TableCall& call, int64_t offset, bool batch_first) {
  const bool given = call.positions.defined();
  return {call.batch,
          call.length,
          batch_first,
          offset,
          given ? call.positions.data_ptr<int64_t>() : nullptr,
          given && call.positions.dim() == 2};
}

// --- x * scale + table[position] ---------------------------------------------------------------

template <typename scalar_t, typename table_t, int N>
__global__ void add_rows_kernel(const scalar_t* x,
                                scalar_t* out,
                                const table_t* table,
                                int64_t width,
                                int64_t packs,
                                SequenceRows where,
                                double scale) {
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
void launch_add(const scalar_t* x,
                scalar_t* out,
                const table_t* table,
                int64_t width,
                int64_t rows,
                SequenceRows where,
                double scale) {
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

void run_add(const at::Tensor& x,
             at::Tensor& out,
             const TableCall& call,
             int64_t offset,
             bool batch_first,
             double scale) {
  const int64_t width = x.size(2);
  const int64_t rows = x.numel() == 0 ? 0 : x.numel() / width;
  const SequenceRows where = sequence_rows(call, offset, batch_first);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_add_position_table_cuda", [&] {
        if (call.table.scalar_type() == at::kFloat) {
          launch_add(x.data_ptr<scalar_t>(),
                     out.data_ptr<scalar_t>(),
                     call.table.data_ptr<float>(),
                     width,
                     rows,
                     where,
                     scale);
        } else {
          launch_add(x.data_ptr<scalar_t>(),
                     out.data_ptr<scalar_t>(),
                     call.table.data_ptr<double>(),
                     width,
                     rows,
                     where,
                     scale);
        }
      });
}

at::Tensor add_position_table_cuda(const at::Tensor& x,
                                   const at::Tensor& table,
                                   int64_t offset,
                                   bool batch_first,
                                   OptionalTensor positions,
                                   double scale) {
  const c10::cuda::CUDAGuard guard(x.device());
  const TableCall call = prepare_table_call(
      "posenc::add_position_table", x, table, offset, positions, batch_first, scale);
  if (!x.is_contiguous() || !hand_kernels_read(call.table)) {
    return composite::add_position_table(x, table, offset, batch_first, positions, scale);
  }
  at::Tensor out = at::empty(x.sizes(), x.options());
  run_add(x, out, call, offset, batch_first, scale);
  return out;
}

void add_position_table_inplace_cuda(at::Tensor& x,
                                     const at::Tensor& table,
                                     int64_t offset,
                                     bool batch_first,
                                     OptionalTensor positions,
                                     double scale) {
  const c10::cuda::CUDAGuard guard(x.device());
  const TableCall call = prepare_table_call(
      "posenc::add_position_table_", x, table, offset, positions, batch_first, scale);
  if (!x.is_contiguous() || !hand_kernels_read(call.table)) {
    composite::add_position_table_(x, table, offset, batch_first, positions, scale);
    return;
  }
  run_add(x, x, call, offset, batch_first, scale);
}

void add_position_table_out_cuda(const at::Tensor& x,
                                 const at::Tensor& table,
                                 int64_t offset,
                                 bool batch_first,
                                 OptionalTensor positions,
                                 double scale,
                                 at::Tensor& out) {
  constexpr const char* who = "posenc::add_position_table_out";
  const c10::cuda::CUDAGuard guard(x.device());
  const TableCall call = prepare_table_call(who, x, table, offset, positions, batch_first, scale);
  prepare_out(who, out, x);
  if (!x.is_contiguous() || !out.is_contiguous() || !hand_kernels_read(call.table)) {
    composite::add_position_table_out(x, table, offset, batch_first, positions, scale, out);
    return;
  }
  run_add(x, out, call, offset, batch_first, scale);
}

// --- rotary ------------------------------------------------------------------------------------

// One thread per rotated pair; a second grid-stride pass copies the channels past the rotated
// ones (out-of-place only).
template <typename scalar_t, typename table_t>
__global__ void rotary_kernel(const scalar_t* x,
                              scalar_t* out,
                              const table_t* cos,
                              const table_t* sin,
                              int64_t rows,
                              int64_t head_dim,
                              int64_t half,
                              RotaryRows where,
                              bool interleaved,
                              bool inverse,
                              bool copy_rest) {
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
         index < rows * rest;
         index += stride) {
      const int64_t row = index / rest;
      const int64_t c = 2 * half + (index - row * rest);
      out[row * head_dim + c] = x[row * head_dim + c];
    }
  }
}

void run_rotary(const at::Tensor& x,
                at::Tensor& out,
                const at::Tensor& cos,
                const at::Tensor& sin,
                const RotaryCall& call,
                int64_t offset,
                bool interleaved,
                bool heads_first,
                bool inverse) {
  const int64_t rows = call.batch * call.length * call.heads;
  if (rows == 0) {
    return;
  }
  const bool given = call.positions.defined();
  const RotaryRows where{call.length,
                         call.heads,
                         heads_first,
                         offset,
                         given ? call.positions.data_ptr<int64_t>() : nullptr,
                         given && call.positions.dim() == 2};
  const bool copy_rest = !x.is_same(out) && 2 * call.half < call.head_dim;
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_apply_rotary_cuda", [&] {
        if (cos.scalar_type() == at::kFloat) {
          rotary_kernel<scalar_t, float>
              <<<blocks_for(rows * call.half), kThreads, 0, stream>>>(x.data_ptr<scalar_t>(),
                                                                      out.data_ptr<scalar_t>(),
                                                                      cos.data_ptr<float>(),
                                                                      sin.data_ptr<float>(),
                                                                      rows,
                                                                      call.head_dim,
                                                                      call.half,
                                                                      where,
                                                                      interleaved,
                                                                      inverse,
                                                                      copy_rest);
        } else {
          rotary_kernel<scalar_t, double>
              <<<blocks_for(rows * call.half), kThreads, 0, stream>>>(x.data_ptr<scalar_t>(),
                                                                      out.data_ptr<scalar_t>(),
                                                                      cos.data_ptr<double>(),
                                                                      sin.data_ptr<double>(),
                                                                      rows,
                                                                      call.head_dim,
                                                                      call.half,
                                                                      where,
                                                                      interleaved,
                                                                      inverse,
                                                                      copy_rest);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

bool rotary_fast(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x.is_contiguous() && cos.is_contiguous() && sin.is_contiguous() &&
         (cos.scalar_type() == at::kFloat || cos.scalar_type() == at::kDouble);
}

at::Tensor apply_rotary_cuda(const at::Tensor& x,
                             const at::Tensor& cos,
                             const at::Tensor& sin,
                             int64_t offset,
                             OptionalTensor positions,
                             bool interleaved,
                             bool heads_first,
                             bool inverse) {
  const c10::cuda::CUDAGuard guard(x.device());
  const RotaryCall call =
      prepare_rotary_call("posenc::apply_rotary", x, cos, sin, offset, positions, heads_first);
  if (!rotary_fast(x, cos, sin)) {
    return composite::apply_rotary(
        x, cos, sin, offset, positions, interleaved, heads_first, inverse);
  }
  at::Tensor out = at::empty(x.sizes(), x.options());
  run_rotary(x, out, cos, sin, call, offset, interleaved, heads_first, inverse);
  return out;
}

void apply_rotary_inplace_cuda(at::Tensor& x,
                               const at::Tensor& cos,
                               const at::Tensor& sin,
                               int64_t offset,
                               OptionalTensor positions,
                               bool interleaved,
                               bool heads_first,
                               bool inverse) {
  const c10::cuda::CUDAGuard guard(x.device());
  const RotaryCall call =
      prepare_rotary_call("posenc::apply_rotary_", x, cos, sin, offset, positions, heads_first);
  if (!rotary_fast(x, cos, sin)) {
    composite::apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
    return;
  }
  run_rotary(x, x, cos, sin, call, offset, interleaved, heads_first, inverse);
}

// --- token embedding + positions + dropout ------------------------------------------------------

// Each thread handles 4 consecutive elements of a row (the 4 uniforms of one curand_uniform4 call).
template <typename scalar_t, typename table_t>
__global__ void token_kernel(const int64_t* tokens,
                             const scalar_t* weight,
                             const table_t* table,
                             scalar_t* out,
                             bool* mask,
                             int64_t width,
                             int64_t groups,
                             SequenceRows where,
                             double scale,
                             float keep,
                             at::PhiloxCudaState philox) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  const bool unit = scale == 1.0;
  const acc_t inverse_keep =
      keep > 0.0f ? static_cast<acc_t>(1.0 / static_cast<double>(keep)) : acc_t(0);
  const int64_t per_row = (width + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t group = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; group < groups;
       group += stride) {
    const int64_t row = group / per_row;
    const int64_t first = (group - row * per_row) * 4;
    const scalar_t* w = weight + tokens[row] * width;
    const int64_t p = where.position(row);
    float4 uniform = make_float4(0.f, 0.f, 0.f, 0.f);
    if (mask != nullptr) {
      const auto seeds = at::cuda::philox::unpack(philox);
      curandStatePhilox4_32_10_t state;
      curand_init(std::get<0>(seeds), group, std::get<1>(seeds), &state);
      uniform = curand_uniform4(&state);
    }
    const float draws[4] = {uniform.x, uniform.y, uniform.z, uniform.w};
    for (int k = 0; k < 4 && first + k < width; ++k) {
      const int64_t c = first + k;
      const acc_t t = p < 0 ? acc_t(0) : static_cast<acc_t>(table[p * width + c]);
      const acc_t v = static_cast<acc_t>(w[c]);
      acc_t value = unit ? v + t : t + s * v;
      if (mask != nullptr) {
        // curand_uniform4 draws from (0, 1]: keep when the draw is <= keep, probability `keep`.
        const bool kept = draws[k] <= keep;
        mask[row * width + c] = kept;
        value = kept ? value * inverse_keep : acc_t(0);
      }
      out[row * width + c] = static_cast<scalar_t>(value);
    }
  }
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_cuda(const at::Tensor& tokens,
                                                                     const at::Tensor& weight,
                                                                     const at::Tensor& table,
                                                                     int64_t offset,
                                                                     bool batch_first,
                                                                     OptionalTensor positions,
                                                                     double scale,
                                                                     int64_t padding_idx,
                                                                     double dropout,
                                                                     bool train) {
  const c10::cuda::CUDAGuard guard(weight.device());
  const TableCall call = prepare_token_call("posenc::token_and_position_embedding",
                                            tokens,
                                            weight,
                                            table,
                                            offset,
                                            positions,
                                            batch_first,
                                            scale,
                                            dropout);
  if (!tokens.is_contiguous() || !weight.is_contiguous() || !hand_kernels_read(call.table)) {
    return composite::token_and_position_embedding(
        tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train);
  }
  const int64_t width = weight.size(1);
  at::Tensor out = at::empty({tokens.size(0), tokens.size(1), width}, weight.options());
  const bool drop = train && dropout > 0.0;
  at::Tensor mask =
      at::empty(drop ? out.sizes() : at::IntArrayRef{0}, weight.options().dtype(at::kBool));
  const int64_t groups = tokens.numel() * ((width + 3) / 4);
  if (groups == 0) {
    return {out, mask};
  }
  at::PhiloxCudaState philox;
  if (drop) {
    auto* generator = at::get_generator_or_default<at::CUDAGeneratorImpl>(
        c10::nullopt, at::cuda::detail::getDefaultCUDAGenerator());
    std::lock_guard<std::mutex> lock(generator->mutex_);
    philox =
        generator->philox_cuda_state(4); // each thread draws 4 numbers from its own subsequence
  }
  const SequenceRows where = sequence_rows(call, offset, batch_first);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, weight.scalar_type(), "posenc_token_and_position_cuda", [&] {
        bool* mask_data = drop ? mask.data_ptr<bool>() : nullptr;
        const float keep = static_cast<float>(1.0 - dropout);
        if (call.table.scalar_type() == at::kFloat) {
          token_kernel<scalar_t, float>
              <<<blocks_for(groups), kThreads, 0, stream>>>(tokens.data_ptr<int64_t>(),
                                                            weight.data_ptr<scalar_t>(),
                                                            call.table.data_ptr<float>(),
                                                            out.data_ptr<scalar_t>(),
                                                            mask_data,
                                                            width,
                                                            groups,
                                                            where,
                                                            scale,
                                                            keep,
                                                            philox);
        } else {
          token_kernel<scalar_t, double>
              <<<blocks_for(groups), kThreads, 0, stream>>>(tokens.data_ptr<int64_t>(),
                                                            weight.data_ptr<scalar_t>(),
                                                            call.table.data_ptr<double>(),
                                                            out.data_ptr<scalar_t>(),
                                                            mask_data,
                                                            width,
                                                            groups,
                                                            where,
                                                            scale,
                                                            keep,
                                                            philox);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
  return {out, mask};
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("add_position_table", TORCH_FN(cuda::add_position_table_cuda));
  m.impl("add_position_table_", TORCH_FN(cuda::add_position_table_inplace_cuda));
  m.impl("add_position_table_out", TORCH_FN(cuda::add_position_table_out_cuda));
  m.impl("apply_rotary", TORCH_FN(cuda::apply_rotary_cuda));
  m.impl("apply_rotary_", TORCH_FN(cuda::apply_rotary_inplace_cuda));
  m.impl("token_and_position_embedding", TORCH_FN(cuda::token_and_position_embedding_cuda));
}

} // namespace ops
} // namespace posenc
