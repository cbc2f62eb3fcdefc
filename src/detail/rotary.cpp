#include "detail/rotary.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/rope_types.h"
#include "detail/sincos.h"
#include "detail/sinusoidal.h"

#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace posenc {
namespace detail {

void check_rotary_arguments(int64_t max_len, int64_t rotary_dim, double base) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, who,
              ": the rotated width must be even and >= 2, but got ", rotary_dim,
              "; rotary embeddings turn channels in pairs");
  TORCH_CHECK(
      rotary_dim / 2 <= kMaxTableElements, who,
      ": the rotated width (rotary_dim, or head_dim) must be <= 2^29 (posenc's limit of 2^28 "
      "frequency pairs), but got ",
      rotary_dim);
  TORCH_CHECK(max_len < 1 || max_len <= kMaxTableElements / (rotary_dim / 2), who,
              ": the cos/sin caches hold max_len * rotary_dim / 2 = ", max_len, " * ",
              rotary_dim / 2,
              " elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); lower "
              "max_len");
  check_table_arguments(max_len, rotary_dim / 2, base);
}

at::Tensor rope_long_inv_freq(const RopeSpec& spec) {
  if (rope_type_entry(spec.scaling.type()).switches != RopeSwitch::kLongFactors) {
    return at::Tensor();
  }
  return at::tensor(rope_frequencies(spec, *rope_switch_length(spec) + 1).inv_freq,
                    at::TensorOptions().dtype(at::kDouble));
}

at::Tensor rope_frequencies_at(const RopeSpec& spec, const at::Tensor& frequencies,
                               const at::Tensor& positions) {
  static constexpr detail::CallerName who{};
  const int64_t half = spec.rotary_dim / 2;
  // (two fixed sets, the long one past the switch: longrope; else one set, rescaled: dynamic)
  const bool longrope = rope_type_entry(spec.scaling.type()).switches == RopeSwitch::kLongFactors;
  TORCH_CHECK(frequencies.scalar_type() == at::kDouble &&
                  (longrope ? frequencies.dim() == 2 && frequencies.size(0) == 2
                            : frequencies.dim() == 1) &&
                  frequencies.size(-1) == half,
              who, ": frequencies must be float64 ", longrope ? "[2, R/2] = [2, " : "[R/2] = [",
              half, "] (", longrope ? "the short and the long ones" : "the variant's",
              "), but got ", frequencies.scalar_type(), " of shape ", frequencies.sizes());
  TORCH_CHECK(frequencies.device() == positions.device(), who,
              ": expected the frequencies on the device of the positions (", positions.device(),
              "), but they are on ", frequencies.device(), "; move them with .to(",
              positions.device(), ")");
  const c10::optional<int64_t> switch_length = rope_switch_length(spec);
  if (!switch_length || positions.numel() == 0) {
    return longrope ? frequencies[0] : frequencies;
  }
  // The call's end, a 0-dim float64 tensor on the device (padding, -1, never raises it).
  const at::Tensor end = at::isFloatingType(positions.scalar_type())
                             ? positions.to(at::kDouble).amax().floor() + 1.0
                             : positions.amax().to(at::kDouble) + 1.0;
  const double switch_at = static_cast<double>(*switch_length);
  if (longrope) {
    // short * (1 - past) + long * past with past in {0, 1}: exactly one of the two.
    const at::Tensor past = end.gt(switch_at).to(at::kDouble);
    return frequencies[0] * (1.0 - past) + frequencies[1] * past;
  }
  // Dynamic NTK: base' = base * s^(R / (R - 2)), so base'^(-2i / R) = base^(-2i / R) *
  // s^(-2i / (R - 2)); the exponents are made on the device (no copy from the host).
  const double factor = *spec.scaling.factor();
  const double dim = static_cast<double>(spec.rotary_dim);
  const at::Tensor s = end.clamp_min(switch_at) * factor / switch_at - (factor - 1.0);
  const at::Tensor exponents = at::arange(half, frequencies.options()) * (-2.0 / (dim - 2.0));
  return frequencies * at::pow(s, exponents);
}

namespace {
RopeSpec resolved_spec(int64_t rotary_dim, double base, const RopeScalingOptions& scaling,
                       const std::vector<double>& freq_factors, bool in_cos_sin, int64_t max_len) {
  RopeSpec spec{rotary_dim, base, scaling, freq_factors, in_cos_sin};
  if (!spec.scaling.max_position_embeddings()) {
    spec.scaling.max_position_embeddings(max_len);
  }
  if (!spec.scaling.original_max_position_embeddings()) {
    spec.scaling.original_max_position_embeddings(*spec.scaling.max_position_embeddings());
  }
  return spec;
}
} // namespace

