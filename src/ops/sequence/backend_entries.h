#pragma once

// add_position_table's operator kernels for a backend with hand-written loops (CPU, CUDA), written
// once: the backend supplies its loop and its allocation (ops/common/backend_entries.h).

#include "detail/checks.h"
#include "ops/common/backend_entries.h"
#include "ops/sequence/arguments.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>

namespace posenc {
namespace ops {

/// out = x * scale + table[positions] for a checked call; x and out contiguous, out may be x.
using AddLoop = void (*)(const at::Tensor& x, at::Tensor& out, const TableCall& call);

template <AddLoop loop, EmptyFn empty>
at::Tensor add_position_table_kernel(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                                     bool batch_first, OptionalTensor positions, double scale,
                                     OptionalTensor columns) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::add_position_table");
  const TableCall call =
      prepare_table_call(x, table, offset, positions, batch_first, scale, columns);
  at::Tensor out = empty(x.sizes(), x.options());
  loop(x.contiguous(), out, call);
  return out;
}

template <AddLoop loop, EmptyFn empty>
void add_position_table_inplace_kernel(at::Tensor& x, const at::Tensor& table, int64_t offset,
                                       bool batch_first, OptionalTensor positions, double scale,
                                       OptionalTensor columns) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::add_position_table_");
  const TableCall call =
      prepare_table_call(x, table, offset, positions, batch_first, scale, columns);
  check_no_overlap(x, "x", {{"the table", table}, {"positions", positions}, {"columns", columns}});
  if (x.is_contiguous()) { // (a contiguous tensor cannot overlap itself)
    loop(x, x, call);
    return;
  }
  at::assert_no_internal_overlap(x);
  at::Tensor work = x.contiguous();
  loop(work, work, call);
  x.copy_(work);
}

template <AddLoop loop, EmptyFn empty>
void add_position_table_out_kernel(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                                   bool batch_first, OptionalTensor positions, double scale,
                                   OptionalTensor columns, at::Tensor& out) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::add_position_table_out");
  const TableCall call =
      prepare_table_call(x, table, offset, positions, batch_first, scale, columns);
  prepare_out(out, x);
  check_no_overlap(out, "out",
                   {{"the table", table}, {"positions", positions}, {"columns", columns}});
  if (out.is_contiguous()) {
    loop(x.contiguous(), out, call);
    return;
  }
  at::Tensor result = empty(x.sizes(), x.options());
  loop(x.contiguous(), result, call);
  out.copy_(result);
}

} // namespace ops
} // namespace posenc
