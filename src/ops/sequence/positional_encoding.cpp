// The positional-encoding family: the sinusoidal table, sinusoidal encodings computed per call,
// and adding rows of any position table (sinusoidal or learned). Schemas, and C++ entry points
// that call through the dispatcher; kernels per backend beside them (*_kernel.*).

#include "ops/common/dispatch.h"
#include "ops/common/sym_length.h"

#include <posenc/ops/positional_encoding.h>

#include <torch/library.h>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def("sinusoidal_table(" POSENC_SYMINT
        " max_len, int d_model, float base=10000.0, int offset=0, "
        "str channels=\"interleaved\", str frequencies=\"paper\", ScalarType? dtype=None, "
        "Device? device=None) -> Tensor");
  m.def(
      "add_positional_encoding(Tensor x, int offset=0, float base=10000.0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0, str channels=\"interleaved\", "
      "str frequencies=\"paper\") -> Tensor");
  m.def(
      "add_position_table(Tensor x, Tensor table, int offset=0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0, Tensor? columns=None) -> Tensor");
  // In-place and out variants return nothing: that is how mutating custom operators compose with
  // functionalization (torch.compile, torch.export).
  m.def(
      "add_position_table_(Tensor(a!) x, Tensor table, int offset=0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0, Tensor? columns=None) -> ()");
  m.def(
      "add_position_table_out(Tensor x, Tensor table, int offset=0, bool batch_first=True, "
      "Tensor? positions=None, float scale=1.0, Tensor? columns=None, *, Tensor(a!) out) -> ()");
  // The sinusoidal encoding's definition as add_position_table takes it (`columns`): float64
  // [2, d_model], each column's frequency and kind (0 sine, 1 cosine, 2 zero).
  m.def(
      "sinusoidal_columns(int d_model, float base=10000.0, str channels=\"interleaved\", "
      "str frequencies=\"paper\", Device? device=None) -> Tensor");
  // The call of posenc.nn's PositionalEncoding (with `columns`, its column plan) or
  // LearnedPositionalEmbedding (without), src/ops/sequence/module.cpp: dropout(x * scale + rows),
  // the rows computed from the columns past the table (`extrapolate`) or at fractional positions.
  m.def(
      "positional_encoding_call(Tensor x, Tensor table, Tensor? columns, int offset=0, "
      "Tensor? positions=None, bool batch_first=True, float scale=1.0, float dropout=0.0, "
      "bool train=False, bool extrapolate=False) -> Tensor");
  m.def(
      "positional_encoding_call_(Tensor(a!) x, Tensor table, Tensor? columns, int offset=0, "
      "Tensor? positions=None, bool batch_first=True, float scale=1.0, float dropout=0.0, "
      "bool train=False, bool extrapolate=False) -> ()");
  m.def(
      "_add_position_table_backward(Tensor grad, Tensor table, int offset, bool batch_first, "
      "Tensor? positions=None) -> Tensor");
}

namespace detail {
const char* operator_namespace() {
  return "posenc";
}
} // namespace detail

namespace ops {

at::Tensor sinusoidal_table(int64_t max_len, int64_t d_model, double base, int64_t offset,
                            c10::string_view channels, c10::string_view frequencies,
                            c10::optional<at::ScalarType> dtype, c10::optional<at::Device> device) {
  // (its kernel takes SymLength: called so, unboxed)
  static const auto op =
      typed_op<at::Tensor(SymLength, int64_t, double, int64_t, c10::string_view, c10::string_view,
                          c10::optional<at::ScalarType>, c10::optional<at::Device>)>(
          "posenc::sinusoidal_table");
  return op.call(SymLength(max_len), d_model, base, offset, channels, frequencies, dtype, device);
}

at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset, double base,
                                   bool batch_first, OptionalTensor positions, double scale,
                                   c10::string_view channels, c10::string_view frequencies) {
  static const auto op =
      typed_op<at::Tensor(const at::Tensor&, int64_t, double, bool, OptionalTensor, double,
                          c10::string_view, c10::string_view)>("posenc::add_positional_encoding");
  return op.call(x, offset, base, batch_first, positions, scale, channels, frequencies);
}

at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                              bool batch_first, OptionalTensor positions, double scale,
                              OptionalTensor columns) {
  static const auto op =
      typed_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor,
                          double, OptionalTensor)>("posenc::add_position_table");
  return op.call(x, table, offset, batch_first, positions, scale, columns);
}

at::Tensor& add_position_table_(at::Tensor& x, const at::Tensor& table, int64_t offset,
                                bool batch_first, OptionalTensor positions, double scale,
                                OptionalTensor columns) {
  static const auto op =
      typed_op<void(at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor, double,
                    OptionalTensor)>("posenc::add_position_table_");
  op.call(x, table, offset, batch_first, positions, scale, columns);
  return x;
}

at::Tensor& add_position_table_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& table,
                                   int64_t offset, bool batch_first, OptionalTensor positions,
                                   double scale, OptionalTensor columns) {
  static const auto op =
      typed_op<void(const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor, double,
                    OptionalTensor, at::Tensor&)>("posenc::add_position_table_out");
  op.call(x, table, offset, batch_first, positions, scale, columns, out);
  return out;
}

at::Tensor add_position_table_backward(const at::Tensor& grad, const at::Tensor& table,
                                       int64_t offset, bool batch_first, OptionalTensor positions) {
  static const auto op =
      typed_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor)>(
          "posenc::_add_position_table_backward");
  return op.call(grad, table, offset, batch_first, positions);
}

} // namespace ops
} // namespace posenc
