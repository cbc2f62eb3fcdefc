// The schemas of posenc's operators, and C++ entry points that call them through the dispatcher.
// Kernels are registered per dispatch key in composite/, autograd/ and meta/.

#include <posenc/ops.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace posenc {

TORCH_LIBRARY(posenc, m) {
  m.def(
      "sinusoidal_table(int max_len, int d_model, float base=10000.0, int offset=0, "
      "ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("add_positional_encoding(Tensor x, int offset=0, float base=10000.0, bool batch_first=True) -> Tensor");
  m.def("add_position_table(Tensor x, Tensor table, int offset=0, bool batch_first=True) -> Tensor");
  m.def("add_position_table_backward(Tensor grad, Tensor table, int offset, bool batch_first) -> Tensor");
}

namespace detail {
int64_t registered_op_count() {
  return 4;
}
} // namespace detail

namespace ops {

namespace {
c10::OperatorHandle find(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}
} // namespace

at::Tensor sinusoidal_table(
    int64_t max_len,
    int64_t d_model,
    double base,
    int64_t offset,
    c10::optional<at::ScalarType> dtype,
    c10::optional<at::Device> device) {
  static const auto op = find("posenc::sinusoidal_table")
                             .typed<at::Tensor(int64_t, int64_t, double, int64_t, c10::optional<at::ScalarType>, c10::optional<at::Device>)>();
  return op.call(max_len, d_model, base, offset, dtype, device);
}

at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset, double base, bool batch_first) {
  static const auto op = find("posenc::add_positional_encoding").typed<at::Tensor(const at::Tensor&, int64_t, double, bool)>();
  return op.call(x, offset, base, batch_first);
}

at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset, bool batch_first) {
  static const auto op = find("posenc::add_position_table").typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool)>();
  return op.call(x, table, offset, batch_first);
}

at::Tensor add_position_table_backward(const at::Tensor& grad, const at::Tensor& table, int64_t offset, bool batch_first) {
  static const auto op = find("posenc::add_position_table_backward").typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool)>();
  return op.call(grad, table, offset, batch_first);
}

} // namespace ops
} // namespace posenc
