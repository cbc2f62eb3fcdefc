// The checked calls of the KV-cache operators (arguments.h).

#include "ops/kv_cache/arguments.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/sym_size.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/arange.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace posenc {
namespace ops {
namespace {

struct CacheArgument {
  const char* name;
  const at::Tensor& tensor;
};

// The layout q, k and v must have, for messages.
const char* kv_input_layout(CacheKind kind, bool heads_first) {
  if (kind == CacheKind::kPaged) {
    return "[T, H, D]";
  }
  return heads_first ? "[B, H, L, D]" : "[B, L, H, D]";
}

const char* cache_layout(CacheKind kind, bool cache_heads_first) {
  if (kind == CacheKind::kPaged) {
    return cache_heads_first ? "[num_blocks, H_kv, block_size, D]"
                             : "[num_blocks, block_size, H_kv, D]";
  }
  return cache_heads_first ? "[B, H_kv, S, D]" : "[B, S, H_kv, D]";
}

// The values of an int32/int64 tensor on the host, as int64.
std::vector<int64_t> cache_index_on_host(const at::Tensor& index) {
  const at::Tensor host = index.to(at::kLong).contiguous();
  const int64_t* data = host.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + host.numel());
}

// Checks what the kernels write: each cache's channels contiguous (they are written where they
// lie), and neither a written tensor overlapping itself nor anything the call reads.
void check_cache_writes(const at::Tensor& q, const at::Tensor& q_out, const at::Tensor& k,
                   const at::Tensor& v, const at::Tensor& k_cache, const at::Tensor& v_cache,
                   const at::Tensor& cos, const at::Tensor& sin, OptionalTensor positions,
                   const at::Tensor& index, OptionalTensor inv_freq) {
  static constexpr detail::CallerName who{};
  for (const CacheArgument cache : {CacheArgument{"k_cache", k_cache}, CacheArgument{"v_cache", v_cache}}) {
    TORCH_CHECK(cache.tensor.size(3) <= 1 || cache.tensor.stride(3) == 1, who, ": ", cache.name,
                "'s channels (its last dimension) must be contiguous, as the kernels write "
                "whole rows where they lie, but its strides are ",
                cache.tensor.strides(), "; allocate the cache contiguous");
    at::assert_no_internal_overlap(cache.tensor);
  }
  const bool in_place = q.is_same(q_out);
  if (in_place) {
    at::assert_no_internal_overlap(q);
    check_no_overlap(q, "q",
                     {{"k", k},
                      {"v", v},
                      {"k_cache", k_cache},
                      {"v_cache", v_cache},
                      {"cos", cos},
                      {"sin", sin},
                      {"positions", positions},
                      {"the cache index", index},
                      {"inv_freq", inv_freq}});
  }
  for (const CacheArgument cache : {CacheArgument{"k_cache", k_cache}, CacheArgument{"v_cache", v_cache}}) {
    check_no_overlap(cache.tensor, cache.name,
                     {{"q", q},
                      {"k", k},
                      {"v", v},
                      {"cos", cos},
                      {"sin", sin},
                      {"positions", positions},
                      {"the cache index", index},
                      {"inv_freq", inv_freq}});
  }
  check_no_overlap(k_cache, "k_cache", {{"v_cache", v_cache}});
}

// The caches' geometry, once the layout is checked.
void fill_cache(KvCacheCall& call, const at::Tensor& k_cache, const at::Tensor& v_cache,
                bool cache_heads_first) {
  call.k_cache = k_cache;
  call.v_cache = v_cache;
  call.cache_heads_first = cache_heads_first;
  call.blocks = k_cache.size(0);
  call.block_size = k_cache.size(cache_heads_first ? 2 : 1);
}

} // namespace

