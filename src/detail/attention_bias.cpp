#include "detail/attention_bias.h"

#include "detail/checks.h"
#include "detail/enum_names.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace posenc {
namespace detail {

void check_alibi_arguments(int64_t num_heads, double max_bias, int64_t first_head, int64_t heads) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(num_heads >= 1 && num_heads <= kMaxTableElements, who,
              ": num_heads must be in [1, 2^28] (posenc's limit of heads), but got ", num_heads,
              "; pass the number of attention heads of the model");
  TORCH_CHECK(max_bias > 0 && max_bias <= 64, who,
              ": max_bias must be in (0, 64] (the smallest slope is 2^-max_bias), but got ",
              max_bias, "; ALiBi models use 8 (the slopes 2^-1 .. 2^-8 for 8 heads)");
  TORCH_CHECK(first_head >= 0 && first_head < num_heads, who,
              ": first_head must be in [0, num_heads) = [0, ", num_heads, "), but got ", first_head,
              "; pass the index of the first head of this shard");
  TORCH_CHECK(heads >= 1 && heads <= num_heads - first_head, who,
              ": a shard of heads first_head .. first_head + heads - 1 must lie in the model's ",
              num_heads, " heads, but got first_head = ", first_head, " and heads = ", heads,
              "; pass heads in [1, ", num_heads - first_head, "]");
}

std::vector<double> alibi_slopes(int64_t num_heads, double max_bias, int64_t first_head,
                                 int64_t heads) {
  check_alibi_arguments(num_heads, max_bias, first_head, heads);
  int64_t n = 1; // the largest power of two <= num_heads
  while (n <= num_heads / 2) {
    n *= 2;
  }
  std::vector<double> slopes;
  slopes.reserve(static_cast<size_t>(heads));
  for (int64_t h = first_head; h < first_head + heads; ++h) {
    // exponent k / n for the first n heads, (2m - 1) / (2n) for the m-th of the others
    const double exponent = h < n ? static_cast<double>(h + 1) / static_cast<double>(n)
                                  : static_cast<double>(2 * (h - n) + 1) /
                                        static_cast<double>(2 * n);
    slopes.push_back(std::exp2(-max_bias * exponent));
  }
  return slopes;
}

void check_bucket_arguments(bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  static constexpr detail::CallerName who{};
  const int64_t smallest = bidirectional ? 4 : 2;
  TORCH_CHECK(num_buckets >= smallest, who, ": num_buckets must be >= ", smallest,
              bidirectional ? " when bidirectional (each direction needs an exact and a "
                              "logarithmic bucket)"
                            : " (an exact and a logarithmic bucket)",
              ", but got ", num_buckets, "; T5 uses 32");
  TORCH_CHECK(max_distance >= num_buckets, who,
              ": max_distance must be >= num_buckets (the logarithmic buckets span the distances "
              "from num_buckets / 2 up to max_distance), but got max_distance = ",
              max_distance, " and num_buckets = ", num_buckets, "; T5 uses 128 with 32 buckets");
  // (the TorchScript export of RelativePositionBias tabulates the buckets of the distances
  // -max_distance .. max_distance: 2 * max_distance + 1 entries)
  TORCH_CHECK(max_distance <= kMaxTableElements / 2, who,
              ": max_distance must be <= 2^27 (posenc's limit of bucketed distances), but got ",
              max_distance, "; T5 uses 128");
}

void check_relative_table_arguments(int64_t length, int64_t key_length, int64_t d_model,
                                    double base) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(length >= 1, who, ": length must be >= 1, but got ", length,
              "; pass the number of queries (the sequence length)");
  TORCH_CHECK(key_length >= 1, who, ": key_length must be >= 1, but got ", key_length,
              "; pass the number of keys (the cached and the new ones)");
  TORCH_CHECK(key_length <= std::numeric_limits<int64_t>::max() - length, who,
              ": length + key_length must fit in int64, but got ", length, " and ", key_length);
  // the table arguments (d_model, base) and the size of its length + key_length - 1 rows
  check_table_arguments(length + key_length - 1, d_model, base);
}

AttentionTemperatureForm attention_temperature_form(c10::string_view name) {
  static constexpr detail::CallerName who{};
  const c10::optional<AttentionTemperatureForm> form = enum_value<AttentionTemperatureForm>(name);
  TORCH_CHECK(form, who,
              ": form must be \"llama4\" (Llama 4's attention "
              "temperature tuning) or \"ministral3\" (Ministral 3's and Mistral 4's "
              "llama_4_scaling_beta), but got \"",
              std::string(name.data(), name.size()), "\"");
  return *form;
}

void check_attention_temperature(double floor_scale, double attn_scale) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(std::isfinite(floor_scale) && floor_scale > 0.0, who,
              ": floor_scale must be finite and > 0 (positions are counted in steps of it), but "
              "got ",
              floor_scale, "; Llama 4 uses 8192, Ministral 3 its original_max_position_embeddings");
  TORCH_CHECK(std::isfinite(attn_scale), who, ": attn_scale must be finite, but got ", attn_scale,
              "; Llama 4 uses 0.1, Ministral 3 its llama_4_scaling_beta");
  // The scales are computed in float32 (as transformers does): p / floor_scale, its logarithm
  // and the product with attn_scale must stay finite there for every int64 position p < 2^63.
  // With floor_scale >= 2^-62, p / floor_scale <= 2^125, two binades below float32's largest
  // value (some LibTorch builds' float32 log1p overflows at 2^127, LibTorch 1.13's), and its
  // logarithm is below 87; with |attn_scale| <= float32's largest value / 128, the product and
  // the 1 added stay finite.
  constexpr double kSmallestFloorScale = 0x1p-62;
  constexpr double kLargestAttnScale = static_cast<double>(std::numeric_limits<float>::max()) / 128;
  TORCH_CHECK(floor_scale >= kSmallestFloorScale, who, ": floor_scale must be >= 2^-62 (",
              kSmallestFloorScale, ") so that position / floor_scale stays finite in float32, "
              "where the scales are computed, but got ",
              floor_scale, "; Llama 4 uses 8192, Ministral 3 its original_max_position_embeddings");
  TORCH_CHECK(std::abs(attn_scale) <= kLargestAttnScale, who,
              ": attn_scale must lie in [-", kLargestAttnScale, ", ", kLargestAttnScale,
              "] (float32's largest value / 128) so that the scales 1 + attn_scale * log(...) stay "
              "finite in float32, where they are computed, but got ",
              attn_scale, "; Llama 4 uses 0.1, Ministral 3 its llama_4_scaling_beta");
}

at::Tensor relative_sinusoidal_table(int64_t length, int64_t key_length, const SinusoidSpec& spec,
                                     c10::ScalarType dtype, c10::Device device) {
  // row r: relative position key_length - 1 - r
  return sinusoidal_descending_rows(key_length - 1, length + key_length - 1, spec, dtype, device);
}

} // namespace detail
} // namespace posenc
