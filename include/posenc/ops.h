#pragma once

/// posenc's custom operators, registered with the PyTorch dispatcher under the namespace `posenc`
/// (`TORCH_LIBRARY(posenc, m)`): from Python, `torch.ops.load_library("libposenc.so")` and then
/// `torch.ops.posenc.<name>`; from TorchScript, `torch.ops.posenc.<name>(...)`. The functions
/// below call the same operators through the dispatcher, so CPU, CUDA, Meta (fake tensors) and
/// autograd all take the registered kernels.
///
/// Schemas:
///
///   posenc::sinusoidal_table(int max_len, int d_model, float base=10000., int offset=0,
///       str channels="interleaved", str frequencies="paper", ScalarType? dtype=None,
///       Device? device=None) -> Tensor
///   posenc::add_position_table(Tensor x, Tensor table, int offset=0, bool batch_first=True,
///       Tensor? positions=None, float scale=1., Tensor? columns=None) -> Tensor
///   posenc::add_positional_encoding(Tensor x, int offset=0, float base=10000.,
///       bool batch_first=True, Tensor? positions=None, float scale=1.,
///       str channels="interleaved", str frequencies="paper") -> Tensor
///   posenc::apply_rotary(Tensor x, Tensor cos, Tensor sin, int offset=0, Tensor? positions=None,
///       bool interleaved=False, bool heads_first=False, bool inverse=False,
///       Tensor? inv_freq=None, float attention_factor=1.) -> Tensor
///   posenc::add_position_table_(Tensor(a!) x, ...same as add_position_table...) -> ()
///   posenc::add_position_table_out(...same..., *, Tensor(a!) out) -> ()
///   posenc::apply_rotary_(Tensor(a!) x, ...same as apply_rotary...) -> ()
///   posenc::apply_rotary_qk(Tensor q, Tensor k, Tensor cos, Tensor sin, ...same as apply_rotary
///       after x...) -> (Tensor, Tensor)
///   posenc::apply_rotary_qk_(Tensor(a!) q, Tensor(b!) k, ...same...) -> ()
///   posenc::multimodal_rotary_tables(Tensor cos, Tensor sin, Tensor positions,
///       int[] mrope_section, bool interleaved=False, Tensor? inv_freq=None,
///       float attention_factor=1.) -> (Tensor, Tensor)
///   posenc::rope_frequencies(int rotary_dim, float base=10000., str rope_parameters="{}",
///       float[]? freq_factors=None, int? seq_len=None, Tensor? positions=None,
///       Tensor? frequencies=None, Device? device=None) -> (Tensor, Tensor)
///   posenc::rotary_tables(int max_len, Tensor inv_freq, float attention_factor=1.,
///       ScalarType? dtype=None, Device? device=None) -> (Tensor, Tensor)
///   posenc::token_and_position_embedding(Tensor tokens, Tensor weight, Tensor table, int offset=0,
///       bool batch_first=True, Tensor? positions=None, float scale=1., int padding_idx=-1,
///       float dropout=0., bool train=False, Tensor? columns=None) -> (Tensor, Tensor)
///   posenc::packed_positions(Tensor cu_seqlens, int total, Tensor? start_positions=None) -> Tensor
///   posenc::context_parallel_positions(int seq_len, int world_size, int rank, bool zigzag=False,
///       Device? device=None) -> Tensor
///   posenc::alibi_slopes(int num_heads, float max_bias=8., int first_head=0, int? heads=None,
///       ScalarType? dtype=None, Device? device=None) -> Tensor
///   posenc::alibi_bias(Tensor slopes, int query_length, int key_length, int? offset=None,
///       bool causal=False, ScalarType? dtype=None) -> Tensor
///   posenc::alibi_causal_bias(Tensor slopes, int key_length, Tensor? attention_mask=None,
///       ScalarType? dtype=None) -> Tensor
///   posenc::relative_position_bucket(Tensor relative_position, bool bidirectional=True,
///       int num_buckets=32, int max_distance=128) -> Tensor
///   posenc::relative_position_bias(Tensor weight, int query_length, int key_length,
///       bool bidirectional=True, int max_distance=128, int offset=0) -> Tensor
///   posenc::relative_sinusoidal_table(int length, int d_model, float base=10000.,
///       int? key_length=None, ScalarType? dtype=None, Device? device=None) -> Tensor
///   posenc::rel_shift(Tensor x) -> Tensor
///
/// The in-place and out variants return nothing (the way mutating custom operators compose with
/// torch.compile and torch.export); the C++ functions below return the mutated tensor. The
/// gradients are the private operators `posenc::_add_position_table_backward` and
/// `posenc::_token_and_position_embedding_backward`, not part of this API.
///
/// Positions: `offset` selects `offset .. offset + L - 1`; `positions` (int64, `[L]` or one row
/// per sequence) selects any, with -1 marking padding (no encoding added / no rotation). On the
/// CPU their range (and the token ids') is read once per call; on CUDA nothing is read back: the
/// kernels check what they read (a device-side assertion, see detail/device_checks.h).
///
/// Floating-point positions (fractional: position interpolation, diffusion timesteps; finite and
/// in [0, 2^63), no padding value) are accepted where the encoding's definition is at hand: by
/// add_positional_encoding always, by the table operators with `columns` / `inv_freq` (below).
/// Their rows are computed from the definition in float64, never read from or interpolated in the
/// table (so a table that requires grad is refused, as for `columns`). NaN or Inf raise.
///
/// Positions past a table: an error, unless the encoding's definition is passed as data, as
/// llama.cpp passes its frequencies: `columns`, the float64 `[2, D]` column plan of a sinusoidal
/// table (row 0 each column's frequency, row 1 its kind: 0 sine, 1 cosine, 2 zero; what
/// `PositionalEncoding` passes), or `inv_freq`, the float64 `[R/2]` frequencies of rotary caches
/// (with `attention_factor`, the factor the caches' cos/sin carry), on the table's device. Rows
/// past the table are then computed in float64 where the positions lie: with libm on the CPU,
/// exactly as the table's own rows were; on CUDA with its float64 sin/cos (within an ulp of
/// float64, so equal after rounding to float32 but for values that close to a rounding boundary).