RopeSpec rope_spec(const RotaryEmbeddingOptions& options) {
  return resolved_spec(options.rotated_width(), options.base(), options.scaling(),
                       options.freq_factors(), options.attention_factor_in_cos_sin(),
                       options.max_len());
}

RopeSpec rope_spec(int64_t rotary_dim, const functional::RotaryTablesFuncOptions& options,
                   int64_t max_len) {
  return resolved_spec(rotary_dim, options.base(), options.scaling(), options.freq_factors(),
                       options.attention_factor_in_cos_sin(), max_len);
}

// The spec of the table-less functional forms: max_position_embeddings must be given where the
// variant reads it.
RopeSpec rope_spec_without_table(int64_t rotary_dim,
                                 const functional::RotaryTablesFuncOptions& options) {
  static constexpr detail::CallerName who{};
  check_rotary_arguments(1, rotary_dim, options.base());
  // dynamic reads max_position_embeddings; the types that read the original length default it to
  // max_position_embeddings, and yarn/longrope their factor to max / original.
  const RopeScalingOptions& scaling = options.scaling();
  const RopeTypeEntry& entry = rope_type_entry(scaling.type());
  const bool reads_length = entry.switches == RopeSwitch::kNtkBase ||
                            (entry.reads_original && !scaling.original_max_position_embeddings()) ||
                            (entry.factor_from_lengths && !scaling.factor());
  TORCH_CHECK(!reads_length || scaling.max_position_embeddings(), who, ": rope type '",
              scaling.type(),
              "' reads the model's context length; set scaling.max_position_embeddings (and "
              "original_max_position_embeddings)");
  return rope_spec(rotary_dim, options, scaling.max_position_embeddings().value_or(1));
}

namespace {
// Writes the cos/sin rows of `count` positions: `position(r)` is row r's position (as a double), or
// nullopt for padding (cos 1, sin 0: no rotation).
template <typename T, typename Position>
void fill_rotary_rows(int64_t count, const RopeFrequencies& frequencies, T* cos_out, T* sin_out,
                      const Position& position) {
  const std::vector<double>& frequency = frequencies.inv_freq;
  const int64_t half = static_cast<int64_t>(frequency.size());
  const double factor = frequencies.attention_factor;
  if (half == 0 || count == 0) {
    return;
  }
  at::parallel_for(0, count, std::max<int64_t>(1, 2048 / half), [&](int64_t begin, int64_t end) {
    std::vector<double> buffer(static_cast<size_t>(3 * half));
    double* angles = buffer.data();
    double* sines = angles + half;
    double* cosines = sines + half;
    for (int64_t r = begin; r < end; ++r) {
      const c10::optional<double> at = position(r);
      if (!at.has_value()) {
        std::fill(cos_out + r * half, cos_out + (r + 1) * half, T(1));
        std::fill(sin_out + r * half, sin_out + (r + 1) * half, T(0));
        continue;
      }
      if (std::is_same<T, float>::value && factor == 1.0) { // in one pass, straight into the rows
        sincos_scaled(*at, frequency.data(), reinterpret_cast<float*>(sin_out + r * half),
                      reinterpret_cast<float*>(cos_out + r * half), half);
        continue;
      }
      for (int64_t i = 0; i < half; ++i) {
        angles[i] = *at * frequency[static_cast<size_t>(i)];
      }
      sincos(angles, sines, cosines, half); // both from one range reduction, vectorized
      for (int64_t i = 0; i < half; ++i) {
        cos_out[r * half + i] = static_cast<T>(factor * cosines[i]);
        sin_out[r * half + i] = static_cast<T>(factor * sines[i]);
      }
    }
  });
}

template <typename Position>
std::pair<at::Tensor, at::Tensor> rotary_rows_in(int64_t count, const RopeFrequencies& frequencies,
                                                 c10::ScalarType dtype, const Position& position) {
  const int64_t half = static_cast<int64_t>(frequencies.inv_freq.size());
  const bool direct = dtype == at::kFloat || dtype == at::kDouble;
  const auto options = at::TensorOptions().dtype(direct ? dtype : at::kDouble);
  at::Tensor cos = at::empty({count, half}, options);
  at::Tensor sin = at::empty({count, half}, options);
  if (cos.scalar_type() == at::kFloat) {
    fill_rotary_rows(count, frequencies, cos.data_ptr<float>(), sin.data_ptr<float>(), position);
  } else {
    fill_rotary_rows(count, frequencies, cos.data_ptr<double>(), sin.data_ptr<double>(), position);
  }
  return {cos.to(dtype), sin.to(dtype)};
}
} // namespace

