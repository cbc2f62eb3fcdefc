// The schemas of posenc's operators, and C++ entry points that call them through the dispatcher.
// Kernels are registered per dispatch key in composite/, autograd/ and meta/.

#include <posenc/ops.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace posenc {

TORCH_LIBRARY(posenc, m) {
  m.def(
      "sinusoidal_table(int max_len, int d_model, float base=10000.0, int offset=0, "
      "str channels=\"interleaved\", str frequencies=\"paper\", ScalarType? dtype=None, "
      "Device? device=None) -> Tensor");
  m.def(
      "add_position_table(Tensor x, Tensor table, int offset=0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0) -> Tensor");
  m.def(
      "add_position_table_backward(Tensor grad, Tensor table, int offset, bool batch_first, "
      "Tensor? positions=None) -> Tensor");
  m.def(
      "add_positional_encoding(Tensor x, int offset=0, float base=10000.0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0, str channels=\"interleaved\", "
      "str frequencies=\"paper\") -> Tensor");
  m.def(
      "apply_rotary(Tensor x, Tensor cos, Tensor sin, int offset=0, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool inverse=False) -> Tensor");
}

namespace detail {
int64_t registered_op_count() {
  return 5;
}
} // namespace detail

namespace ops {

namespace {
c10::OperatorHandle find(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}
using OptionalTensor = const c10::optional<at::Tensor>&;
} // namespace

at::Tensor sinusoidal_table(
    int64_t max_len,
    int64_t d_model,
    double base,
    int64_t offset,
    c10::string_view channels,
    c10::string_view frequencies,
    c10::optional<at::ScalarType> dtype,
    c10::optional<at::Device> device) {
  static const auto op = find("posenc::sinusoidal_table")
                             .typed<at::Tensor(int64_t, int64_t, double, int64_t, c10::string_view, c10::string_view,
                                               c10::optional<at::ScalarType>, c10::optional<at::Device>)>();
  return op.call(max_len, d_model, base, offset, channels, frequencies, dtype, device);
}

at::Tensor add_position_table(
    const at::Tensor& x,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions,
    double scale) {
  static const auto op = find("posenc::add_position_table")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor, double)>();
  return op.call(x, table, offset, batch_first, positions, scale);
}

at::Tensor add_position_table_backward(
    const at::Tensor& grad,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions) {
  static const auto op = find("posenc::add_position_table_backward")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor)>();
  return op.call(grad, table, offset, batch_first, positions);
}

at::Tensor add_positional_encoding(
    const at::Tensor& x,
    int64_t offset,
    double base,
    bool batch_first,
    OptionalTensor positions,
    double scale,
    c10::string_view channels,
    c10::string_view frequencies) {
  static const auto op = find("posenc::add_positional_encoding")
                             .typed<at::Tensor(const at::Tensor&, int64_t, double, bool, OptionalTensor, double,
                                               c10::string_view, c10::string_view)>();
  return op.call(x, offset, base, batch_first, positions, scale, channels, frequencies);
}

at::Tensor apply_rotary(
    const at::Tensor& x,
    const at::Tensor& cos,
    const at::Tensor& sin,
    int64_t offset,
    OptionalTensor positions,
    bool interleaved,
    bool heads_first,
    bool inverse) {
  static const auto op = find("posenc::apply_rotary")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                               OptionalTensor, bool, bool, bool)>();
  return op.call(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
}

} // namespace ops
} // namespace posenc
