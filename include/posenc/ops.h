#pragma once

/// @file
/// posenc's custom operators, registered with the PyTorch dispatcher under the namespace `posenc`
/// (`TORCH_LIBRARY(posenc, m)`): from Python, `torch.ops.load_library("libposenc.so")` and then
/// `torch.ops.posenc.<name>`; from TorchScript, `torch.ops.posenc.<name>(...)`. The functions
/// below call the same operators through the dispatcher, so CPU, CUDA, Meta (fake tensors) and
/// autograd all take the registered kernels.
///
/// One header per family (each function documented there, each schema once, beside its `m.def`
/// in `src/ops/<family>.cpp`):
///
///   <posenc/ops/positional_encoding.h>  sinusoidal_table, add_position_table[_|_out],
///                                       add_positional_encoding
///   <posenc/ops/rotary.h>               apply_rotary[_], apply_rotary_qk[_], rope_frequencies,
///                                       rotary_tables, multimodal_rotary_tables
///   <posenc/ops/token_embedding.h>      token_and_position_embedding
///   <posenc/ops/positions.h>            packed_positions, context_parallel_positions,
///                                       positions_from_padding_mask, mrope_position_ids
///   <posenc/ops/attention_bias.h>       alibi_slopes, alibi_bias, alibi_causal_bias,
///                                       relative_position_bucket, relative_position_bias,
///                                       relative_sinusoidal_table, rel_shift
///   <posenc/ops/vision.h>               timestep_embedding, sincos_2d_table, sincos_2d_grid_table,
///                                       sincos_3d_table, axial_rotary_tables, grid_ids,
///                                       resample_position_table, crop_position_table
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

#include <posenc/ops/positional_encoding.h>
#include <posenc/ops/rotary.h>
#include <posenc/ops/kv_cache.h>
#include <posenc/ops/token_embedding.h>
#include <posenc/ops/positions.h>
#include <posenc/ops/attention_bias.h>
#include <posenc/ops/vision.h>

namespace posenc {
namespace detail {
/// Registers nothing itself: referenced below so that any program that includes this header keeps
/// libposenc (and with it the operator registrations) even when linked with --as-needed, as
/// torchvision does for its ops. Returns the operator namespace, "posenc".
const char* operator_namespace();
// An inline variable that nothing reads is not emitted, and would not keep the library: the
// anchor is a per-translation-unit constant marked `used` (GCC, Clang), so that its reference to
// operator_namespace is always in the object file.
#if defined(__GNUC__)
/// Internal: keeps libposenc linked (see operator_namespace).
[[gnu::used]] static const char* (*const operator_namespace_anchor)() = &operator_namespace;
#else
/// Internal: keeps libposenc linked (see operator_namespace).
inline const auto operator_namespace_anchor = &operator_namespace;
#endif
} // namespace detail
} // namespace posenc

