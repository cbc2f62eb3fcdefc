#pragma once

// Checks of the Meta kernels: output metadata only, for fake tensors (torch.compile, torch.export)
// and shape propagation. They read no sizes, so symbolic shapes pass through; the checks that need
// sizes or values run in the real kernels.

#include "detail/checks.h"
#include "detail/sym_size.h"

#include <ATen/core/Tensor.h>
#include "ops/common/arguments.h"
#include "ops/common/sym_length.h"

#include <c10/util/Exception.h>

namespace posenc {
namespace ops {
namespace meta {

inline void check_input(const at::Tensor& x, int64_t dims) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(x.dim() == dims, who, ": expected a ", dims, "-D input, but got a ", x.dim(),
              "-D tensor");
  TORCH_CHECK(detail::is_supported_float(x.scalar_type()), who,
              ": expected a floating-point input (float16, bfloat16, float32 or float64), but got ",
              x.scalar_type());
}

/// Positions: an integer tensor on the input's device, or a floating-point one when the call has
/// the encoding's definition (`has_definition`; `definition` names the argument: columns,
/// inv_freq; the table-less form always has it). (Every argument of a call must be on one device: a meta tensor among CPU ones
/// selects this kernel, which must then raise, as torch.add does, rather than return memory nobody
/// wrote.)
inline void check_positions(OptionalTensor positions, const at::Tensor& x,
                            bool has_definition = false, const char* definition = "") {
  static constexpr detail::CallerName who{};
  if (positions.has_value() && positions->defined()) {
    detail::check_positions_device(*positions, x.device());
    TORCH_CHECK(at::isIntegralType(positions->scalar_type(), /*includeBool=*/false) ||
                    detail::is_continuous(*positions),
                who, ": positions must be an integer tensor (int64 or int32) or a floating-point "
                "one, but got ",
                positions->scalar_type());
    detail::check_continuous_allowed(*positions, has_definition, definition);
  }
}

inline bool has_value(OptionalTensor tensor) {
  return tensor.has_value() && tensor->defined();
}

/// A table `[max_len, D]` or `[1, max_len, D]` on the device of the input `x`.
inline void check_table(const at::Tensor& table, const at::Tensor& x) {
  static constexpr detail::CallerName who{};
  detail::check_input_device(x, table.device(), "the encoding table");
  TORCH_CHECK(table.dim() == 2 || table.dim() == 3, who,
              ": expected the encoding table as [max_len, D] or [1, max_len, D], but got a ",
              table.dim(), "-D tensor");
  // (the widths compared, not read: the real kernels' check, which a traced or exported program
  // must make too, or it would be refused only when it runs)
  const detail::SymSize width = detail::size_of(table, -1);
  TORCH_CHECK(x.dim() == 0 || detail::size_of(x, -1) == width, who,
              ": expected the last dimension of the input to be d_model = ", width, ", but got ",
              detail::size_of(x, -1), " (input shape ", detail::shape_of(x),
              "); build the module with d_model = ", detail::size_of(x, -1),
              " or project the input to ", width, " features");
}

/// The offset form's positions offset .. offset + L - 1: offset + L must fit in int64 and, where
/// the call cannot compute rows past its table (`extendable` false: no columns / inv_freq), lie
/// in its `rows` rows, as the real kernels check. Checked where L and the rows are concrete (fake
/// tensors of torch.compile and FakeTensorMode); a symbolic length is checked when the program
/// runs, so that torch.export keeps it symbolic.
inline void check_offset_rows(int64_t offset, const detail::SymSize& length,
                              const detail::SymSize& rows, bool extendable) {
  const c10::optional<int64_t> known = concrete(length);
  const c10::optional<int64_t> max_len = concrete(rows);
  if (!known || !max_len) {
    return;
  }
  detail::check_offset_start(offset, *known);
  if (!extendable && offset > *max_len - *known) {
    detail::check_offset(offset, *known, *max_len, detail::caller_hint());
  }
}

} // namespace meta
} // namespace ops
} // namespace posenc