#include <posenc/options/rotary_embedding.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

namespace posenc {
namespace ops {

/// The `[max_len, d_model]` sinusoidal table for positions `offset .. offset + max_len - 1`,
/// computed in float64 and rounded once to `dtype` (default float32) on `device` (default CPU).
/// `channels`: "interleaved" or "concatenated"; `frequencies`: "paper" or "tensor2tensor".
at::Tensor sinusoidal_table(int64_t max_len, int64_t d_model, double base = 10000.0,
                            int64_t offset = 0, c10::string_view channels = "interleaved",
                            c10::string_view frequencies = "paper",
                            c10::optional<at::ScalarType> dtype = c10::nullopt,
                            c10::optional<at::Device> device = c10::nullopt);

/// `x * scale + table[positions]` broadcast over the batch, in the dtype of `x` (formed in at
/// least float32, rounded once). `x` is `[B, L, D]` (`batch_first`) or `[L, B, D]`; `table` is
/// `[max_len, D]` or `[1, max_len, D]`. Differentiable with respect to `x` and `table` (the
/// batch-summed gradient lands in the rows used), so a trainable table works too; a table extended
/// by `columns` gets no gradient.
at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset = 0,
                              bool batch_first = true,
                              const c10::optional<at::Tensor>& positions = c10::nullopt,
                              double scale = 1.0,
                              const c10::optional<at::Tensor>& columns = c10::nullopt);

/// `x * scale + PE(positions)` without a precomputed table: the rows needed are computed in
/// float64 for every call (float64 rows for float64 inputs, float32 otherwise), for any position.
/// Differentiable with respect to `x`.
at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset = 0, double base = 10000.0,
                                   bool batch_first = true,
                                   const c10::optional<at::Tensor>& positions = c10::nullopt,
                                   double scale = 1.0, c10::string_view channels = "interleaved",
                                   c10::string_view frequencies = "paper");

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

/// `add_position_table` in place: `x = x * scale + table[positions]`. Returns `x`. Autograd treats
/// it like any in-place operation (x must not be a leaf that requires grad).
at::Tensor& add_position_table_(at::Tensor& x, const at::Tensor& table, int64_t offset = 0,
                                bool batch_first = true,
                                const c10::optional<at::Tensor>& positions = c10::nullopt,
                                double scale = 1.0,
                                const c10::optional<at::Tensor>& columns = c10::nullopt);

