#include "detail/rotary.h"

#include "detail/checks.h"
#include "detail/sinusoidal.h"

#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace posenc {
namespace detail {

void check_rotary_arguments(const char* who, int64_t max_len, int64_t rotary_dim, double base) {
  TORCH_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, who,
              ": the rotated width must be even and >= 2, but got ", rotary_dim,
              "; rotary embeddings turn channels in pairs");
  check_table_arguments(who, max_len, rotary_dim / 2, base);
}

RopeFrequencies rope_frequencies(const RopeSpec& spec) {
  const int64_t half = spec.rotary_dim / 2;
  RopeFrequencies result;
  result.inv_freq.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    result.inv_freq[static_cast<size_t>(i)] =
        std::pow(spec.base, -static_cast<double>(2 * i) / static_cast<double>(spec.rotary_dim));
  }
  return result;
}

RopeSpec rope_spec(const RotaryEmbeddingOptions& options) {
  return {options.rotated_width(), options.base()};
}

namespace {
template <typename T>
void fill_rotary_rows(const int64_t* positions, int64_t count, const RopeFrequencies& frequencies,
                      T* cos_out, T* sin_out) {
  const std::vector<double>& frequency = frequencies.inv_freq;
  const int64_t half = static_cast<int64_t>(frequency.size());
  const double factor = frequencies.attention_factor;
  if (half == 0 || count == 0) {
    return;
  }
  at::parallel_for(0, count, std::max<int64_t>(1, 2048 / half), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        if (positions[r] < 0) { // padding: no rotation
          cos_out[r * half + i] = T(1);
          sin_out[r * half + i] = T(0);
          continue;
        }
        const double angle = static_cast<double>(positions[r]) * frequency[static_cast<size_t>(i)];
        cos_out[r * half + i] = static_cast<T>(factor * std::cos(angle));
        sin_out[r * half + i] = static_cast<T>(factor * std::sin(angle));
      }
    }
  });
}
} // namespace

std::pair<at::Tensor, at::Tensor> rotary_rows(const at::Tensor& positions,
                                              const RopeFrequencies& frequencies,
                                              c10::ScalarType dtype) {
  const at::Tensor cpu_positions = positions.to(at::kCPU, at::kLong).contiguous();
  const int64_t count = cpu_positions.numel();
  const int64_t half = static_cast<int64_t>(frequencies.inv_freq.size());
  const bool direct = dtype == at::kFloat || dtype == at::kDouble;
  const auto options = at::TensorOptions().dtype(direct ? dtype : at::kDouble);
  at::Tensor cos = at::empty({count, half}, options);
  at::Tensor sin = at::empty({count, half}, options);
  if (cos.scalar_type() == at::kFloat) {
    fill_rotary_rows(cpu_positions.data_ptr<int64_t>(), count, frequencies, cos.data_ptr<float>(),
                     sin.data_ptr<float>());
  } else {
    fill_rotary_rows(cpu_positions.data_ptr<int64_t>(), count, frequencies, cos.data_ptr<double>(),
                     sin.data_ptr<double>());
  }
  return {cos.to(positions.device(), dtype), sin.to(positions.device(), dtype)};
}

void check_rotary_input(const char* who, const at::Tensor& x, int64_t rotary_dim, bool heads_first,
                        const c10::Device& device) {
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
  check_input_device(who, x, device, "the cos/sin caches");
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
