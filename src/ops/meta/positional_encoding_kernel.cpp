// Meta kernels: output metadata only, for fake tensors (torch.compile, torch.export) and shape
// propagation. They read no sizes, so symbolic shapes pass through; the checks that need sizes
// run in the real kernels.

#include "detail/checks.h"

#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace {

void check_meta_input(const char* who, const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 3, who, ": expected a 3-D input, but got a ", x.dim(), "-D tensor");
  TORCH_CHECK(
      detail::is_supported_float(x.scalar_type()),
      who, ": expected a floating-point input (float16, bfloat16, float32 or float64), but got ", x.scalar_type());
}

at::Tensor add_position_table_meta(const at::Tensor& x, const at::Tensor& table, int64_t /*offset*/, bool /*batch_first*/) {
  check_meta_input("posenc::add_position_table", x);
  TORCH_CHECK(table.dim() == 2 || table.dim() == 3, "posenc::add_position_table: expected the encoding table as [max_len, D] or [1, max_len, D], but got a ", table.dim(), "-D tensor");
  return at::empty_like(x);
}

at::Tensor add_position_table_backward_meta(const at::Tensor& grad, const at::Tensor& table, int64_t /*offset*/, bool /*batch_first*/) {
  check_meta_input("posenc::add_position_table_backward", grad);
  return at::empty_like(table, at::MemoryFormat::Contiguous);
}

at::Tensor add_positional_encoding_meta(const at::Tensor& x, int64_t offset, double /*base*/, bool /*batch_first*/) {
  check_meta_input("posenc::add_positional_encoding", x);
  TORCH_CHECK(offset >= 0, "posenc::add_positional_encoding: offset must be >= 0, but got ", offset);
  return at::empty_like(x);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("add_position_table", TORCH_FN(add_position_table_meta));
  m.impl("add_position_table_backward", TORCH_FN(add_position_table_backward_meta));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_meta));
}

} // namespace ops
} // namespace posenc
