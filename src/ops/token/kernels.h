#pragma once

// The token-embedding family's kernel bodies, for the CPU and the CUDA kernels alike: the dropout
// draw of an element (a counter-based hash, so that the mask depends only on a per-call key and
// the element's place, not on threads or launch geometry) and what one CUDA thread computes for
// token_and_position_embedding (which element of which row, the token's embedding row, the
// position and its table row, padding, dropout). `run_token_grid` builds the thread body of a
// checked call and hands it to an executor: the CUDA launcher
// (cuda_kernel.cu) or the tests' emulated grid.

#include "ops/common/kernel_helpers.h"
#include "ops/common/launch.h"
#include "ops/sequence/kernels.h"

#include <ATen/Dispatch.h>

#include <cstdint>
#include <type_traits>

namespace posenc {
namespace ops {
namespace kernels {

/// murmur3's 32-bit finalizer: a bijection of 32-bit words with full avalanche.
C10_HOST_DEVICE C10_ALWAYS_INLINE uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

/// The dropout draws of one call: element c of row i is kept when
/// mix32(row_seed(i) + c * golden) < threshold, probability threshold / 2^32 = 1 - p. `key` is
/// one 64-bit draw of the device's default generator per call (read through a pointer, so that
/// a CUDA kernel can take it from device memory, where a CUDA graph replays a fresh one).
struct DropoutDraws {
  const uint64_t* key;
  uint64_t threshold;
  double inverse_keep; // 1 / (1 - p), 0 when p = 1

  C10_HOST_DEVICE uint32_t row_seed(int64_t row) const {
    const uint64_t r = static_cast<uint64_t>(row);
    const uint64_t k = *key;
    const uint32_t seed = mix32(static_cast<uint32_t>(r) ^ mix32(static_cast<uint32_t>(r >> 32) +
                                                                 static_cast<uint32_t>(k >> 32))) ^
                          static_cast<uint32_t>(k);
    return mix32(seed);
  }

  C10_HOST_DEVICE C10_ALWAYS_INLINE bool kept(uint32_t row_seed, int64_t c) const {
    return static_cast<uint64_t>(mix32(row_seed + static_cast<uint32_t>(c) * 0x9e3779b9u)) <
           threshold;
  }
};

/// The draws of dropout probability p (0 <= p <= 1) keyed by *key (host code).
inline DropoutDraws dropout_draws(double p, const uint64_t* key) {
  const double keep = 1.0 - p;
  DropoutDraws draws;
  draws.key = key;
  draws.threshold = static_cast<uint64_t>(keep * 4294967296.0);
  draws.inverse_keep = keep > 0.0 ? 1.0 / keep : 0.0;
  return draws;
}

/// weight[token] * scale + t, then dropout: the value of one element (the arithmetic both
/// backends run). `kept` is ignored without dropout.
template <typename scalar_t, typename table_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE scalar_t token_value(scalar_t w, acc_type_t<scalar_t, table_t> t,
                                                       acc_type_t<scalar_t, table_t> scale,
                                                       bool unit, bool drop, bool kept,
                                                       acc_type_t<scalar_t, table_t> inverse_keep) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t value = scaled_sum(load<acc_t>(w), t, scale, unit);
  if (!drop) {
    return store<scalar_t>(value);
  }
  return store<scalar_t>(kept ? value * inverse_keep : acc_t(0));
}

/// One CUDA thread's item of token_and_position_embedding over rows (tokens) of `width`: the N
/// output elements from column (item % (width / N)) * N of each row of group item / (width / N)
/// (RowGroups: the rows that share a position, whose N table values are read once; N | width; the
/// weight, the output and the table aligned to N elements when N > 1), with index_t arithmetic.
template <typename scalar_t, typename table_t, typename index_t, int N>
struct TokenBody {
  using acc_t = acc_type_t<scalar_t, table_t>;
  static constexpr int kWidth = N;
  static constexpr int kIndexBits = 8 * static_cast<int>(sizeof(index_t));
  const int64_t* tokens;
  const scalar_t* weight;
  const table_t* table;
  scalar_t* out;
  bool* mask; // null: no dropout
  RowGroups<index_t> rows;
  index_t width;
  int64_t vocab;
  int64_t table_rows;
  SequenceRows where;
  acc_t scale;
  bool unit;
  DropoutDraws draws;

