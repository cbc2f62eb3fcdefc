#pragma once

/// @file
/// posenc's operators: rotary embeddings: rotating queries and keys, RoPE frequencies and caches, M-RoPE. Each function calls its operator
/// `posenc::<name>` through the dispatcher (`torch.ops.posenc.<name>` from Python and
/// TorchScript); its schema is the `m.def` beside its entry point in `src/ops/rotary/rotary.cpp` (kernels:
/// cpu/, cuda/, meta/, autograd/ and composite/rotary_kernel.*). What positions, padding and rows past a table mean for every operator is
/// in <posenc/ops.h>.

#include <posenc/options/rotary_embedding.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace posenc {
namespace ops {

/// Rotary position embedding: rotates the first `R = 2 * cos.size(1)` channels of `x` (query or
/// key heads, `[B, L, H, Dh]`, or `[B, H, L, Dh]` with `heads_first`) by the angles whose cosines
/// and sines are the rows `positions` of `cos` and `sin` (`[max_len, R/2]`); channels past `R`
/// pass through. Pairs are (i, i + R/2) or, with `interleaved`, (2i, 2i + 1). `inverse` rotates
/// back. The result has the dtype of `x` (computed in at least float32). Differentiable with
/// respect to `x`; `cos` and `sin` must not require grad. With `inv_freq`, positions past the
/// caches are computed from it.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset = 0,
                        const c10::optional<at::Tensor>& positions = c10::nullopt,
                        bool interleaved = false, bool heads_first = false, bool inverse = false,
                        const c10::optional<at::Tensor>& inv_freq = c10::nullopt,
                        double attention_factor = 1.0);

/// `apply_rotary` in place. Returns `x`.
at::Tensor& apply_rotary_(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t offset = 0,
                          const c10::optional<at::Tensor>& positions = c10::nullopt,
                          bool interleaved = false, bool heads_first = false, bool inverse = false,
                          const c10::optional<at::Tensor>& inv_freq = c10::nullopt,
                          double attention_factor = 1.0);

/// Queries and keys of one attention call rotated in one pass (like vLLM's `rotary_embedding` and
/// flash-attn's `apply_rotary_emb_qkv_`): `q` `[B, L, Hq, Dq]` and `k` `[B, L, Hk, Dk]` (or
/// `[B, H, L, D]` with `heads_first`) share batch, length, positions and dtype; their head counts
/// may differ (GQA, MQA) and so may their widths (each >= R). Every other argument as in
/// `apply_rotary`. The hand-written kernels read each token's cos/sin row once for all its heads
/// and read inputs whose channels are contiguous where they lie (any other strides, e.g. views of
/// a fused qkv projection). Differentiable with respect to `q` and `k`.
std::tuple<at::Tensor, at::Tensor> apply_rotary_qk(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
    int64_t offset = 0, const c10::optional<at::Tensor>& positions = c10::nullopt,
    bool interleaved = false, bool heads_first = false, bool inverse = false,
    const c10::optional<at::Tensor>& inv_freq = c10::nullopt, double attention_factor = 1.0);

/// `apply_rotary_qk` in place; q and k may be views of one fused qkv tensor (channels contiguous:
/// rotated where they lie, no copy) but must not overlap each other.
void apply_rotary_qk_(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                      int64_t offset = 0, const c10::optional<at::Tensor>& positions = c10::nullopt,
                      bool interleaved = false, bool heads_first = false, bool inverse = false,
                      const c10::optional<at::Tensor>& inv_freq = c10::nullopt,
                      double attention_factor = 1.0);

/// Multimodal RoPE (Qwen2-VL's M-RoPE; Qwen3-VL's interleaved form with `interleaved`): the
/// cos/sin of each token, `[B, L, R/2]` (or `[L, R/2]`), for positions `[3, B, L]` (or `[3, L]`)
/// holding each token's temporal, height and width position: frequency i takes the row of the
/// axis `mrope_section` gives it (see RotaryEmbeddingOptions::mrope_section) from `cos`/`sin`
/// (`[max_len, R/2]`; with `inv_freq` and `attention_factor`, positions past them are computed in
/// float64). Values are the caches' own (gathered, not recomputed). Rotate with them through
/// `apply_rotary` / `apply_rotary_qk`, passing them flattened to `[B * L, R/2]` and positions
/// `arange(B * L).view({B, L})`. Not differentiable (fixed tables).
std::tuple<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    at::IntArrayRef mrope_section, bool interleaved = false,
    const c10::optional<at::Tensor>& inv_freq = c10::nullopt, double attention_factor = 1.0);

