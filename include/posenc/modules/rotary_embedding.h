#pragma once

#include <posenc/functional/rotary_embedding.h>
#include <posenc/modules/encoding_base.h>
#include <posenc/options/rotary_embedding.h>

#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <tuple>
#include <vector>

namespace posenc {
namespace ops {
struct RotaryModuleCall;
} // namespace ops

/// Rotary position embedding (RoPE, Su et al.): rotates pairs of channels of the queries and
/// keys of attention by angles proportional to their positions, so that attention scores depend
/// on relative positions.
///
/// The caches are the buffers `cos` and `sin`, `[cached_len, rotary_dim / 2]` (`cached_len` =
/// `max_len` unless the options say otherwise: rows past it are computed per call), computed in
/// double precision and stored in float32 (float64 after `.to(torch::kDouble)`; never 16-bit).
/// Outputs have the input's dtype, computed in at least float32. Both pairings (half-split, as in
/// GPT-NeoX / HF LLaMA, and interleaved, as in GPT-J / torchtune), partial rotary, offsets and
/// explicit positions for KV-cache decoding, and both head layouts are supported.
///
/// Example:
/// ```
/// posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(/*head_dim=*/64, /*max_len=*/2048));
/// auto q_rot = rope(q);                 // q: [B, L, H, 64], positions 0..L-1
/// auto k_new = rope(k_step, past_len);  // one decoding step at position past_len
/// ```
class RotaryEmbeddingImpl : public detail::EncodingModule<RotaryEmbeddingImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "RotaryEmbedding";
  /// `true`: the tables are computed from the options, so `to()` recomputes or casts them
  /// (see detail::EncodingModule::to) and never stores them in 16 bits.
  static constexpr bool kDerivedTables = true;