  int64_t work() const {
    return static_cast<int64_t>(rows.groups) * (width / N);
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const auto [group, c0, t] = group_item<N>(item, rows, width, where, table, table_rows);
    const bool drop = mask != nullptr;
    for (index_t r = 0; r < rows.repeat; ++r) {
      const index_t row = rows.row(group, r);
      const int64_t token = tokens[row];
      if (C10_UNLIKELY(token < 0 || token >= vocab)) {
        POSENC_KERNEL_FAIL(POSENC_TOKEN_MESSAGE, token);
      }
      const Pack<scalar_t, N> w = *reinterpret_cast<const Pack<scalar_t, N>*>(
          weight + static_cast<index_t>(token) * width + c0);
      const uint32_t seed = drop ? draws.row_seed(row) : 0u;
      const index_t first = row * width + c0;
      Pack<scalar_t, N> result;
      POSENC_UNROLL
      for (int k = 0; k < N; ++k) {
        const bool kept = drop && draws.kept(seed, c0 + k);
        if (drop) {
          mask[first + k] = kept;
        }
        result.value[k] =
            token_value<scalar_t, table_t>(w.value[k], static_cast<acc_t>(t.value[k]), scale, unit,
                                           drop, kept, static_cast<acc_t>(draws.inverse_keep));
      }
      *reinterpret_cast<Pack<scalar_t, N>*>(out + first) = result;
    }
  }
};

/// Builds the thread body of a checked token_and_position_embedding call (tokens and weight
/// contiguous; `mask` written when `drop`, keyed by *key) for the widest access and the narrowest
/// index type the call allows, and runs it with `execute(body, work)`.
/// `batch_loop_items`: row_groups' threshold (the tests lower it).
template <typename Execute>
void run_token_grid(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
                    at::Tensor& mask, const TableCall& call, double dropout, bool drop,
                    const uint64_t* key, const Execute& execute,
                    int64_t batch_loop_items = kBatchLoopItems) {
  const int64_t width = call.width;
  if (tokens.numel() == 0 || width == 0) {
    return;
  }
  const at::Tensor table = call.kernel_table();
  const bool narrow = fits_int32({out.numel(), weight.numel(), table.numel()});
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, weight.scalar_type(), "posenc_token_and_position_grid", [&] {
        with_table_data(table, [&](const auto* t) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(t)>>;
          using acc_t = acc_type_t<scalar_t, table_t>;
          const int n =
              row_vector_width(sizeof(scalar_t), width,
                               {weight.data_ptr<scalar_t>(), out.data_ptr<scalar_t>()}, table);
          const RowGroups<int64_t> groups =
              row_groups(call, tokens.numel(), width / n, batch_loop_items);
          with_vector_width<scalar_t>(n, [&](auto vector) {
            with_index_type(narrow, [&](auto index) {
              using index_t = decltype(index);
              const TokenBody<scalar_t, table_t, index_t, decltype(vector)::value> body{
                  tokens.data_ptr<int64_t>(),
                  weight.data_ptr<scalar_t>(),
                  t,
                  out.data_ptr<scalar_t>(),
                  drop ? mask.data_ptr<bool>() : nullptr,
                  narrow_groups<index_t>(groups),
                  static_cast<index_t>(width),
                  weight.size(0),
                  table.numel() / width,
                  SequenceRows::of(call),
                  static_cast<acc_t>(call.scale),
                  call.scale == 1.0,
                  dropout_draws(drop ? dropout : 0.0, key)};
              execute(body, body.work());
            });
          });
        });
      });
}

} // namespace kernels
} // namespace ops
} // namespace posenc