/// `add_position_table` into a caller-owned `out` (of x's shape, dtype and device, or empty to be
/// resized): no allocation per call. Not differentiable. Returns `out`.
at::Tensor& add_position_table_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& table,
                                   int64_t offset = 0, bool batch_first = true,
                                   const c10::optional<at::Tensor>& positions = c10::nullopt,
                                   double scale = 1.0,
                                   const c10::optional<at::Tensor>& columns = c10::nullopt);

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
  int64_t rotary_dim = 2;
  double base = 10000.0;
  RopeScalingOptions scaling;
  std::vector<double> freq_factors;
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

/// Token embedding, scale, positions and dropout in one pass: `dropout(weight[tokens] * scale +
/// table[positions])`. `tokens` is int64 `[B, L]` (`batch_first`) or `[L, B]`; the output is
/// `[B, L, D]` / `[L, B, D]` in the weight's dtype. Returns the output and the dropout mask
/// (bool, of the output's shape; empty unless `train` and `dropout > 0`). Differentiable with
/// respect to `weight` (rows `padding_idx` get no gradient) and `table`.
///
/// Dropout: a counter-based hash of each element's index keyed by one 64-bit number per call from
/// the default generator of the device (a draw on the CPU; on CUDA, made on the device from a
/// Philox seed and offset, so CUDA-graph safe); the mask depends only on the seed, the device and
/// the output's shape: never on the layout of the arguments or on which kernel ran.
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset = 0,
    bool batch_first = true, const c10::optional<at::Tensor>& positions = c10::nullopt,
    double scale = 1.0, int64_t padding_idx = -1, double dropout = 0.0, bool train = false,
    const c10::optional<at::Tensor>& columns = c10::nullopt);

/// Positions of packed sequences (flash-attn varlen, TransformerEngine's THD format): `total`
/// tokens, sequence s holding tokens cu_seqlens[s] .. cu_seqlens[s + 1] - 1 (`cu_seqlens`: 1-D
/// int32 or int64, 0 first, non-decreasing, `total` last); its tokens get positions
/// start_positions[s], start_positions[s] + 1, ... (default 0: positions restart at each
/// sequence). An int64 `[total]` tensor on the device of `cu_seqlens` (computed there: nothing is read back from a GPU).
at::Tensor packed_positions(const at::Tensor& cu_seqlens, int64_t total,
                            const c10::optional<at::Tensor>& start_positions = c10::nullopt);

/// Positions of one rank's shard of a `seq_len` sequence under context parallelism: chunk `rank`
/// of `world_size` equal chunks, or, `zigzag`, TransformerEngine's load-balanced split into
/// `2 * world_size` chunks of which rank r holds chunks r and 2 * world_size - 1 - r. int64, on
/// `device` (default CPU).
at::Tensor context_parallel_positions(int64_t seq_len, int64_t world_size, int64_t rank,
                                      bool zigzag = false,
                                      c10::optional<at::Device> device = c10::nullopt);


// ---- attention biases and relative encodings (src/ops/attention_bias.cpp) ----

/// ALiBi's slopes of heads `first_head .. first_head + heads - 1` (default: all from
/// `first_head`) of a model with `num_heads` heads: 2^(-max_bias k / n) for the first n =
/// 2^floor(log2 num_heads) heads, the odd terms of the sequence for 2n heads for the others (BLOOM,
/// MPT, the ALiBi paper). Computed in float64, rounded once to `dtype` (default float32), on
/// `device` (default CPU). A tensor-parallel rank with heads h0 .. h0 + n - 1 passes
/// `first_head = h0, heads = n`.
at::Tensor alibi_slopes(int64_t num_heads, double max_bias = 8.0, int64_t first_head = 0,
                        c10::optional<int64_t> heads = c10::nullopt,
                        c10::optional<at::ScalarType> dtype = c10::nullopt,
                        c10::optional<at::Device> device = c10::nullopt);

