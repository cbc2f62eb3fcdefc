#pragma once

// Argument checks shared by the modules, the functional forms and the ops. Every message says what
// must hold, what was given and what to do; `who` names the public entry point that was called.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace posenc {
namespace detail {

/// Passed as `d_model` to check_sequence_input when any width is accepted.
constexpr int64_t kAnyWidth = -1;

/// True for the dtypes posenc computes in: float16, bfloat16, float32 and float64.
inline bool is_supported_float(c10::ScalarType dtype) {
  return dtype == c10::kHalf || dtype == c10::kBFloat16 || dtype == c10::kFloat ||
         dtype == c10::kDouble;
}

/// Checks a dropout probability.
void check_dropout(const char* who, double p);

/// Checks a floating dtype requested for a table or a `.to(dtype)` call.
void check_float_dtype(const char* who, const char* what, c10::ScalarType dtype);

/// Checks the input of a forward: defined, 3-D, one of the four float dtypes, last dimension
/// `d_model` (any width when `d_model` is kAnyWidth), on `device`.
void check_sequence_input(const char* who,
                          const at::Tensor& x,
                          int64_t d_model,
                          bool batch_first,
                          const c10::Device& device);

/// Checks that positions `offset .. offset + length - 1` lie in a table of `max_len` rows; `hint`
/// is appended to the message's advice.
void check_offset(
    const char* who, int64_t offset, int64_t length, int64_t max_len, const char* hint = "");

/// The shape of a position table given as `[max_len, D]` or `[1, max_len, D]`.
struct TableShape {
  int64_t max_len;
  int64_t width;
};

/// Checks a position table (defined, `[max_len, D]` or `[1, max_len, D]`, floating) and returns
/// its shape, without creating a view (this runs on every forward).
TableShape check_table(const char* who, const at::Tensor& table);

/// Returns the `[max_len, D]` view of a checked table.
at::Tensor table_rows(const char* who, const at::Tensor& table);

} // namespace detail
} // namespace posenc
