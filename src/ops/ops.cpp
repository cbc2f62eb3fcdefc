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
  // In-place and out variants return nothing: that is how mutating custom operators compose with
  // functionalization (torch.compile, torch.export).
  m.def(
      "add_position_table_(Tensor(a!) x, Tensor table, int offset=0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0) -> ()");
  m.def(
      "add_position_table_out(Tensor x, Tensor table, int offset=0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0, *, Tensor(a!) out) -> ()");
  m.def(
      "apply_rotary_(Tensor(a!) x, Tensor cos, Tensor sin, int offset=0, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool inverse=False) -> ()");
  m.def(
      "token_and_position_embedding(Tensor tokens, Tensor weight, Tensor table, int offset=0, "
      "bool batch_first=True, Tensor? positions=None, float scale=1.0, int padding_idx=-1, "
      "float dropout=0.0, bool train=False) -> (Tensor, Tensor)");
  m.def(
      "token_and_position_embedding_backward(Tensor grad, Tensor mask, Tensor tokens, Tensor "
      "weight, "
      "Tensor table, int offset, bool batch_first, Tensor? positions, float scale, int "
      "padding_idx, "
      "float dropout, bool[2] output_mask) -> (Tensor, Tensor)");
}

namespace detail {
int64_t registered_op_count() {
  return 10;
}
} // namespace detail

namespace ops {

namespace {
c10::OperatorHandle find(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}
using OptionalTensor = const c10::optional<at::Tensor>&;
} // namespace

at::Tensor sinusoidal_table(int64_t max_len,
                            int64_t d_model,
                            double base,
                            int64_t offset,
                            c10::string_view channels,
                            c10::string_view frequencies,
                            c10::optional<at::ScalarType> dtype,
                            c10::optional<at::Device> device) {
  static const auto op = find("posenc::sinusoidal_table")
                             .typed<at::Tensor(int64_t,
                                               int64_t,
                                               double,
                                               int64_t,
                                               c10::string_view,
                                               c10::string_view,
                                               c10::optional<at::ScalarType>,
                                               c10::optional<at::Device>)>();
  return op.call(max_len, d_model, base, offset, channels, frequencies, dtype, device);
}

at::Tensor add_position_table(const at::Tensor& x,
                              const at::Tensor& table,
                              int64_t offset,
                              bool batch_first,
                              OptionalTensor positions,
                              double scale) {
  static const auto op =
      find("posenc::add_position_table")
          .typed<at::Tensor(
              const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor, double)>();
  return op.call(x, table, offset, batch_first, positions, scale);
}

at::Tensor add_position_table_backward(const at::Tensor& grad,
                                       const at::Tensor& table,
                                       int64_t offset,
                                       bool batch_first,
                                       OptionalTensor positions) {
  static const auto op =
      find("posenc::add_position_table_backward")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor)>();
  return op.call(grad, table, offset, batch_first, positions);
}

at::Tensor add_positional_encoding(const at::Tensor& x,
                                   int64_t offset,
                                   double base,
                                   bool batch_first,
                                   OptionalTensor positions,
                                   double scale,
                                   c10::string_view channels,
                                   c10::string_view frequencies) {
  static const auto op = find("posenc::add_positional_encoding")
                             .typed<at::Tensor(const at::Tensor&,
                                               int64_t,
                                               double,
                                               bool,
                                               OptionalTensor,
                                               double,
                                               c10::string_view,
                                               c10::string_view)>();
  return op.call(x, offset, base, batch_first, positions, scale, channels, frequencies);
}

at::Tensor apply_rotary(const at::Tensor& x,
                        const at::Tensor& cos,
                        const at::Tensor& sin,
                        int64_t offset,
                        OptionalTensor positions,
                        bool interleaved,
                        bool heads_first,
                        bool inverse) {
  static const auto op = find("posenc::apply_rotary")
                             .typed<at::Tensor(const at::Tensor&,
                                               const at::Tensor&,
                                               const at::Tensor&,
                                               int64_t,
                                               OptionalTensor,
                                               bool,
                                               bool,
                                               bool)>();
  return op.call(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
}

at::Tensor& add_position_table_(at::Tensor& x,
                                const at::Tensor& table,
                                int64_t offset,
                                bool batch_first,
                                OptionalTensor positions,
                                double scale) {
  static const auto op =
      find("posenc::add_position_table_")
          .typed<void(at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor, double)>();
  op.call(x, table, offset, batch_first, positions, scale);
  return x;
}

at::Tensor& add_position_table_out(at::Tensor& out,
                                   const at::Tensor& x,
                                   const at::Tensor& table,
                                   int64_t offset,
                                   bool batch_first,
                                   OptionalTensor positions,
                                   double scale) {
  static const auto op = find("posenc::add_position_table_out")
                             .typed<void(const at::Tensor&,
                                         const at::Tensor&,
                                         int64_t,
                                         bool,
                                         OptionalTensor,
                                         double,
                                         at::Tensor&)>();
  op.call(x, table, offset, batch_first, positions, scale, out);
  return out;
}

at::Tensor& apply_rotary_(at::Tensor& x,
                          const at::Tensor& cos,
                          const at::Tensor& sin,
                          int64_t offset,
                          OptionalTensor positions,
                          bool interleaved,
                          bool heads_first,
                          bool inverse) {
  static const auto op = find("posenc::apply_rotary_")
                             .typed<void(at::Tensor&,
                                         const at::Tensor&,
                                         const at::Tensor&,
                                         int64_t,
                                         OptionalTensor,
                                         bool,
                                         bool,
                                         bool)>();
  op.call(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
  return x;
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(const at::Tensor& tokens,
                                                                const at::Tensor& weight,
                                                                const at::Tensor& table,
                                                                int64_t offset,
                                                                bool batch_first,
                                                                OptionalTensor positions,
                                                                double scale,
                                                                int64_t padding_idx,
                                                                double dropout,
                                                                bool train) {
  static const auto op = find("posenc::token_and_position_embedding")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       int64_t,
                                                                       bool,
                                                                       OptionalTensor,
                                                                       double,
                                                                       int64_t,
                                                                       double,
                                                                       bool)>();
  return op.call(
      tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train);
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward(
    const at::Tensor& grad,
    const at::Tensor& mask,
    const at::Tensor& tokens,
    const at::Tensor& weight,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions,
    double scale,
    int64_t padding_idx,
    double dropout,
    std::array<bool, 2> output_mask) {
  static const auto op = find("posenc::token_and_position_embedding_backward")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       int64_t,
                                                                       bool,
                                                                       OptionalTensor,
                                                                       double,
                                                                       int64_t,
                                                                       double,
                                                                       std::array<bool, 2>)>();
  return op.call(grad,
                 mask,
                 tokens,
                 weight,
                 table,
                 offset,
                 batch_first,
                 positions,
                 scale,
                 padding_idx,
                 dropout,
                 output_mask);
}

} // namespace ops
} // namespace posenc
