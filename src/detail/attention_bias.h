#pragma once

// Positions as attention biases and relative encodings, in double precision: ALiBi's slopes,
// T5's relative-position buckets and the Transformer-XL / Conformer table of relative positions.
// The one definition the operators, modules and the TorchScript export use.

#include "detail/relative_bucket.h"
#include "detail/sinusoidal.h"

#include <posenc/enums.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <vector>

namespace posenc {
namespace detail {

/// Default largest ALiBi bias exponent (the paper's and BLOOM's 8).
constexpr double kDefaultAlibiMaxBias = 8.0;

/// Checks ALiBi's arguments (num_heads in [1, 2^28], max_bias in (0, 64], the shard
/// first_head .. first_head + heads - 1 inside the heads), computing nothing.
void check_alibi_arguments(int64_t num_heads, double max_bias, int64_t first_head, int64_t heads);

/// The ALiBi slopes of heads `first_head .. first_head + heads - 1` of a model with `num_heads`
/// heads: for n = 2^floor(log2 num_heads), head k (from 1) of the first n has 2^(-max_bias k / n);
/// the remaining num_heads - n heads take the odd terms 2^(-max_bias (2m - 1) / (2n)) of the
/// sequence for 2n heads (the interleaving rule of the ALiBi paper, BLOOM and MPT). Checks the
/// arguments first (check_alibi_arguments).
std::vector<double> alibi_slopes(int64_t num_heads, double max_bias, int64_t first_head,
                                 int64_t heads);

/// Checks T5's bucket arguments: num_buckets >= 2 (>= 4 bidirectional: each direction needs an
/// exact and a logarithmic bucket) and max_distance >= num_buckets.
void check_bucket_arguments(bool bidirectional, int64_t num_buckets, int64_t max_distance);

/// The `[length + key_length - 1, D]` sinusoidal table of relative positions
/// `key_length - 1, ..., 0, ..., -(length - 1)` (Transformer-XL, ESPnet's RelPositionalEncoding:
/// row r holds the encoding of relative position key_length - 1 - r, query minus key), computed in
/// double precision from the column plan of `spec` and rounded once to `dtype` on `device`.
at::Tensor relative_sinusoidal_table(int64_t length, int64_t key_length, const SinusoidSpec& spec,
                                     c10::ScalarType dtype, c10::Device device);

/// Checks the arguments of a relative table: length >= 1, key_length >= 1, d_model >= 1, a finite
/// base > 0 and a table of at most kMaxTableElements elements.
void check_relative_table_arguments(int64_t length, int64_t key_length, int64_t d_model,
                                    double base);

/// The form named `name` ("llama4" or "ministral3"), or a c10::Error that lists them.
AttentionTemperatureForm attention_temperature_form(c10::string_view name);

/// Checks the arguments of Llama 4's attention temperature: floor_scale finite and > 0,
/// attn_scale finite.
void check_attention_temperature(double floor_scale, double attn_scale);

} // namespace detail
} // namespace posenc
