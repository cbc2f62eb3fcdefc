#pragma once

// The KV-cache family's kernel bodies, for the CPU and the CUDA kernels alike: what one work item
// of rotary_kv_cache / rotary_paged_kv_cache does (rotate N pairs of a query head, rotate N pairs
// of a key head into its cache slot, or copy N channels of a value head into its slot), and the
// check that no two tokens of a paged call share a slot. `run_kv_cache_grid` builds the body of
// a checked call for the widest accesses its pointers and strides allow and the narrowest index
// type its sizes allow, and hands it to an executor: the CUDA launcher (cuda_kernel.cu), the CPU's
// parallel loop (cpu_kernel.cpp) or the emulated grid of the tests.

#include "ops/common/kernel_helpers.h"
#include "ops/common/launch.h"
#include "ops/kv_cache/arguments.h"
#include "ops/rotary/backend_entries.h"
#include "ops/rotary/kernels.h"

#include <ATen/Dispatch.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace posenc {
namespace ops {
namespace kernels {

/// Messages of the checks the threads make of what they read.
#define POSENC_SLOT_MESSAGE                                                                        \
  "posenc::rotary_paged_kv_cache: a slot lies outside the cache (slot_mapping values must be < " \
  "num_blocks * block_size, or negative to skip a token)"
#define POSENC_SEQLEN_MESSAGE                                                                 \
  "posenc::rotary_kv_cache: a sequence's new tokens lie outside the cache (cache_seqlens[b] " \
  "must be >= 0 and cache_seqlens[b] + L <= S)"
#define POSENC_DUPLICATE_SLOT_MESSAGE                                                           \
  "posenc::rotary_paged_kv_cache: two tokens go to one slot (slot_mapping must not repeat a " \
  "non-negative slot within one call)"

/// The values of an int32 or int64 index tensor (cache_seqlens, slot_mapping), read as int64.
struct IndexValues {
  const void* data;
  bool is_int32;

  C10_HOST_DEVICE int64_t operator[](int64_t i) const {
    return is_int32 ? static_cast<int64_t>(static_cast<const int32_t*>(data)[i])
                    : static_cast<const int64_t*>(data)[i];
  }

  static IndexValues of(const at::Tensor& index) {
    return {index.data_ptr(), index.scalar_type() == at::kInt};
  }
};

/// Where the tokens of a call go: slot block * block_size + row of the cache.
struct CacheSlots {
  IndexValues index; // cache_seqlens [B] (contiguous caches) or slot_mapping [T] (paged)
  bool paged;
  int64_t blocks;
  int64_t block_size;

  /// The first slot of sequence b's new tokens (contiguous caches), checked: its L tokens fit.
  C10_HOST_DEVICE int64_t start(int64_t b, int64_t length) const {
    const int64_t s = index[b];
    if (C10_UNLIKELY(s < 0 || s > block_size - length)) {
      POSENC_KERNEL_FAIL(POSENC_SEQLEN_MESSAGE, s);
    }
    return s;
  }

  /// The slot of token (b, l), checked; -1 when the token is not written (a negative slot).
  C10_HOST_DEVICE int64_t slot(int64_t b, int64_t l, int64_t length) const {
    if (!paged) {
      return b * block_size + start(b, length) + l;
    }
    const int64_t s = index[l];
    if (C10_UNLIKELY(s >= blocks * block_size)) {
      POSENC_KERNEL_FAIL(POSENC_SLOT_MESSAGE, s);
    }
    return s < 0 ? -1 : s;
  }
};

/// Where row (block, row in block, head) of a cache starts.
template <typename index_t>
struct CacheRows {
  index_t block;
  index_t slot;
  index_t head;

  static CacheRows of(const at::Tensor& cache, bool heads_first) {
    return {static_cast<index_t>(cache.stride(0)),
            static_cast<index_t>(cache.stride(heads_first ? 2 : 1)),
            static_cast<index_t>(cache.stride(heads_first ? 1 : 2))};
  }