/// The full ALiBi bias `-slope * |(offset + i) - j|`, `[H, Lq, Lk]` for slopes `[H]` or
/// `[B, H, Lq, Lk]` for per-batch slopes `[B, H]`, in the slopes' dtype (or `dtype`): query i at
/// position `offset + i` (default `key_length - query_length`: the queries are the last keys, as
/// in KV-cache decoding and flash-attn), key j at position j. `causal` adds -inf where a key lies
/// after its query. Usable as the float `attn_mask` of `at::scaled_dot_product_attention` (and,
/// reshaped to `[B * H, Lq, Lk]`, of `torch::nn::MultiheadAttention`).
at::Tensor alibi_bias(const at::Tensor& slopes, int64_t query_length, int64_t key_length,
                      c10::optional<int64_t> offset = c10::nullopt, bool causal = false,
                      c10::optional<at::ScalarType> dtype = c10::nullopt);

/// The compact causal ALiBi bias `slope * key_position`, `[H, 1, Lk]` (slopes `[H]`) or
/// `[B, H, 1, Lk]` (slopes `[B, H]` or an `attention_mask`): under a causal mask it differs from
/// the full bias by a constant per query row, which softmax cancels, so it takes O(H L) memory
/// instead of O(H L^2) (BLOOM's form). With `attention_mask` (`[B, Lk]`, 1 for a token, 0 for
/// padding) the key positions count each sequence's tokens from its first one (left padding),
/// padding at 0, as BLOOM's `build_alibi_tensor`.
at::Tensor alibi_causal_bias(const at::Tensor& slopes, int64_t key_length,
                             const c10::optional<at::Tensor>& attention_mask = c10::nullopt,
                             c10::optional<at::ScalarType> dtype = c10::nullopt);

/// T5's bucket (int64, same shape) of each relative position `key - query` (an integer tensor):
/// half the buckets (per direction when `bidirectional`) hold the distances below
/// `num_buckets / 2` (per direction) exactly, the others logarithmic ranges up to `max_distance`.
/// Computed on the CPU (positions on another device are copied there and back).
at::Tensor relative_position_bucket(const at::Tensor& relative_position, bool bidirectional = true,
                                    int64_t num_buckets = 32, int64_t max_distance = 128);

/// T5's relative position bias `[1, H, Lq, Lk]` from the learned table `weight`
/// (`[num_buckets, H]`, T5's `relative_attention_bias.weight`): `weight[bucket(j - (offset + i)),
/// h]`. Differentiable with respect to `weight`.
at::Tensor relative_position_bias(const at::Tensor& weight, int64_t query_length,
                                  int64_t key_length, bool bidirectional = true,
                                  int64_t max_distance = 128, int64_t offset = 0);

/// The sinusoidal table of relative positions `key_length - 1, ..., -(length - 1)` (query minus
/// key; default `key_length = length`: `[2 * length - 1, d_model]`), interleaved sin/cos with
/// the paper's frequencies, as Transformer-XL and ESPnet's `RelPositionalEncoding` build it.
/// Computed in float64 and rounded once to `dtype` (default float32) on `device`.
at::Tensor relative_sinusoidal_table(int64_t length, int64_t d_model, double base = 10000.0,
                                     c10::optional<int64_t> key_length = c10::nullopt,
                                     c10::optional<at::ScalarType> dtype = c10::nullopt,
                                     c10::optional<at::Device> device = c10::nullopt);

/// Transformer-XL's relative shift: scores `[..., Lq, Lq + Lk - 1]` of each query against the
/// rows of `relative_sinusoidal_table(Lq, d, key_length = Lk)` become `[..., Lq, Lk]`, entry
/// (i, j) the score for the relative position of query i (at Lk - Lq + i) and key j.
/// Differentiable.
at::Tensor rel_shift(const at::Tensor& x);

// ---- vision and diffusion (src/ops/vision.cpp) ----

