#pragma once

// Argument checks shared by the ops, the functional forms and the modules. Every message says what
// must hold, what was given and what to do, after the name of the public entry point that was
// called (caller(): the innermost CallerScope's).

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <utility>
#include <vector>

namespace posenc {
namespace detail {

/// Passed as `d_model` to check_sequence_input when any width is accepted.
constexpr int64_t kAnyWidth = -1;

/// Largest table posenc allocates, in elements: 2^28 (1 GiB in float32, e.g. 262144 positions of
/// width 1024; further positions can be extrapolated on the fly). Larger requests are rejected
/// before anything is allocated.
constexpr int64_t kMaxTableElements = int64_t{1} << 28;

/// True for the dtypes posenc computes in: float16, bfloat16, float32 and float64.
inline bool is_supported_float(c10::ScalarType dtype) {
  return dtype == c10::kHalf || dtype == c10::kBFloat16 || dtype == c10::kFloat ||
         dtype == c10::kDouble;
}

/// Names the public entry point (a module, a functional form, an operator, a reader) that a call
/// came through, and the advice it adds to a position past its table: the one way posenc's
/// messages name their caller. Every entry point opens one, on the calling thread; the checks
/// below it read the name with caller(), across the dispatcher too (a module's name reaches the
/// kernels of the operators it calls):
///
///   detail::CallerScope caller("PositionalEncoding", " or pass beyond_max_len(...)");
///   return ops::add_position_table(...);   // errors read "PositionalEncoding: ..."
class CallerScope {
 public:
  /// Names the entry point for the calls made while the scope lives.
  explicit CallerScope(const char* name, const char* hint = "");
  /// Names `name` only when no outer scope named one (an operator called by a module keeps the
  /// module's name).
  struct KeepOuter {};
  CallerScope(KeepOuter, const char* name);
  /// Names `name` whatever an outer scope named, keeping its advice (a step that names itself,
  /// such as an operator's backward).
  struct Rename {};
  CallerScope(Rename, const char* name);
  ~CallerScope();
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;

  /// The current entry point's name (null outside any scope) and advice.
  struct Caller {
    const char* name = nullptr;
    const char* hint = "";
  };
  static Caller& current();