/// The arguments of `rope_frequencies` (HF transformers' names and defaults, as in
/// RotaryEmbeddingOptions; `scaling` travels to the operator as its rope_parameters JSON).
struct RopeFrequenciesArguments {
  /// The rotated width R (even, >= 2): `inv_freq` has R/2 frequencies. Default: 2.
  int64_t rotary_dim = 2;
  /// Base of the frequencies base^(-2i / R). Default: 10000.
  double base = 10000.0;
  /// The variant and its parameters (sent to the operator as rope_parameters JSON). Default:
  /// kDefault, no scaling.
  RopeScalingOptions scaling;
  /// Per-frequency divisors applied after the scaling; empty or R/2 positive values. Default:
  /// empty.
  std::vector<double> freq_factors;
  /// dynamic, longrope: the length of the call (its last position + 1). Default: unset.
  c10::optional<int64_t> seq_len;
  at::Tensor positions; ///< the positions of a call, on any device (instead of seq_len)
  at::Tensor frequencies; ///< with positions: the variant's frequencies on their device (below)
  c10::optional<at::Device> device; ///< where inv_freq lies (default: the positions' device, or CPU)
};

/// The frequencies of a RoPE variant, computed in float64 by the definition the modules use
/// (detail::rope_frequencies). The variant is transformers' rope_parameters block as JSON text,
/// the operator's `rope_parameters` (`{"rope_type": "llama3", "factor": 8.0, "low_freq_factor":
/// 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}`, with
/// `max_position_embeddings` where the type reads the model's context length): every rope type of
/// detail/rope_types.cpp with transformers' key names and defaults; an unknown key or type is an
/// error. Returns `inv_freq` (float64 `[R/2]`, on `device`, default CPU) and the
/// variant's attention factor (a float64 scalar tensor on the CPU; 1 except for yarn and
/// longrope). `seq_len`: the length of the call (dynamic, longrope); `max_position_embeddings` is
/// needed where the variant reads it. On a device, `inv_freq` is computed on the host and placed
/// there in the arguments of a kernel (detail::upload): no copy from host memory, no wait.
/// `positions`: the positions of a call instead of its length, on their device (`device`, if
/// given, must be theirs): `inv_freq` is computed there, by their largest position, without
/// reading them back (detail::rope_frequencies_at), from `frequencies` when given: this
/// operator's own result without positions, on their device (LongRoPE: `[2, R/2]`, that and the
/// long frequencies of `seq_len = original_max_position_embeddings + 1`; the modules pass theirs);
/// without it they are made on the host and placed there as above. Either way a CUDA call never
/// synchronises.
/// From Python: `torch.ops.posenc.rope_frequencies(128, 500000.0, json.dumps(config.rope_parameters))`.
std::tuple<at::Tensor, at::Tensor> rope_frequencies(const RopeFrequenciesArguments& arguments);

/// cos/sin caches `[max_len, R/2]` of positions 0 .. max_len - 1 for the float64 frequencies
/// `inv_freq` (`[R/2]`), times `attention_factor`, computed in float64 and rounded once to
/// `dtype` (default float32) on `device` (default: the device of `inv_freq`; on CUDA the rows are
/// computed there, without a read back): what apply_rotary reads.
std::tuple<at::Tensor, at::Tensor> rotary_tables(
    int64_t max_len, const at::Tensor& inv_freq, double attention_factor = 1.0,
    c10::optional<at::ScalarType> dtype = c10::nullopt,
    c10::optional<at::Device> device = c10::nullopt);

} // namespace ops
} // namespace posenc
