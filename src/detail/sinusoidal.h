#pragma once

// The sinusoidal formula itself, in double precision: one implementation for tables, rows
// computed on the fly (explicit positions, extrapolation) and the rotary caches.

#include <posenc/enums.h>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <vector>

namespace posenc {
namespace detail {

/// Largest table posenc allocates, in elements: 2^28 (1 GiB in float32, e.g. 262144 positions of
/// width 1024; further positions can be extrapolated on the fly). Larger requests are
/// rejected before anything is allocated.
constexpr int64_t kMaxTableElements = int64_t{1} << 28;

/// Everything that defines a sinusoidal encoding besides the positions.
struct SinusoidSpec {
  int64_t d_model = 1;
  double base = 10000.0;
  ChannelLayout layout = ChannelLayout::kInterleaved;
  FrequencySpacing spacing = FrequencySpacing::kPaper;
};

/// What column c of the encoding holds: sin or cos of position * frequency[c], or zero.
struct ColumnPlan {
  enum Kind : uint8_t { kSin = 0, kCos = 1, kZero = 2 };
  std::vector<double> frequency;
  std::vector<Kind> kind;
};

/// The column plan of `spec` (frequencies computed in double precision).
ColumnPlan column_plan(const SinusoidSpec& spec);

/// Checks the arguments that define a sinusoidal table; `who` names the caller in the messages.
void check_table_arguments(const char* who, int64_t max_len, int64_t d_model, double base);

/// Checks a request for a table of positions `offset .. offset + max_len - 1` in `dtype`: the
/// table arguments, a floating dtype and an offset that is >= 0 and does not overflow.
void check_table_request(const char* who,
                         int64_t max_len,
                         int64_t d_model,
                         double base,
                         int64_t offset,
                         c10::ScalarType dtype);

/// Parses the `channels` / `frequencies` strings of the operator schemas.
ChannelLayout parse_channel_layout(const char* who, c10::string_view text);
FrequencySpacing parse_frequency_spacing(const char* who, c10::string_view text);
const char* to_string(ChannelLayout layout);
const char* to_string(FrequencySpacing spacing);

/// Writes the encodings of `positions[0 .. count)` into the row-major `[count, d_model]` array
/// `out`, computing in double precision and rounding once to `T` (float or double). A negative
/// position (padding) gets a row of zeros. Runs in parallel over rows; every element is computed
/// on its own, so the result is the same for any number of threads.
template <typename T>
void fill_sinusoidal_rows(const int64_t* positions,
                          int64_t count,
                          const SinusoidSpec& spec,
                          T* out);

/// The `[N, d_model]` rows for the int64 `positions` (any shape, flattened; -1 gives zeros) in
/// `dtype`, on the device of `positions`. Computed on the CPU (positions on another device are
/// copied there and the rows back).
at::Tensor sinusoidal_rows(const at::Tensor& positions,
                           const SinusoidSpec& spec,
                           c10::ScalarType dtype);

/// The `[max_len, d_model]` table of positions `offset ..` in `dtype` on `device`.
at::Tensor sinusoidal_table(int64_t max_len,
                            int64_t offset,
                            const SinusoidSpec& spec,
                            c10::ScalarType dtype,
                            c10::Device device);

} // namespace detail
} // namespace posenc