/// The diffusion timestep embedding (DDPM; diffusers' `get_timestep_embedding`, same names and
/// defaults): `[N, embedding_dim]` for timesteps `[N]` (integer or fractional, any device), columns
/// `sin(scale t f_k)` then `cos(scale t f_k)` (`flip_sin_to_cos`: cos first), f_k =
/// `exp(-ln(max_period) k / (embedding_dim / 2 - downscale_freq_shift))`, a zero column last for
/// odd widths. Computed in float64, rounded once to `dtype` (default float32). NaN or infinite
/// timesteps are an error.
at::Tensor timestep_embedding(const at::Tensor& timesteps, int64_t embedding_dim,
                              bool flip_sin_to_cos = false, double downscale_freq_shift = 1.0,
                              double scale = 1.0, int64_t max_period = 10000,
                              c10::optional<at::ScalarType> dtype = c10::nullopt);

/// The 2-D sin-cos table of a patch grid as diffusers' `get_2d_sincos_pos_embed` builds it (DiT,
/// PixArt, SD3; MAE with `base_size` equal to the grid size): `[H * W, embed_dim]` for
/// `grid_size` `{H, W}` (or `{S}`: square), row `i * W + j` the patch at (i, j), at the coordinates
/// `(j * base_size / W, i * base_size / H) / interpolation_scale`; the first half of the columns
/// encodes the column coordinate, the second the row coordinate, each `[sin | cos]` of
/// `embed_dim / 4` frequencies 10000^(-k / (embed_dim / 4)). With `cls_token` and `extra_tokens`
/// > 0, that many zero rows first (diffusers' rule; MAE's class token: `cls_token = true,
/// extra_tokens = 1`). Computed in float64, rounded once to `dtype` (default float32).
at::Tensor sincos_2d_table(int64_t embed_dim, c10::IntArrayRef grid_size, bool cls_token = false,
                           int64_t extra_tokens = 0, double interpolation_scale = 1.0,
                           int64_t base_size = 16,
                           c10::optional<at::ScalarType> dtype = c10::nullopt,
                           c10::optional<at::Device> device = c10::nullopt);

/// timm's `build_sincos2d_pos_embed` (same names and defaults): `[H * W, dim]` for `feat_shape`
/// `{H, W}` at integer coordinates (i, j) (`reverse_coord`: (j, i) of `{W, H}`), `dim / 4`
/// frequencies temperature^(-k / (dim / 4)), columns `sin(i) sin(j) cos(i) cos(j)` or, with
/// `interleave_sin_cos`, `sin(i) cos(i) sin(j) cos(j)`. float64, rounded once to `dtype`.
at::Tensor sincos_2d_grid_table(c10::IntArrayRef feat_shape, int64_t dim = 64,
                                double temperature = 10000.0, bool reverse_coord = false,
                                bool interleave_sin_cos = false,
                                c10::optional<at::ScalarType> dtype = c10::nullopt,
                                c10::optional<at::Device> device = c10::nullopt);

/// Axial RoPE (Flux's `FluxPosEmbed`; the 3-D RoPE of video DiTs): cos and sin `[N, sum(axes_dim)
/// / 2]` for the coordinates `ids` `[N, A]` of N tokens on A = `axes_dim.size()` axes (integer or
/// fractional, negative allowed; Flux: `[S, 3]` float ids, `axes_dim` {16, 56, 56}). Axis a turns
/// `axes_dim[a] / 2` frequencies theta^(-2i / axes_dim[a]) by `ids[n, a]`; the axes' columns follow
/// each other. Computed in float64, rounded once to `dtype` (default float32), on the device of
/// `ids`; rotate with `apply_rotary(x, cos, sin, ..., interleaved = true)` (Flux's pairs) for a
/// sequence of N tokens. NaN or infinite ids are an error.
std::tuple<at::Tensor, at::Tensor> axial_rotary_tables(
    const at::Tensor& ids, c10::IntArrayRef axes_dim, double theta = 10000.0,
    c10::optional<at::ScalarType> dtype = c10::nullopt);

/// timm's `resample_abs_pos_embed` (same names and defaults): a learned ViT position table
/// `posemb` (`[1, N, D]` or `[N, D]`: `num_prefix_tokens` class/register rows, then the patch grid
/// `old_size` `{H, W}` in row-major order; empty `old_size`: a square grid) resized to the grid
/// `new_size` (`{H', W'}`, or `{S}`: square) with PyTorch's 2-D interpolation
/// (`interpolation` "bicubic", "bilinear" or "nearest"; `antialias` for the first two); the
/// prefix rows are kept. Computed in float32 (float64 tables in float64), returned in the table's
/// dtype; differentiable. A grid of the same size comes back unchanged (a copy).
at::Tensor resample_position_table(const at::Tensor& posemb, c10::IntArrayRef new_size,
                                   c10::IntArrayRef old_size = {}, int64_t num_prefix_tokens = 1,
                                   c10::string_view interpolation = "bicubic",
                                   bool antialias = true, bool align_corners = false);

