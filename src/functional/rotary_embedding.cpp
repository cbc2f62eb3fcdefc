#include <posenc/functional/rotary_embedding.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "detail/rotary.h"
#include "ops/common/arguments.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>

namespace posenc {
namespace functional {

namespace pd = posenc::detail;

std::pair<at::Tensor, at::Tensor> rotary_tables(int64_t max_len, int64_t rotary_dim,
                                                const RotaryTablesFuncOptions& options) {
  const pd::CallerScope caller_scope(pd::CallerScope::Rename{}, "rotary_tables");
  pd::check_rotary_arguments(max_len, rotary_dim, options.base());
  pd::check_float_dtype("dtype", options.dtype());
  const auto positions = at::arange(max_len, at::TensorOptions().dtype(at::kLong));
  auto tables = pd::rotary_rows(
      positions,
      pd::rope_frequencies(pd::rope_spec(rotary_dim, options, max_len), options.seq_len()),
      options.dtype());
  return {tables.first.to(options.device()), tables.second.to(options.device())};
}

at::Tensor rotary_inv_freq(int64_t rotary_dim, const RotaryTablesFuncOptions& options) {
  const pd::CallerScope caller_scope(pd::CallerScope::Rename{}, "rotary_inv_freq");
  const pd::RopeSpec spec = pd::rope_spec_without_table(rotary_dim, options);
  return at::tensor(pd::rope_frequencies(spec, options.seq_len()).inv_freq,
                    at::TensorOptions().dtype(at::kDouble));
}

double rotary_attention_factor(int64_t rotary_dim, const RotaryTablesFuncOptions& options) {
  const pd::CallerScope caller_scope(pd::CallerScope::Rename{}, "rotary_attention_factor");
  const pd::RopeSpec spec = pd::rope_spec_without_table(rotary_dim, options);
  return pd::rope_frequencies(spec, options.seq_len()).variant_attention_factor;
}

std::pair<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    const std::vector<int64_t>& mrope_section, bool interleaved) {
  return detail::multimodal_rotary_tables(cos, sin, positions, mrope_section, interleaved,
                                          at::Tensor(), 1.0);
}

namespace detail {

at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            int64_t offset, const at::Tensor& positions, RotaryPairing pairing,
                            bool heads_first, const at::Tensor& inv_freq, double attention_factor,
                            bool inverse) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rotary_embedding");
  return ops::apply_rotary(
      x, cos, sin, offset,
      positions.defined() ? c10::optional<at::Tensor>(positions) : c10::nullopt,
      pairing == RotaryPairing::kInterleaved, heads_first, inverse,
      inv_freq.defined() ? c10::optional<at::Tensor>(inv_freq) : c10::nullopt, attention_factor);
}

std::pair<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    const std::vector<int64_t>& mrope_section, bool interleaved, const at::Tensor& inv_freq,
    double attention_factor) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "multimodal_rotary_tables");
  const auto tables = ops::multimodal_rotary_tables(
      cos, sin, positions, mrope_section, interleaved,
      inv_freq.defined() ? c10::optional<at::Tensor>(inv_freq) : c10::nullopt, attention_factor);
  return {std::get<0>(tables), std::get<1>(tables)};
}

std::tuple<at::Tensor, at::Tensor> rotary_embedding_qk(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
    int64_t offset, const at::Tensor& positions, RotaryPairing pairing, bool heads_first,
    const at::Tensor& inv_freq, double attention_factor, bool in_place, bool inverse) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rotary_embedding_qk");
  const auto given_positions =
      positions.defined() ? c10::optional<at::Tensor>(positions) : c10::nullopt;
  const auto given_inv_freq =
      inv_freq.defined() ? c10::optional<at::Tensor>(inv_freq) : c10::nullopt;
  const bool interleaved = pairing == RotaryPairing::kInterleaved;
  if (in_place) {
    at::Tensor q_ = q; // (handles to the same tensors)
    at::Tensor k_ = k;
    ops::apply_rotary_qk_(q_, k_, cos, sin, offset, given_positions, interleaved, heads_first,
                          inverse, given_inv_freq, attention_factor);
    return {q, k};
  }
  return ops::apply_rotary_qk(q, k, cos, sin, offset, given_positions, interleaved, heads_first,
                              inverse, given_inv_freq, attention_factor);
}

} // namespace detail

at::Tensor& rotary_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                             const at::Tensor& sin, const at::Tensor& cache_seqlens,
                             const KvCacheFuncOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rotary_kv_cache_");
  return ops::rotary_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens,
                               ops::optional_of(options.positions()),
                               options.pairing() == RotaryPairing::kInterleaved,
                               options.heads_first(), options.cache_heads_first(),
                               ops::optional_of(options.inv_freq()), options.attention_factor());
}

at::Tensor rotary_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                           const at::Tensor& sin, const at::Tensor& cache_seqlens,
                           const KvCacheFuncOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rotary_kv_cache");
  return ops::rotary_kv_cache(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens,
                              ops::optional_of(options.positions()),
                              options.pairing() == RotaryPairing::kInterleaved,
                              options.heads_first(), options.cache_heads_first(),
                              ops::optional_of(options.inv_freq()), options.attention_factor());
}

at::Tensor& rotary_paged_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& positions,
                                   const at::Tensor& slot_mapping,
                                   const KvCacheFuncOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rotary_paged_kv_cache_");
  return ops::rotary_paged_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                                     options.pairing() == RotaryPairing::kInterleaved,
                                     options.cache_heads_first(),
                                     ops::optional_of(options.inv_freq()),
                                     options.attention_factor());
}

at::Tensor rotary_paged_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                 const at::Tensor& sin, const at::Tensor& positions,
                                 const at::Tensor& slot_mapping,
                                 const KvCacheFuncOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rotary_paged_kv_cache");
  return ops::rotary_paged_kv_cache(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                                    options.pairing() == RotaryPairing::kInterleaved,
                                    options.cache_heads_first(),
                                    ops::optional_of(options.inv_freq()),
                                    options.attention_factor());
}

std::tuple<at::Tensor, at::Tensor> mrope_position_ids(const at::Tensor& token_types,
                                                      const MRopePositionIdsFuncOptions& options) {
  constexpr const char* who = "mrope_position_ids";
  TORCH_CHECK(token_types.defined(), who,
              ": token_types must be [B, L] integers (0 text, 1 image, 2 video), but got an "
              "undefined tensor");
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, who);
  const auto& intervals = options.video_time_intervals();
  return ops::mrope_position_ids(
      token_types, ops::optional_of(options.image_grid_thw()),
      ops::optional_of(options.video_grid_thw()), ops::optional_of(options.attention_mask()),
      options.spatial_merge_size(),
      intervals.has_value() ? c10::optional<at::ArrayRef<double>>(*intervals) : c10::nullopt,
      options.frames_apart());
}

} // namespace functional
} // namespace posenc
