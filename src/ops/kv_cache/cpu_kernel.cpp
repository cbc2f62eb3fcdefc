// CPU kernels of the KV-cache family: one pass over the tokens with the rotary family's row loops
// (ops/rotary/cpu_rows.h), every value checked on the host before anything is written
// (arguments.cpp). The same arithmetic as the rotary kernels (-ffp-contract=off), so a key
// rotated into the cache is the key apply_rotary_qk gives, bit for bit; the thread bodies of
// kernels.h (CUDA) are tested against this loop through the emulated grid.

#include "ops/common/cpu_helpers.h"
#include "ops/kv_cache/backend_entries.h"
#include "ops/kv_cache/kernels.h"
#include "ops/rotary/cpu_rows.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

// The heads of one token of one operand: rotated from `x` into `out` (rotate_rows: one call per
// token, the clone's setup paid once) by the cos/sin row (null: padding, copied), and the
// channels past 2 * half copied where out is not x (partial rotary).
template <typename scalar_t, typename table_t>
void rotate_token(const scalar_t* x, scalar_t* out, int64_t in_head, int64_t out_head,
                  int64_t heads, int64_t head_dim, const table_t* cos, const table_t* sin,
                  int64_t half, bool interleaved) {
  const bool in_place = x == out;
  if (cos != nullptr) {
    rotate_rows(x, out, in_head, out_head, heads, cos, sin, 0, half, interleaved, false);
  }
  if (in_place) {
    return;
  }
  const int64_t from = cos != nullptr ? 2 * half : 0;
  for (int64_t h = 0; h < heads; ++h) {
    std::copy(x + h * in_head + from, x + h * in_head + head_dim, out + h * out_head + from);
  }
}

// One pass over the tokens, parallel: each token's query heads rotated (in place or into q_out),
// its key heads rotated straight into their cache rows and its value heads copied into theirs.
// Every value was checked on the host before (prepare_*_call); the slots and positions are those
// of the thread bodies (kernels::CacheSlots, RotaryRows).
void run_kv_cache(const KvCacheCall& call, const at::Tensor& q_out, bool interleaved) {
  const RotaryQkCall& rotary = call.rotary;
  const int64_t tokens = rotary.batch * rotary.length;
  const at::Tensor cos = rotary.kernel_cos();
  const at::Tensor sin = rotary.kernel_sin();
  const RotaryRows where = RotaryRows::tokens_of(rotary);
  const kernels::CacheSlots slots{kernels::IndexValues::of(call.index),
                                  call.kind == CacheKind::kPaged, call.blocks, call.block_size};
  const int64_t half = rotary.half;
  const int64_t width = (rotary.heads + rotary.k_heads) * rotary.head_dim +
                        rotary.k_heads * call.v_head_dim;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, call.q.scalar_type(), "posenc_kv_cache_cpu", [&] {
        const RowStrides<> q_rows = RowStrides<>::of(call.q, rotary.heads_first);
        const RowStrides<> out_rows = RowStrides<>::of(q_out, rotary.heads_first);
        const RowStrides<> k_rows = RowStrides<>::of(call.k, rotary.heads_first);
        const RowStrides<> v_rows = RowStrides<>::of(call.v, rotary.heads_first);
        const auto k_cache_rows = kernels::CacheRows<int64_t>::of(call.k_cache, call.cache_heads_first);
        const auto v_cache_rows = kernels::CacheRows<int64_t>::of(call.v_cache, call.cache_heads_first);
        const scalar_t* q = call.q.data_ptr<scalar_t>();
        scalar_t* qo = q_out.data_ptr<scalar_t>();
        const scalar_t* k = call.k.data_ptr<scalar_t>();
        const scalar_t* v = call.v.data_ptr<scalar_t>();
        scalar_t* kc = call.k_cache.data_ptr<scalar_t>();
        scalar_t* vc = call.v_cache.data_ptr<scalar_t>();
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          const table_t* s = sin.data_ptr<table_t>();
          at::parallel_for(0, tokens, grain_rows(width), [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
              const int64_t b = t / rotary.length;
              const int64_t l = t - b * rotary.length;
              const int64_t p =
                  where.position_at(b, l) + (call.seqlens_positions ? slots.start(b, rotary.length) : 0);
              const table_t* ct = p < 0 ? nullptr : c + p * half;
              const table_t* st = p < 0 ? nullptr : s + p * half;
              rotate_token(q + q_rows.row(b, l, 0), qo + out_rows.row(b, l, 0), q_rows.head,
                           out_rows.head, rotary.heads, rotary.head_dim, ct, st, half, interleaved);
              const int64_t slot = slots.slot(b, l, rotary.length);
              if (slot < 0) {
                continue;
              }
              const int64_t block = slot / call.block_size;
              const int64_t in_block = slot - block * call.block_size;
              rotate_token(k + k_rows.row(b, l, 0), kc + k_cache_rows.row(block, in_block, 0),
                           k_rows.head, k_cache_rows.head, rotary.k_heads, rotary.k_head_dim, ct,
                           st, half, interleaved);
              const scalar_t* vi = v + v_rows.row(b, l, 0);
              scalar_t* vo = vc + v_cache_rows.row(block, in_block, 0);
              for (int64_t h = 0; h < rotary.k_heads; ++h) {
                std::copy(vi + h * v_rows.head, vi + h * v_rows.head + call.v_head_dim,
                          vo + h * v_cache_rows.head);
              }
            }
          });
        });
      });
}

} // namespace
} // namespace cpu

TORCH_LIBRARY_IMPL(posenc, CPU, m) {
  m.impl("rotary_kv_cache_", TORCH_FN(rotary_kv_cache_inplace_kernel<cpu::run_kv_cache>));
  m.impl("rotary_kv_cache",
         TORCH_FN((rotary_kv_cache_kernel<cpu::run_kv_cache, cpu::empty_cpu>)));
  m.impl("rotary_paged_kv_cache_",
         TORCH_FN(rotary_paged_kv_cache_inplace_kernel<cpu::run_kv_cache>));
  m.impl("rotary_paged_kv_cache",
         TORCH_FN((rotary_paged_kv_cache_kernel<cpu::run_kv_cache, cpu::empty_cpu>)));
}

} // namespace ops
} // namespace posenc
