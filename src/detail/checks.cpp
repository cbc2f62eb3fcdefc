#include "detail/checks.h"

#include <c10/util/Exception.h>

#include <cmath>

namespace posenc {
namespace detail {

void check_dropout(const char* who, double p) {
  TORCH_CHECK(p >= 0.0 && p <= 1.0,
              who,
              ": dropout must be in [0, 1], but got ",
              p,
              "; pass the probability of zeroing an element (0 disables dropout)");
}

void check_float_dtype(const char* who, const char* what, c10::ScalarType dtype) {
  TORCH_CHECK(is_supported_float(dtype),
              who,
              ": ",
              what,
              " must be float16, bfloat16, float32 or float64, but got ",
              dtype,
              "; positional encodings are sines and cosines and need a floating dtype");
}

void check_sequence_input(const char* who,
                          const at::Tensor& x,
                          int64_t d_model,
                          bool batch_first,
                          const c10::Device& device) {
  const char* layout =
      batch_first ? "[B, L, D] (batch_first=true)" : "[L, B, D] (batch_first=false)";
  TORCH_CHECK(x.defined(),
              who,
              ": expected an input tensor of shape ",
              layout,
              ", but got an undefined tensor");
  TORCH_CHECK(x.dim() == 3,
              who,
              ": expected a 3-D input of shape ",
              layout,
              ", but got a ",
              x.dim(),
              "-D tensor of shape ",
              x.sizes(),
              "; add the missing dimension, e.g. x.unsqueeze(",
              batch_first ? 0 : 1,
              ") for a single sequence");
  TORCH_CHECK(is_supported_float(x.scalar_type()),
              who,
              ": expected a floating-point input (float16, bfloat16, float32 or float64), but got ",
              x.scalar_type(),
              "; embed integer token ids first, e.g. with torch::nn::Embedding");
  TORCH_CHECK(d_model == kAnyWidth || x.size(2) == d_model,
              who,
              ": expected the last dimension of the input to be d_model = ",
              d_model,
              ", but got ",
              x.size(2),
              " (input shape ",
              x.sizes(),
              "); build the module with d_model = ",
              x.size(2),
              " or project the input to ",
              d_model,
              " features");
  TORCH_CHECK(x.device() == device,
              who,
              ": expected the input on the device of the encoding table (",
              device,
              "), but got an input on ",
              x.device(),
              "; move the module with module->to(",
              x.device(),
              ") or the input with x.to(",
              device,
              ")");
}

void check_offset(
    const char* who, int64_t offset, int64_t length, int64_t max_len, const char* hint) {
  TORCH_CHECK(
      offset >= 0, who, ": offset must be >= 0, but got ", offset, "; positions start at 0");
  TORCH_CHECK(
      offset <= max_len - length,
      who,
      ": positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (",
      max_len,
      "), but got L = ",
      length,
      " and offset = ",
      offset,
      " (offset + L = ",
      // Printed as a double so that a huge offset cannot overflow the message.
      static_cast<double>(offset) + static_cast<double>(length),
      "); build the module with a larger max_len",
      hint,
      ", or split the sequence");
}

TableShape check_table(const char* who, const at::Tensor& table) {
  TORCH_CHECK(
      table.defined(),
      who,
      ": the encoding table is undefined; build it with posenc::functional::sinusoidal_table");
  TORCH_CHECK(table.dim() == 2 || (table.dim() == 3 && table.size(0) == 1),
              who,
              ": expected the encoding table as [max_len, D] or [1, max_len, D], but got shape ",
              table.sizes());
  check_float_dtype(who, "the encoding table's dtype", table.scalar_type());
  return {table.size(-2), table.size(-1)};
}

at::Tensor table_rows(const char* who, const at::Tensor& table) {
  check_table(who, table);
  return table.dim() == 3 ? table.select(0, 0) : table;
}

} // namespace detail
} // namespace posenc
