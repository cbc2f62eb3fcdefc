// CPU kernels of the token-embedding family: one pass over the data, float16/bfloat16 converted in
// registers (no float32 intermediate tensor), parallel over rows with at::parallel_for. Compiled
// with -ffp-contract=off so that every product and sum rounds exactly as in the composite kernels
// (../composite), which they are tested against.
//
// Dropout: element c of row i is kept when a counter-based hash of (key, i, c) falls below
// (1 - p) * 2^32 (kernels::DropoutDraws, the same draws as the CUDA kernel's), with `key` one
// 64-bit draw of the default CPU generator per call. The mask
// depends only on the seed and the output's shape: not on the thread count, nor on the layout of
// the arguments (the kernel makes them contiguous; it has no second path).

#include "ops/common/backend_entries.h"
#include "ops/common/cpu_helpers.h"
#include "ops/common/kernel_helpers.h"
#include "ops/token/backend_entries.h"
#include "ops/token/kernels.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <mutex>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

// One row without dropout: out = w * scale + t (t null: padding), each element by the arithmetic
// the CUDA threads run (kernels::token_value).
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void token_row(const scalar_t* w, const table_t* t, scalar_t* out, int64_t width,
                               double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  const bool unit = scale == 1.0;
  for (int64_t c = 0; c < width; ++c) {
    const acc_t tc = t != nullptr ? static_cast<acc_t>(t[c]) : acc_t(0);
    out[c] = kernels::token_value<scalar_t, table_t>(w[c], tc, s, unit, false, false, acc_t(0));
  }
}

// One row with dropout, drawn as the CUDA threads draw (kernels::DropoutDraws: a counter-based
// hash, so the row vectorizes and the mask does not depend on how rows are split between threads).
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void token_row_dropout(const scalar_t* w, const table_t* t, scalar_t* out,
                                       bool* mask, int64_t width, double scale, uint32_t row_seed,
                                       kernels::DropoutDraws draws) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  const bool unit = scale == 1.0;
  const acc_t ik = static_cast<acc_t>(draws.inverse_keep);
  for (int64_t c = 0; c < width; ++c) {
    const acc_t tc = t != nullptr ? static_cast<acc_t>(t[c]) : acc_t(0);
    const bool kept = draws.kept(row_seed, c);
    mask[c] = kept;
    out[c] = kernels::token_value<scalar_t, table_t>(w[c], tc, s, unit, true, kept, ik);
  }
}

// Dropout keys come from one 64-bit draw of the default CPU generator per call: reproducible under
// torch::manual_seed and independent of the thread count.
template <typename scalar_t, typename table_t>
void token_loop(const int64_t* tokens, const scalar_t* weight, const table_t* table, scalar_t* out,
                bool* mask, int64_t width, int64_t rows, SequenceRows where, double scale,
                double dropout, const uint64_t* key) {
  const kernels::DropoutDraws draws = kernels::dropout_draws(dropout, key);
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
      token_row_dropout(wi, ti, oi, mask + i * width, width, scale, draws.row_seed(i), draws);
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
                     call.scale, dropout, &key);
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
