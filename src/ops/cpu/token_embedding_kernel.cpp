// CPU kernels of the token-embedding family: one pass over the data, float16/bfloat16 converted in
// registers (no float32 intermediate tensor), parallel over rows with at::parallel_for. Compiled
// with -ffp-contract=off so that every product and sum rounds exactly as in the composite kernels
// (../composite), which they are tested against.
//
// Dropout: element c of row i is kept when a counter-based hash of (key, i, c) falls below
// (1 - p) * 2^32, with `key` one 64-bit draw of the default CPU generator per call. The mask
// depends only on the seed and the output's shape: not on the thread count, nor on the layout of
// the arguments (the kernel makes them contiguous; it has no second path).

#include "ops/backend_entries.h"
#include "ops/cpu/cpu_helpers.h"
#include "ops/kernel_helpers.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <mutex>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

// One row without dropout: out = w * scale + t (t null: padding).
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void token_row(const scalar_t* w, const table_t* t, scalar_t* out, int64_t width,
                               double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  for (int64_t c = 0; c < width; ++c) {
    const acc_t tc = t != nullptr ? static_cast<acc_t>(t[c]) : acc_t(0);
    const acc_t wc = load<acc_t>(w[c]);
    out[c] = store<scalar_t>(scale == 1.0 ? wc + tc : tc + s * wc);
  }
}

// murmur3's 32-bit finalizer: a bijection of 32-bit words with full avalanche.
inline uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// One row with dropout. Element c keeps its value when mix32(row_seed + c * golden) < threshold
// (probability threshold / 2^32 = 1 - p): a counter-based draw, so the row vectorizes, and the
// mask does not depend on how rows are split between threads.
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void token_row_dropout(const scalar_t* w, const table_t* t, scalar_t* out,
                                       bool* mask, int64_t width, double scale, uint32_t row_seed,
                                       uint64_t threshold, double inverse_keep) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  const acc_t ik = static_cast<acc_t>(inverse_keep);
  for (int64_t c = 0; c < width; ++c) {
    const acc_t tc = t != nullptr ? static_cast<acc_t>(t[c]) : acc_t(0);
    const acc_t wc = load<acc_t>(w[c]);
    const acc_t value = scale == 1.0 ? wc + tc : tc + s * wc;
    const bool kept =
        static_cast<uint64_t>(mix32(row_seed + static_cast<uint32_t>(c) * 0x9e3779b9u)) < threshold;
    mask[c] = kept;
    out[c] = store<scalar_t>(kept ? value * ik : acc_t(0));
  }
}

// Dropout keys come from one 64-bit draw of the default CPU generator per call: reproducible under
// torch::manual_seed and independent of the thread count.
template <typename scalar_t, typename table_t>
void token_loop(const int64_t* tokens, const scalar_t* weight, const table_t* table, scalar_t* out,
                bool* mask, int64_t width, int64_t rows, SequenceRows where, double scale,
                double dropout, uint64_t key) {
  const double keep = 1.0 - dropout;
  const double inverse_keep = keep > 0.0 ? 1.0 / keep : 0.0;
  const uint64_t threshold = static_cast<uint64_t>(keep * 4294967296.0);
  at::parallel_for(0, rows, grain_rows(width), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const scalar_t* wi = weight + tokens[i] * width;
      const int64_t p = where.position(i);
      const table_t* ti = p < 0 ? nullptr : table + p * width;
      scalar_t* oi = out + i * width;
      if (mask == nullptr) {
        token_row(wi, ti, oi, width, scale);
        continue;
      }
      const uint64_t row = static_cast<uint64_t>(i);
      const uint32_t row_seed =
          mix32(static_cast<uint32_t>(row) ^
                mix32(static_cast<uint32_t>(row >> 32) + static_cast<uint32_t>(key >> 32))) ^
          static_cast<uint32_t>(key);
      token_row_dropout(wi, ti, oi, mask + i * width, width, scale, mix32(row_seed), threshold,
                        inverse_keep);
    }
  });
}

void run_token(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
               at::Tensor& mask, const TableCall& call, double dropout, bool drop) {
  uint64_t key = 0;
  if (drop) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    key = generator.get<at::CPUGeneratorImpl>()->random64();
  }
  const SequenceRows where = SequenceRows::of(call);
  const at::Tensor table = call.kernel_table();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, weight.scalar_type(), "posenc_token_and_position_cpu", [&] {
        bool* mask_data = drop ? mask.data_ptr<bool>() : nullptr;
        with_table_data(table, [&](const auto* t) {
          token_loop(tokens.data_ptr<int64_t>(), weight.data_ptr<scalar_t>(), t,
                     out.data_ptr<scalar_t>(), mask_data, call.width, tokens.numel(), where,
                     call.scale, dropout, key);
        });
      });
}

} // namespace
} // namespace cpu

TORCH_LIBRARY_IMPL(posenc, CPU, m) {
  m.impl("token_and_position_embedding",
         TORCH_FN((token_and_position_embedding_kernel<cpu::run_token, cpu::empty_cpu>)));
}

} // namespace ops
} // namespace posenc