  C10_HOST_DEVICE index_t row(index_t b, index_t s, index_t h) const {
    return b * block + s * slot + h * head;
  }
};

/// One work item of a KV-cache call. The T tokens (b * L + l) each have H_q + 2 H_kv head rows
/// (the query heads, the key heads, the value heads) and each row `items` items: for a query or
/// key row, item j < half / N rotates the N pairs from j * N (rotate_run; keys from k into their
/// cache row), item half / N + j copies channel 2 * half + j (partial rotary: a key row always, a
/// query row out of place); for a value row, item j copies channels j * N .. j * N + N - 1. A
/// token whose slot is negative writes no key or value.
template <typename scalar_t, typename table_t, typename index_t, int N>
struct KvCacheBody {
  static constexpr int kWidth = N;
  static constexpr int kIndexBits = 8 * static_cast<int>(sizeof(index_t));
  OperandRows<scalar_t, index_t> q; // in and out (the same in place)
  const scalar_t* k;
  RowStrides<index_t> k_rows;
  const scalar_t* v;
  RowStrides<index_t> v_rows;
  scalar_t* k_cache;
  CacheRows<index_t> k_cache_rows;
  scalar_t* v_cache;
  CacheRows<index_t> v_cache_rows;
  const table_t* cos;
  const table_t* sin;
  int64_t table_rows;
  RotaryRows where;
  CacheSlots slots;
  bool seqlens_positions; // the rotation's positions are the slots: where's + cache_seqlens[b]
  bool interleaved;
  bool inverse;
  index_t tokens;
  index_t length;
  index_t half;
  index_t kv_heads;
  index_t head_dim;   // k's D
  index_t v_head_dim; // v's D_v
  index_t q_rest;     // channels of a query row copied past 2 * half (0 in place)
  index_t items;      // items per head row

  int64_t work() const {
    return static_cast<int64_t>(tokens) * (q.heads + 2 * kv_heads) * items;
  }

  C10_HOST_DEVICE int64_t position(index_t b, index_t l) const {
    const int64_t p = where.position_at(b, l);
    return checked_position(seqlens_positions ? p + slots.start(b, length) : p, table_rows);
  }

  /// Rotates pairs j * N .. j * N + N - 1 of the row at xi into the row at oi, by token (b, l)'s
  /// cos/sin row (padding: copied).
  C10_HOST_DEVICE void rotate_item(const scalar_t* xi, scalar_t* oi, index_t b, index_t l,
                                   index_t j) const {
    const int64_t p = position(b, l);
    const index_t at = static_cast<index_t>(p) * half + j * N;
    rotate_run<N>(xi, oi, p < 0 ? nullptr : cos + at, p < 0 ? nullptr : sin + at, half, j * N,
                  interleaved, inverse);
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const index_t rows = q.heads + 2 * kv_heads;
    const index_t chunks = half / N;
    const index_t index = static_cast<index_t>(item);
    const index_t row = index / items;
    const index_t j = index - row * items;
    const index_t t = row / rows;
    const index_t r = row - t * rows;
    const index_t b = t / length;
    const index_t l = t - b * length;
    if (r < q.heads) { // a query row, rotated where it lies (or into q's output)
      const scalar_t* xi = q.in + q.in_rows.row(b, l, r);
      scalar_t* oi = q.out + q.out_rows.row(b, l, r);
      if (j >= chunks) {
        if (j - chunks < q_rest) {
          oi[2 * half + (j - chunks)] = xi[2 * half + (j - chunks)];
        }
        return;
      }
      rotate_item(xi, oi, b, l, j);
      return;
    }
    const int64_t slot = slots.slot(b, l, length);
    if (slot < 0) {
      return;
    }
    const index_t block = static_cast<index_t>(slot / slots.block_size);
    const index_t in_block = static_cast<index_t>(slot - block * slots.block_size);
    if (r < q.heads + kv_heads) { // a key row, rotated into its slot
      const index_t h = r - q.heads;
      const scalar_t* xi = k + k_rows.row(b, l, h);
      scalar_t* oi = k_cache + k_cache_rows.row(block, in_block, h);
      if (j >= chunks) {
        const index_t c = 2 * half + (j - chunks);
        if (c < head_dim) {
          oi[c] = xi[c];
        }
        return;
      }
      rotate_item(xi, oi, b, l, j);
      return;
    }
    const index_t h = r - q.heads - kv_heads; // a value row, copied into its slot
    if (j * N >= v_head_dim) {
      return;
    }
    using Run = Pack<scalar_t, N>;
    *reinterpret_cast<Run*>(v_cache + v_cache_rows.row(block, in_block, h) + j * N) =
        *reinterpret_cast<const Run*>(v + v_rows.row(b, l, h) + j * N);
  }
};

/// The check that no two tokens of a paged call share a slot (and that each slot lies in the
/// cache), for a device where the host does not read the slots: item (t, c) compares token t's
/// slot with those of the tokens kSpan * c .. below t, so that the T (T - 1) / 2 comparisons
/// spread over many threads.
struct DistinctSlotsBody {
  static constexpr int64_t kSpan = 32;
  IndexValues slots;
  int64_t tokens;
  int64_t capacity;

  int64_t spans() const {
    return (tokens + kSpan - 1) / kSpan;
  }