std::pair<at::Tensor, at::Tensor> rotary_rows_from(const at::Tensor& positions,
                                                   const at::Tensor& inv_freq,
                                                   double attention_factor, c10::ScalarType dtype) {
  const at::Tensor flat = positions.reshape({-1});
  const at::Tensor angles = flat.to(at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);
  at::Tensor cos = angles.cos().mul(attention_factor);
  at::Tensor sin = angles.sin().mul(attention_factor);
  if (!at::isFloatingType(positions.scalar_type())) {
    const at::Tensor padding = flat.lt(0).unsqueeze(1);
    cos = cos.masked_fill(padding, 1.0);
    sin = sin.masked_fill(padding, 0.0);
  }
  return {cos.to(dtype), sin.to(dtype)};
}

std::pair<at::Tensor, at::Tensor> rotary_rows_range(int64_t first, int64_t count,
                                                    const RopeFrequencies& frequencies,
                                                    c10::ScalarType dtype) {
  return rotary_rows_in(count, frequencies, dtype, [first](int64_t r) -> c10::optional<double> {
    return static_cast<double>(first + r);
  });
}

std::pair<at::Tensor, at::Tensor> rotary_rows(const at::Tensor& positions,
                                              const RopeFrequencies& frequencies,
                                              c10::ScalarType dtype) {
  if (!positions.device().is_cpu()) {
    return rotary_rows_from(
        positions,
        upload(at::tensor(frequencies.inv_freq, at::TensorOptions().dtype(at::kDouble)),
               positions.device()),
        frequencies.attention_factor, dtype);
  }
  std::pair<at::Tensor, at::Tensor> rows;
  if (at::isFloatingType(positions.scalar_type())) {
    const at::Tensor cpu_positions = positions.to(at::kCPU, at::kDouble).contiguous();
    const double* values = cpu_positions.data_ptr<double>();
    rows = rotary_rows_in(cpu_positions.numel(), frequencies, dtype,
                          [values](int64_t r) -> c10::optional<double> { return values[r]; });
  } else {
    const at::Tensor cpu_positions = positions.to(at::kCPU, at::kLong).contiguous();
    const int64_t* values = cpu_positions.data_ptr<int64_t>();
    rows = rotary_rows_in(
        cpu_positions.numel(), frequencies, dtype, [values](int64_t r) -> c10::optional<double> {
          return values[r] < 0 ? c10::nullopt
                               : c10::optional<double>(static_cast<double>(values[r]));
        });
  }
  return {rows.first.to(positions.device()), rows.second.to(positions.device())};
}

std::vector<int64_t> mrope_axes(const std::vector<int64_t>& section, bool interleaved,
                                int64_t half) {
  static constexpr detail::CallerName who{};
  // (each within [0, half] before they are summed: a sum of huge sizes would wrap around)
  // Contiguous blocks must cover the frequencies exactly. Interleaved sections (Qwen3-VL's
  // recomposition) pick height for i % 3 == 1, i < 3 * section[1], and width for i % 3 == 2,
  // i < 3 * section[2], among the rotary_dim / 2 frequencies, whatever their sum, as transformers
  // has it (Qwen4-Exp's [11, 11, 10] of 128; Qwen3-Omni's talker's [24, 20, 20] of 32).
  const auto in_range = [&](int64_t size) { return size >= 0 && size <= half; };
  const bool sizes_in_range =
      section.size() == 3 && in_range(section[0]) && in_range(section[1]) && in_range(section[2]);
  const bool sizes_valid =
      sizes_in_range && (interleaved || section[0] + section[1] + section[2] == half);
  TORCH_CHECK(sizes_valid, who,
              ": mrope_section must hold three non-negative numbers of frequencies (temporal, "
              "height, width) that ",
              interleaved ? "are each at most" : "sum to", " rotary_dim / 2 = ", half, ", but got ",
              c10::IntArrayRef(section),
              "; Qwen2-VL uses [16, 24, 24] and Qwen3-VL [24, 20, 20] for 128-wide heads");
  std::vector<int64_t> axes(static_cast<size_t>(half), 0);
  for (int64_t i = 0; i < half; ++i) {
    int64_t axis = 0;
    if (interleaved) {
      const int64_t a = i % 3;
      axis = a != 0 && i < 3 * section[static_cast<size_t>(a)] ? a : 0;
    } else {
      axis = i < section[0] ? 0 : i < section[0] + section[1] ? 1 : 2;
    }
    axes[static_cast<size_t>(i)] = axis;
  }
  return axes;
}