  /// Shorthand for `RotaryEmbeddingOptions(head_dim, max_len)` (defaults otherwise).
  RotaryEmbeddingImpl(int64_t head_dim, int64_t max_len)
      : RotaryEmbeddingImpl(RotaryEmbeddingOptions(head_dim, max_len)) {}
  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_);

  /// Checks `options` and (re)builds the `cos` and `sin` buffers.
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::RotaryEmbedding(head_dim=64, max_len=2048, rotary_dim=64, base=10000,
  /// pairing=half_split, heads_first=false)`.
  void pretty_print(std::ostream& stream) const override;

  // forward(x, offset = 0): rotates `x` (`[B, L, H, head_dim]`, or `[B, H, L, head_dim]` with
  // `heads_first`) for positions `offset .. offset + L - 1`; the result has the shape and dtype of
  // `x`. forward_positions(x, positions): explicit positions, `[B, L]` or `[L]` (-1 = padding: not
  // rotated), integer or floating-point (fractional positions, e.g. position interpolation: their
  // cos/sin computed from the frequencies in float64 for any value, never from the caches); with
  // `mrope_section`, also `[3, B, L]` multimodal positions (temporal, height, width of each token,
  // as Qwen2-VL's get_rope_index computes them). (Both from detail::EncodingModule.)

  /// Rotates the queries and keys of one attention call in one pass (GQA / MQA: `k` may have
  /// fewer heads than `q`; both `[B, L, H, head_dim]`, or `[B, H, L, head_dim]` with
  /// `heads_first`) at positions `offset .. offset + L - 1`; returns the rotated `(q, k)`.
  std::tuple<torch::Tensor, torch::Tensor> forward_qk(const torch::Tensor& q,
                                                      const torch::Tensor& k, int64_t offset = 0);
  /// `forward_qk` at explicit positions, `[B, L]` or `[L]` (-1 = padding: not rotated).
  std::tuple<torch::Tensor, torch::Tensor> forward_qk_positions(const torch::Tensor& q,
                                                                const torch::Tensor& k,
                                                                const torch::Tensor& positions);
  /// `forward_qk` in place (positions: `offset`, or `positions` when defined). q and k may be
  /// views of one fused qkv projection: heads whose channels are contiguous are rotated where
  /// they lie, with no copy.
  void forward_qk_(torch::Tensor& q, torch::Tensor& k, int64_t offset = 0,
                   const torch::Tensor& positions = {});

  /// The decoding step of a serving loop in one pass (ops::rotary_kv_cache_): rotates `q` in
  /// place, rotates `k` into `k_cache` and copies `v` into `v_cache`, token l of sequence b at
  /// slot `cache_seqlens[b] + l` (flash-attn's convention; int32 or int64 `[B]`). q, k, v are
  /// `[B, L, H, head_dim]` (`[B, H, L, head_dim]` with `heads_first`; k and v: H_kv heads, v any
  /// width), the caches `[B, S, H_kv, D]`, or `[B, H_kv, S, D]` with `cache_heads_first`
  /// (default: the module's `heads_first`). The rotation's positions are the slots, or
  /// `positions` (`[B, L]`, `[L]`, multimodal `[3, B, L]`: HF's position_ids of a left-padded
  /// batch). Any rope type: the rows are those forward_qk_ reads. Inference only.
  void forward_kv_cache_(torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         torch::Tensor& k_cache, torch::Tensor& v_cache,
                         const torch::Tensor& cache_seqlens, const torch::Tensor& positions = {},
                         c10::optional<bool> cache_heads_first = c10::nullopt);

  /// `forward_kv_cache_` for a paged cache and a packed batch of T tokens
  /// (ops::rotary_paged_kv_cache_, vLLM's convention): q `[T, H, head_dim]`, k `[T, H_kv,
  /// head_dim]`, v `[T, H_kv, D_v]`, positions `[T]` (or multimodal `[3, T]`), slot_mapping
  /// `[T]` (a negative slot skips the token), caches `[num_blocks, block_size, H_kv, D]` or, with
  /// `cache_heads_first`, `[num_blocks, H_kv, block_size, D]`.
  void forward_paged_kv_cache_(torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               torch::Tensor& k_cache, torch::Tensor& v_cache,
                               const torch::Tensor& positions, const torch::Tensor& slot_mapping,
                               bool cache_heads_first = false);

  /// Rotates packed sequences (flash-attn varlen / TransformerEngine THD): `x` is `[T, H,
  /// head_dim]` (whatever `heads_first`), sequence s holds tokens cu_seqlens[s] ..
  /// cu_seqlens[s + 1] - 1 and its positions start at start_positions[s] (default 0: they restart
  /// at each sequence). Returns `[T, H, head_dim]`. (dynamic/longrope: the frequencies of the
  /// pack's largest position.)
  torch::Tensor forward_packed(const torch::Tensor& x, const torch::Tensor& cu_seqlens,
                               const torch::Tensor& start_positions = {});

  /// The frequencies of the caches (float64 `[rotary_dim / 2]`, CPU): pair i of position p turns
  /// by p * inv_freq[i]. For dynamic and longrope scaling, those of calls within the model's
  /// context; `inv_freq(seq_len)` gives those of a call ending at position seq_len - 1.
  torch::Tensor inv_freq() const;
  /// The frequencies (float64 `[rotary_dim / 2]`, CPU) of a call ending at position
  /// `seq_len - 1` (`seq_len` >= 1); they differ from inv_freq() only for dynamic and longrope
  /// scaling.
  torch::Tensor inv_freq(int64_t seq_len) const;

  /// The scaling variant's attention factor (yarn, longrope; 1 for the others). cos and sin carry
  /// it unless `attention_factor_in_cos_sin(false)`: then multiply the softmax scale by its square.
  double attention_factor() const;

  /// The options this module was built with.
  RotaryEmbeddingOptions options;

  /// The cosine cache, `[cached_len, rotary_dim / 2]`, registered as the buffer `cos`.
  torch::Tensor cos;
  /// The sine cache, `[cached_len, rotary_dim / 2]`, registered as the buffer `sin`.
  torch::Tensor sin;

 private:
  friend class detail::EncodingModule<RotaryEmbeddingImpl>;
  torch::Tensor forward_at(const torch::Tensor& x, int64_t offset, const torch::Tensor& positions);
  std::tuple<torch::Tensor, torch::Tensor> forward_qk_at(const torch::Tensor& q,
                                                         const torch::Tensor& k, int64_t offset,
                                                         const torch::Tensor& positions,
                                                         bool in_place);

  void build_tables(torch::Dtype dtype, torch::Device device);
  std::vector<torch::Tensor*> derived_tables();
  std::vector<detail::TableSlot> table_slots();

  /// The frequencies (float64 `[rotary_dim / 2]`, on the caches' device), from
  /// detail::rope_frequencies: what positions past the cached rows are computed from.
  torch::Tensor inv_freq_;
  double variant_attention_factor_ = 1.0;
  /// longrope's long frequencies (float64, on the caches' device; undefined for the other
  /// variants), computed once with the caches.
  torch::Tensor long_inv_freq_;
  /// What every call needs besides the tensors (ops/rotary/module.h: the call logic, shared with
  /// posenc.nn's module through the rotary_embedding_call operators), built with the caches.
  std::shared_ptr<const ops::RotaryModuleCall> call_;
};

/// A `ModuleHolder` subclass for `RotaryEmbeddingImpl`.
TORCH_MODULE(RotaryEmbedding);

} // namespace posenc