 private:
  Caller& slot_;
  Caller previous_;
};

/// A module's advice on positions past max_len when it does not extrapolate (appended to the
/// messages through its CallerScope), spelt for C++ or for posenc.nn (`python`).
const char* extrapolate_hint(bool python);

/// The name of the innermost CallerScope: the entry point the current call came through, which
/// every message of a check starts with.
inline const char* caller() {
  const char* name = CallerScope::current().name;
  TORCH_INTERNAL_ASSERT(name != nullptr, "posenc: a check ran outside any CallerScope");
  return name;
}

/// caller(), read only where it is printed. A check names its caller as
///
///   static constexpr detail::CallerName who{};
///   TORCH_CHECK(holds, who, ": ...");
///
/// and TORCH_CHECK evaluates its message only when the check fails, so a check that holds never
/// reads the thread-local scope (a decode step runs dozens of checks). Anywhere else it converts
/// to caller()'s name.
struct CallerName {
  // NOLINTNEXTLINE(google-explicit-constructor): stands for the name wherever one is expected
  operator const char*() const {
    return caller();
  }
};
inline std::ostream& operator<<(std::ostream& out, CallerName) {
  return out << caller();
}

/// The name of the current CallerScope, or `op_name` outside one.
inline const char* caller_or(const char* op_name) {
  const char* name = CallerScope::current().name;
  return name != nullptr ? name : op_name;
}

/// The advice of the current CallerScope ("" outside one).
inline const char* caller_hint() {
  return CallerScope::current().hint;
}

/// "[B, L] (batch_first=true)" or "[L, B] (batch_first=false)".
const char* sequence_layout(bool batch_first);

/// Checks a dropout probability.
void check_dropout(double p);

/// Checks that a scale is finite.
void check_scale(double scale);

/// Checks a scale for inputs of `dtype`: finite and, since inputs narrower than float64 are
/// computed in float32, within float32's range for them (a larger scale would round to infinity
/// and turn zeros into NaN).
void check_scale(double scale, c10::ScalarType dtype);

/// Largest frequency posenc accepts (about 1.95e289): any int64 position times it stays a finite
/// float64 angle, so every angle posenc forms is a number.
constexpr double kMaxFrequency = 1.7976931348623157e308 / 9223372036854775808.0;

/// Checks that `tensor`, an argument named `what` of a call on `device` ("columns", "inv_freq",
/// "out"), lies on that device: every tensor argument of one call must, as for ATen's operators.
void check_argument_device(const at::Tensor& tensor, const char* what, const c10::Device& device);

/// Checks a floating dtype requested for a table or a `.to(dtype)` call.
void check_float_dtype(const char* what, c10::ScalarType dtype);

/// The number of elements of a tensor of `sizes` (each >= 0), checked so that neither it nor its
/// bytes (at up to 8 per element) overflow int64: a c10::Error that names `what` (the sizes, e.g.
/// "heads * query_length * key_length") and their values otherwise. What no tensor can hold is
/// refused here; what memory cannot hold is left to the allocator's message.
int64_t checked_numel(const char* what, std::initializer_list<int64_t> sizes);

/// Checks that `rows` rows of `width` stay within kMaxTableElements; `what` names the table
/// ("a table of max_len * d_model") and `lower` the option to lower.
void check_table_size(const char* what, int64_t rows, int64_t width, const char* lower);

/// Checks the input of a forward: defined, 3-D, one of the four float dtypes, last dimension
/// `d_model` (any width when `d_model` is kAnyWidth), on `device`.
void check_sequence_input(const at::Tensor& x, int64_t d_model, bool batch_first,
                          const c10::Device& device);

/// Checks that the input `x` lies on `device`, the device of `table_name` ("the encoding table",
/// "the cos/sin caches").
void check_input_device(const at::Tensor& x, const c10::Device& device, const char* table_name);

/// Checks that explicit positions lie on the input's `device`.
void check_positions_device(const at::Tensor& positions, const c10::Device& device);

/// Checks that an explicit-positions call passes no offset.
void check_no_offset_with_positions(int64_t offset);

/// Checks that `offset >= 0` and that `offset + length` fits in int64.
void check_offset_start(int64_t offset, int64_t length);

/// Checks that positions `offset .. offset + length - 1` lie in a table of `max_len` rows; `hint`
/// is appended to the message's advice.
void check_offset(int64_t offset, int64_t length, int64_t max_len, const char* hint = "");

/// The shape of a position table given as `[max_len, D]` or `[1, max_len, D]`.
struct TableShape {
  int64_t max_len;
  int64_t width;
};

/// Checks a position table (defined, `[max_len, D]` or `[1, max_len, D]`, floating) and returns
/// its shape, without creating a view (this runs on every forward).
TableShape check_table(const at::Tensor& table);

/// The `[max_len, D]` view of a checked table.
at::Tensor table_rows(const at::Tensor& table);

/// Checks the form of explicit positions (no values read): an integer tensor (or, with
/// `continuous`, a floating-point one) of shape `[L]` (shared by the batch) or `per_sequence`
/// (described by `per_sequence_name`, e.g. "[B, L]"), on `device`.
void check_positions_form(const at::Tensor& positions, int64_t length, at::IntArrayRef per_sequence,
                          const char* per_sequence_name, const c10::Device& device,
                          bool continuous = false);

/// True for floating-point (continuous) positions: position interpolation, diffusion timesteps.
/// Their rows are always computed from the encoding's definition in float64, never read from or
/// interpolated in a table.
bool is_continuous(const at::Tensor& positions);

/// Checks that a call with floating-point `positions` has the encoding's definition to compute
/// them from (`has_definition`; `definition` names the argument, e.g. "columns").
void check_continuous_allowed(const at::Tensor& positions, bool has_definition,
                              const char* definition);

/// Checks floating-point positions read to the host as float64: each finite and in [0, 2^63)
/// (the range of integer positions, so that every angle is finite).
void check_continuous_range(const at::Tensor& host);

/// Checks the range of explicit positions: smallest >= -1 (-1 = padding) and, when `limit >= 0`,
/// largest < limit; `hint` is appended to the advice.
void check_positions_range(int64_t smallest, int64_t largest, int64_t limit, const char* hint = "");

/// What `host_read` brings to the host.
struct HostValues {
  /// The smallest and largest value of each tensor of `ranged` ({0, -1} for an empty one).
  std::vector<std::pair<int64_t, int64_t>> ranges;
  /// `whole` as a contiguous int64 CPU tensor of its shape (undefined if `whole` was).
  at::Tensor whole;
};

/// Reads the extremes of the integer tensors `ranged` and, if defined, all of `whole` with one
/// device-to-host copy: the only host synchronisation posenc makes per call. Recorded as
/// "posenc::host_read" for the profiler (tests count it).
HostValues host_read(std::initializer_list<at::Tensor> ranged, const at::Tensor& whole = {});

} // namespace detail
} // namespace posenc
