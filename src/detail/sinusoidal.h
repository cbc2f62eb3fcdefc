#pragma once

// The sinusoidal formula itself, in double precision.

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace posenc {
namespace detail {

/// Largest table posenc allocates, in elements: 2^31 (8 GiB in float32). Larger requests are
/// rejected before anything is allocated.
constexpr int64_t kMaxTableElements = int64_t{1} << 31;

/// Checks the arguments that define a sinusoidal table; `who` names the caller in the messages.
void check_table_arguments(const char* who, int64_t max_len, int64_t d_model, double base);

/// Checks a request for a table of positions `offset .. offset + max_len - 1` in `dtype`: the
/// table arguments, a floating dtype and an offset that is >= 0 and does not overflow.
void check_table_request(const char* who, int64_t max_len, int64_t d_model, double base, int64_t offset, c10::ScalarType dtype);

/// Writes the sinusoidal encodings of `positions[0 .. count)` into the row-major `[count, d_model]`
/// array `out`, computing in double precision and rounding once to `T` (float or double).
/// Runs in parallel over rows; every element is computed on its own, so the result is the same for
/// any number of threads.
template <typename T>
void fill_sinusoidal_rows(const int64_t* positions, int64_t count, int64_t d_model, double base, T* out);

} // namespace detail
} // namespace posenc