  int64_t work() const {
    return tokens * spans();
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const int64_t count = (tokens + kSpan - 1) / kSpan;
    const int64_t t = item / count;
    const int64_t first = (item - t * count) * kSpan;
    const int64_t s = slots[t];
    if (C10_UNLIKELY(s >= capacity)) {
      POSENC_KERNEL_FAIL(POSENC_SLOT_MESSAGE, s);
    }
    if (s < 0 || first >= t) {
      return;
    }
    const int64_t last = std::min(first + kSpan, t);
    for (int64_t u = first; u < last; ++u) {
      if (C10_UNLIKELY(slots[u] == s)) {
        POSENC_KERNEL_FAIL(POSENC_DUPLICATE_SLOT_MESSAGE, s);
      }
    }
  }
};

/// Runs the distinct-slots check of a checked paged call with `execute` (before its write, on a
/// device: a failed check stops the stream's work, so the write does not run).
template <typename Execute>
void run_distinct_slots_check(const KvCacheCall& call, const Execute& execute) {
  const DistinctSlotsBody body{IndexValues::of(call.index), call.index.numel(),
                               call.blocks * call.block_size};
  execute(body, body.work());
}

/// Builds the thread body of a checked KV-cache call (q_out: q itself in place, else a fresh
/// tensor of its shape) and runs it with `execute(body, work)`.
template <typename Execute>
void run_kv_cache_grid(const KvCacheCall& call, const at::Tensor& q_out, bool interleaved,
                       bool inverse, const Execute& execute) {
  const RotaryQkCall& rotary = call.rotary;
  const int64_t tokens = rotary.batch * rotary.length;
  const int64_t kv_heads = rotary.k_heads;
  if (tokens == 0 || rotary.heads + 2 * kv_heads == 0) {
    return;
  }
  const bool in_place = call.q.is_same(q_out) || q_out.data_ptr() == call.q.data_ptr();
  const at::Tensor cos = rotary.kernel_cos();
  const at::Tensor sin = rotary.kernel_sin();
  const int64_t half = rotary.half;
  const RotaryOperand q{call.q, q_out, rotary.heads, rotary.head_dim};
  const RotaryOperand k{call.k, call.k_cache, kv_heads, rotary.k_head_dim};
  const RotaryOperand v{call.v, call.v_cache, kv_heads, call.v_head_dim};
  int n = rotary_vector_width({&q, &k, &v}, cos, sin, half);
  while (n > 1 && call.v_head_dim % n != 0) {
    n /= 2;
  }
  const int64_t q_rest = in_place ? 0 : rotary.head_dim - 2 * half;
  const int64_t rest = std::max(q_rest, rotary.k_head_dim - 2 * half);
  const bool narrow =
      fits_int32({tokens * (rotary.heads + 2 * kv_heads) *
                      std::max(half + rest, call.v_head_dim), // items <= this
                  cos.numel(), element_extent(call.q), element_extent(q_out),
                  element_extent(call.k), element_extent(call.v), element_extent(call.k_cache),
                  element_extent(call.v_cache)});
  const bool heads_first = rotary.heads_first;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, call.q.scalar_type(), "posenc_kv_cache_grid", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          with_vector_width<scalar_t>(n, [&](auto width) {
            constexpr int kN = decltype(width)::value;
            with_index_type(narrow, [&](auto index) {
              using index_t = decltype(index);
              using Body = KvCacheBody<scalar_t, table_t, index_t, kN>;
              const int64_t items = std::max(half / kN + rest, call.v_head_dim / kN);
              const Body body{operand_rows<scalar_t, index_t>(q, heads_first),
                              call.k.data_ptr<scalar_t>(),
                              RowStrides<index_t>::of(call.k, heads_first),
                              call.v.data_ptr<scalar_t>(),
                              RowStrides<index_t>::of(call.v, heads_first),
                              call.k_cache.data_ptr<scalar_t>(),
                              CacheRows<index_t>::of(call.k_cache, call.cache_heads_first),
                              call.v_cache.data_ptr<scalar_t>(),
                              CacheRows<index_t>::of(call.v_cache, call.cache_heads_first),
                              c,
                              sin.data_ptr<table_t>(),
                              cos.numel() / half,
                              RotaryRows::tokens_of(rotary),
                              CacheSlots{IndexValues::of(call.index),
                                         call.kind == CacheKind::kPaged, call.blocks,
                                         call.block_size},
                              call.seqlens_positions,
                              interleaved,
                              inverse,
                              static_cast<index_t>(tokens),
                              static_cast<index_t>(rotary.length),
                              static_cast<index_t>(half),
                              static_cast<index_t>(kv_heads),
                              static_cast<index_t>(rotary.k_head_dim),
                              static_cast<index_t>(call.v_head_dim),
                              static_cast<index_t>(q_rest),
                              static_cast<index_t>(items)};
              execute(body, body.work());
            });
          });
        });
      });
}

} // namespace kernels
} // namespace ops
} // namespace posenc