void check_kv_cache_layout(CacheKind kind, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& k_cache,
                           const at::Tensor& v_cache, const at::Tensor& index, bool heads_first,
                           bool cache_heads_first) {
  static constexpr detail::CallerName who{};
  const bool paged = kind == CacheKind::kPaged;
  const int64_t dims = paged ? 3 : 4;
  const char* layout = kv_input_layout(kind, heads_first);
  for (const CacheArgument input : {CacheArgument{"q", q}, CacheArgument{"k", k}, CacheArgument{"v", v}}) {
    TORCH_CHECK(input.tensor.dim() == dims, who, ": ", input.name, " must be ", layout, " (", dims,
                "-D), but got a tensor of shape ", detail::shape_of(input.tensor),
                paged ? "; pass the packed tokens of the batch" : "");
    TORCH_CHECK(input.tensor.device() == q.device(), who, ": q, k and v must lie on one device, but ",
                input.name, " is on ", input.tensor.device(), " and q on ", q.device());
  }
  TORCH_CHECK(detail::is_supported_float(q.scalar_type()), who,
              ": expected floating-point q, k and v (float16, bfloat16, float32 or float64), but "
              "got ",
              q.scalar_type());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), who,
              ": q, k and v must share a dtype, but got ", q.scalar_type(), ", ", k.scalar_type(),
              " and ", v.scalar_type(), "; convert them to one dtype");
  // Token dimensions: T, or B and L.
  const int64_t head_dim_index = paged ? 1 : (heads_first ? 1 : 2);
  const int64_t length_index = paged ? 0 : (heads_first ? 2 : 1);
  for (const CacheArgument input : {CacheArgument{"k", k}, CacheArgument{"v", v}}) {
    TORCH_CHECK(detail::size_of(input.tensor, 0) == detail::size_of(q, 0) &&
                    detail::size_of(input.tensor, length_index) == detail::size_of(q, length_index),
                who, ": ", input.name, " must hold one row per token of q (", layout,
                "), but q is ", detail::shape_of(q), " and ", input.name, " ",
                detail::shape_of(input.tensor));
  }
  TORCH_CHECK(detail::size_of(v, head_dim_index) == detail::size_of(k, head_dim_index), who,
              ": k and v must have the same number of heads H_kv, but k is ", detail::shape_of(k),
              " and v ", detail::shape_of(v));
  const char* cache_shape = cache_layout(kind, cache_heads_first);
  const int64_t cache_heads = cache_heads_first ? 1 : 2;
  const int64_t cache_slots = cache_heads_first ? 2 : 1;
  for (const CacheArgument cache : {CacheArgument{"k_cache", k_cache}, CacheArgument{"v_cache", v_cache}}) {
    TORCH_CHECK(cache.tensor.dim() == 4, who, ": ", cache.name, " must be ", cache_shape,
                " (4-D), but got a tensor of shape ", detail::shape_of(cache.tensor));
    TORCH_CHECK(cache.tensor.scalar_type() == q.scalar_type(), who, ": ", cache.name,
                " must have the dtype of q, k and v (", q.scalar_type(), "), but it is ",
                cache.tensor.scalar_type(),
                "; the rows are written without conversion: allocate the cache in ",
                q.scalar_type(), " or convert the inputs");
    TORCH_CHECK(cache.tensor.device() == q.device(), who, ": ", cache.name,
                " must lie on the device of q, k and v (", q.device(), "), but it is on ",
                cache.tensor.device());
  }
  TORCH_CHECK(detail::size_of(k_cache, cache_heads) == detail::size_of(k, head_dim_index) &&
                  detail::size_of(k_cache, 3) == detail::size_of(k, -1),
              who, ": k_cache must be ", cache_shape, " with k's H_kv and D, but k is ",
              detail::shape_of(k), " and k_cache ", detail::shape_of(k_cache));
  TORCH_CHECK(detail::size_of(v_cache, 0) == detail::size_of(k_cache, 0) &&
                  detail::size_of(v_cache, cache_slots) == detail::size_of(k_cache, cache_slots) &&
                  detail::size_of(v_cache, cache_heads) == detail::size_of(v, head_dim_index) &&
                  detail::size_of(v_cache, 3) == detail::size_of(v, -1),
              who, ": v_cache must be ", cache_shape,
              " with k_cache's slots and v's H_kv and D_v, but k_cache is ",
              detail::shape_of(k_cache), ", v ", detail::shape_of(v), " and v_cache ",
              detail::shape_of(v_cache));
  if (!paged) {
    TORCH_CHECK(detail::size_of(k_cache, 0) == detail::size_of(q, 0), who,
                ": the caches must hold the B = ", detail::size_of(q, 0),
                " sequences of q, but k_cache is ", detail::shape_of(k_cache));
  }
  const char* index_name = paged ? "slot_mapping" : "cache_seqlens";
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, who, ": ",
              index_name, " must be an int64 or int32 tensor, but got ", index.scalar_type());
  TORCH_CHECK(index.dim() == 1 && detail::size_of(index, 0) == detail::size_of(q, 0), who, ": ",
              index_name, " must be [", paged ? "T" : "B", "] = [", detail::size_of(q, 0),
              "] (one ", paged ? "slot per token" : "length per sequence",
              "), but got a tensor of shape ", detail::shape_of(index));
  TORCH_CHECK(index.device() == q.device(), who, ": ", index_name,
              " must lie on the device of q (", q.device(), "), but it is on ", index.device());
}