std::vector<int64_t> mrope_hw_alternating_axes(const std::vector<int64_t>& section,
                                               int64_t half) {
  // (the sizes' checks: contiguous blocks')
  mrope_axes(section, /*interleaved=*/false, half);
  TORCH_CHECK(section[1] == section[2], detail::caller(),
              ": mrope_hw_alternating alternates the height and width frequencies, so "
              "mrope_section's height and width sizes must be equal, but got ",
              c10::IntArrayRef(section), "; ERNIE 4.5-VL's [22, 22, 20] (height, width, time) is "
              "{20, 22, 22} here (time, height, width)");
  std::vector<int64_t> axes(static_cast<size_t>(half), 0);
  for (int64_t i = 0; i < section[1] + section[2]; ++i) {
    axes[static_cast<size_t>(i)] = i % 2 == 0 ? 1 : 2;
  }
  return axes;
}

void check_rotary_input(const at::Tensor& x, int64_t rotary_dim, bool heads_first,
                        const c10::Device& device) {
  static constexpr detail::CallerName who{};
  const char* layout =
      heads_first ? "[B, H, L, Dh] (heads_first=true)" : "[B, L, H, Dh] (heads_first=false)";
  TORCH_CHECK(x.defined(), who, ": expected a query or key tensor of shape ", layout,
              ", but got an undefined tensor");
  TORCH_CHECK(x.dim() == 4, who, ": expected a 4-D query or key tensor of shape ", layout,
              ", but got a ", x.dim(), "-D tensor of shape ", x.sizes(),
              "; split the heads first, e.g. q.view({B, L, H, Dh})");
  TORCH_CHECK(is_supported_float(x.scalar_type()), who,
              ": expected a floating-point input (float16, bfloat16, float32 or float64), but got ",
              x.scalar_type());
  TORCH_CHECK(x.size(3) >= rotary_dim, who, ": the head dimension Dh = ", x.size(3),
              " is smaller than the rotated width ", rotary_dim, " (input shape ", x.sizes(),
              "); build the module with head_dim = ", x.size(3));
  check_input_device(x, device, "the cos/sin caches");
}

at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  bool interleaved, bool inverse) {
  const int64_t half = cos.size(-1);
  const int64_t rotated = 2 * half;
  const at::Tensor part = x.narrow(-1, 0, rotated);
  at::Tensor a;
  at::Tensor b;
  if (interleaved) {
    std::vector<int64_t> sizes = part.sizes().vec();
    sizes.back() = half;
    sizes.push_back(2);
    const at::Tensor pairs = part.reshape(sizes);
    a = pairs.select(-1, 0);
    b = pairs.select(-1, 1);
  } else {
    a = part.narrow(-1, 0, half);
    b = part.narrow(-1, half, half);
  }
  // (a, b) -> (a cos - b sin, a sin + b cos); the inverse turns by -angle. Type promotion with the
  // float32 (or float64) caches forms everything in at least float32.
  const at::Tensor s = inverse ? sin.neg() : sin;
  const at::Tensor new_a = a.mul(cos).sub(b.mul(s));
  const at::Tensor new_b = a.mul(s).add(b.mul(cos));
  at::Tensor out =
      interleaved ? at::stack({new_a, new_b}, -1).flatten(-2) : at::cat({new_a, new_b}, -1);
  if (rotated < x.size(-1)) {
    out = at::cat({out, x.narrow(-1, rotated, x.size(-1) - rotated).to(out.scalar_type())}, -1);
  }
  return out.to(x.scalar_type());
}

at::Tensor rotary_broadcast(const at::Tensor& rows, int64_t batch, int64_t length,
                            bool heads_first) {
  const int64_t half = rows.size(-1);
  return heads_first ? rows.view({batch, 1, length, half}) : rows.view({batch, length, 1, half});
}

} // namespace detail
} // namespace posenc