/// diffusers' `get_3d_sincos_pos_embed` (CogVideoX, Latte; same names and defaults): `[T, H * W,
/// embed_dim]` for `spatial_size` `{W, H}` (diffusers' order; `{S}`: square) and `temporal_size`
/// T, row `[t, i * W + j]` frame t's patch at (i, j). The first `embed_dim / 4` columns encode
/// `t / temporal_interpolation_scale` (`[sin | cos]` of `embed_dim / 8` frequencies
/// 10000^(-k / (embed_dim / 8))), the rest the column, then the row coordinate
/// `(j, i) / spatial_interpolation_scale` as `sincos_2d_table` lays them out (`3 embed_dim / 16`
/// frequencies each). `embed_dim` a multiple of 16. float64, rounded once to `dtype`.
at::Tensor sincos_3d_table(int64_t embed_dim, c10::IntArrayRef spatial_size, int64_t temporal_size,
                           double spatial_interpolation_scale = 1.0,
                           double temporal_interpolation_scale = 1.0,
                           c10::optional<at::ScalarType> dtype = c10::nullopt,
                           c10::optional<at::Device> device = c10::nullopt);

/// SD3's `PatchEmbed.cropped_pos_embed`: the centre `new_size` `{h, w}` (`{S}`: square) of a
/// position table's grid (`[1, N, D]` or `[N, D]`: `num_prefix_tokens` rows kept, then the grid
/// `old_size` `{H, W}`, empty: square), rows `top = (H - h) / 2` .. and columns
/// `left = (W - w) / 2` .., floor division. SD3: a `pos_embed_max_size`^2 table cropped to the
/// latent's patch grid. Differentiable; every device.
at::Tensor crop_position_table(const at::Tensor& posemb, c10::IntArrayRef new_size,
                               c10::IntArrayRef old_size = {}, int64_t num_prefix_tokens = 0);

/// The token coordinates of timm's axial RoPE of index grids (`RotaryEmbeddingCat(dim,
/// in_pixels=False, ...)`, EVA-02; same names and defaults): `[H * W, 2]` for the patch grid
/// `feat_shape` `{H, W}`, the token at (i, j) (row-major) at `(i + grid_offset) * ref_H / H` and
/// `(j + grid_offset) * ref_W / W` (`ref_feat_shape` `{ref_H, ref_W}`, the pretraining grid;
/// empty: no rescaling), in that order (`grid_indexing` "ij") or swapped ("xy"). float64 (the
/// default `dtype`). `axial_rotary_tables(ids, {dim / 2, dim / 2}, temperature)` turns them into
/// timm's tables: each coordinate turns dim / 4 frequencies temperature^(-k / (dim / 4)).
at::Tensor grid_ids(c10::IntArrayRef feat_shape, c10::IntArrayRef ref_feat_shape = {},
                    double grid_offset = 0.0, c10::string_view grid_indexing = "ij",
                    c10::optional<at::ScalarType> dtype = c10::nullopt,
                    c10::optional<at::Device> device = c10::nullopt);

} // namespace ops

namespace detail {
/// Registers nothing itself: referenced below so that any program that includes this header keeps
/// libposenc (and with it the operator registrations) even when linked with --as-needed, as
/// torchvision does for its ops. Returns the operator namespace, "posenc".
const char* operator_namespace();
// An inline variable that nothing reads is not emitted, and would not keep the library: the
// anchor is a per-translation-unit constant marked `used` (GCC, Clang), so that its reference to
// operator_namespace is always in the object file.
#if defined(__GNUC__)
[[gnu::used]] static const char* (*const operator_namespace_anchor)() = &operator_namespace;
#else
inline const auto operator_namespace_anchor = &operator_namespace;
#endif
} // namespace detail
} // namespace posenc