KvCacheCall prepare_kv_cache_call(const at::Tensor& q, const at::Tensor& q_out,
                                  const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& k_cache, const at::Tensor& v_cache,
                                  const at::Tensor& cos, const at::Tensor& sin,
                                  const at::Tensor& cache_seqlens, OptionalTensor positions,
                                  bool heads_first, bool cache_heads_first,
                                  OptionalTensor inv_freq, double attention_factor) {
  static constexpr detail::CallerName who{};
  check_kv_cache_layout(CacheKind::kContiguous, q, k, v, k_cache, v_cache, cache_seqlens,
                        heads_first, cache_heads_first);
  check_cache_writes(q, q_out, k, v, k_cache, v_cache, cos, sin, positions, cache_seqlens, inv_freq);
  KvCacheCall call;
  call.kind = CacheKind::kContiguous;
  const int64_t batch = q.size(0);
  const int64_t length = q.size(heads_first ? 2 : 1);
  const bool on_host = !detail::checks_on_device(q.device());
  c10::optional<at::Tensor> rotation = positions;
  if (!given(positions) && given(inv_freq)) {
    // Rows past the caches are computed for exactly the slots' positions.
    rotation = cache_seqlens.to(at::kLong).view({batch, 1}) +
               at::arange(length, cache_seqlens.options().dtype(at::kLong));
  }
  call.seqlens_positions = !given(rotation);
  call.rotary = prepare_rotary_qk_call(q, k, cos, sin, 0, rotation, heads_first, inv_freq,
                                       attention_factor);
  fill_cache(call, k_cache, v_cache, cache_heads_first);
  call.index = cache_seqlens.contiguous();
  if (on_host) { // (on a device, each thread checks the length it reads)
    const std::vector<int64_t> seqlens = cache_index_on_host(cache_seqlens);
    const int64_t rows = call.rotary.cos.size(0);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t s = seqlens[static_cast<size_t>(b)];
      TORCH_CHECK(s >= 0 && s <= call.block_size - length, who, ": sequence ", b, " holds ", s,
                  " tokens (cache_seqlens[", b, "]), and its ", length,
                  " new tokens need the slots ", s, " .. ", s + length - 1, ", but the cache has ",
                  call.block_size, " slots (S) per sequence; ",
                  s < 0 ? "cache_seqlens must be >= 0" : "allocate a longer cache");
      TORCH_CHECK(!call.seqlens_positions || s <= rows - length, who,
                  ": the positions of sequence ", b, " reach ", s + length - 1,
                  ", past the cos/sin caches' ", rows,
                  " rows; build the module with a larger max_len or pass inv_freq");
    }
  }
  call.q = q;
  call.k = k;
  call.v = v;
  call.v_head_dim = v.size(3);
  return call;
}

KvCacheCall prepare_paged_kv_cache_call(const at::Tensor& q, const at::Tensor& q_out,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& k_cache, const at::Tensor& v_cache,
                                        const at::Tensor& cos, const at::Tensor& sin,
                                        const at::Tensor& positions,
                                        const at::Tensor& slot_mapping, bool cache_heads_first,
                                        OptionalTensor inv_freq, double attention_factor) {
  static constexpr detail::CallerName who{};
  check_kv_cache_layout(CacheKind::kPaged, q, k, v, k_cache, v_cache, slot_mapping, false,
                        cache_heads_first);
  check_cache_writes(q, q_out, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping, inv_freq);
  TORCH_CHECK(positions.dim() == 1, who, ": positions must be [T] = [", q.size(0),
              "] (one per token of the packed batch), but got a tensor of shape ",
              positions.sizes());
  KvCacheCall call;
  call.kind = CacheKind::kPaged;
  // A packed batch is one sequence of T tokens, each with its own position.
  call.q = q.unsqueeze(0);
  call.k = k.unsqueeze(0);
  call.v = v.unsqueeze(0);
  call.v_head_dim = v.size(2);
  call.rotary = prepare_rotary_qk_call(call.q, call.k, cos, sin, 0, positions, false, inv_freq,
                                       attention_factor);
  fill_cache(call, k_cache, v_cache, cache_heads_first);
  call.index = slot_mapping.contiguous();
  if (!detail::checks_on_device(q.device())) { // (on a device, the threads check the slots)
    const std::vector<int64_t> slots = cache_index_on_host(slot_mapping);
    const int64_t capacity = call.blocks * call.block_size;
    std::vector<std::pair<int64_t, int64_t>> used; // (slot, token)
    used.reserve(slots.size());
    for (size_t t = 0; t < slots.size(); ++t) {
      const int64_t s = slots[t];
      TORCH_CHECK(s < capacity, who, ": token ", t, " goes to slot ", s,
                  " (slot_mapping), but the cache has ", capacity, " slots (", call.blocks,
                  " blocks of ", call.block_size,
                  "); a slot must be < num_blocks * block_size, or negative to skip the token");
      if (s >= 0) {
        used.emplace_back(s, static_cast<int64_t>(t));
      }
    }
    std::sort(used.begin(), used.end());
    for (size_t i = 1; i < used.size(); ++i) {
      TORCH_CHECK(used[i].first != used[i - 1].first, who, ": tokens ", used[i - 1].second,
                  " and ", used[i].second, " both go to slot ", used[i].first,
                  " (slot_mapping), and one call writes each slot once; give each token its own "
                  "slot (a negative slot skips a token)");
    }
  }
  return call;
}

} // namespace ops
} // namespace posenc
