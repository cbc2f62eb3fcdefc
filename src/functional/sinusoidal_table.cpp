#include <posenc/functional/positional_encoding.h>

#include "detail/checks.h"
#include "detail/sinusoidal.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace posenc {
namespace detail {

void check_table_arguments(const char* who, int64_t max_len, int64_t d_model, double base) {
  TORCH_CHECK(
      d_model >= 1,
      who, ": d_model must be >= 1, but got ", d_model,
      "; pass the width of the embeddings the encoding is added to");
  TORCH_CHECK(
      max_len >= 1,
      who, ": max_len must be >= 1, but got ", max_len,
      "; pass the number of positions the table must hold");
  TORCH_CHECK(
      std::isfinite(base) && base > 0.0,
      who, ": base must be finite and > 0, but got ", base, "; the paper uses 10000");
  TORCH_CHECK(
      max_len <= kMaxTableElements / d_model,
      who, ": a table of max_len * d_model = ", max_len, " * ", d_model,
      " elements is over posenc's limit of 2^31 elements (8 GiB in float32); lower max_len");
}

void check_table_request(const char* who, int64_t max_len, int64_t d_model, double base, int64_t offset, c10::ScalarType dtype) {
  check_table_arguments(who, max_len, d_model, base);
  check_float_dtype(who, "dtype", dtype);
  TORCH_CHECK(offset >= 0, who, ": offset must be >= 0, but got ", offset, "; positions start at 0");
  TORCH_CHECK(
      offset <= std::numeric_limits<int64_t>::max() - max_len,
      who, ": offset + max_len must fit in int64, but got offset = ", offset, " and max_len = ", max_len);
}

template <typename T>
void fill_sinusoidal_rows(
    const int64_t* positions,
    int64_t count,
    int64_t d_model,
    double base,
    T* out) {
  // Column c pairs with frequency index c / 2: even columns are sines, odd columns cosines, and the
  // angular frequency of pair i is base^(-2i / d_model), computed once in double precision.
  std::vector<double> frequency(static_cast<size_t>(d_model));
  for (int64_t c = 0; c < d_model; ++c) {
    const double exponent = static_cast<double>(c - c % 2) / static_cast<double>(d_model);
    frequency[static_cast<size_t>(c)] = std::pow(base, -exponent);
  }
  // Each element costs a double-precision sin or cos (~20 ns), so a few thousand elements are
  // worth a task. Every element is computed independently, so the result does not depend on how
  // the rows are split between threads.
  const int64_t grain = std::max<int64_t>(1, 4096 / d_model);
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const double position = static_cast<double>(positions[r]);
      T* row = out + r * d_model;
      for (int64_t c = 0; c < d_model; ++c) {
        const double angle = position * frequency[static_cast<size_t>(c)];
        row[c] = static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
  });
}

template void fill_sinusoidal_rows<float>(const int64_t*, int64_t, int64_t, double, float*);
template void fill_sinusoidal_rows<double>(const int64_t*, int64_t, int64_t, double, double*);

} // namespace detail

namespace functional {
namespace detail {

at::Tensor sinusoidal_table(
    int64_t max_len,
    int64_t d_model,
    double base,
    int64_t offset,
    at::ScalarType dtype,
    at::Device device) {
  posenc::detail::check_table_request("sinusoidal_table", max_len, d_model, base, offset, dtype);

  std::vector<int64_t> positions(static_cast<size_t>(max_len));
  for (int64_t r = 0; r < max_len; ++r) {
    positions[static_cast<size_t>(r)] = offset + r;
  }
  // float32 and float64 are written directly; float16 and bfloat16 are rounded from float64 (never
  // through float32, which would round twice).
  const bool direct = dtype == at::kFloat || dtype == at::kDouble;
  at::Tensor table = at::empty({max_len, d_model}, at::TensorOptions().dtype(direct ? dtype : at::kDouble));
  if (table.scalar_type() == at::kFloat) {
    posenc::detail::fill_sinusoidal_rows(positions.data(), max_len, d_model, base, table.data_ptr<float>());
  } else {
    posenc::detail::fill_sinusoidal_rows(positions.data(), max_len, d_model, base, table.data_ptr<double>());
  }
  return table.to(device, dtype);
}

} // namespace detail
} // namespace functional
} // namespace posenc
