#include "detail/checks.h"
#include "detail/sym_size.h"

#include <ATen/ops/aminmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/stack.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

namespace posenc {
namespace detail {

CallerScope::Caller& CallerScope::current() {
  static thread_local Caller caller;
  return caller;
}

CallerScope::CallerScope(const char* name, const char* hint) : slot_(current()), previous_(slot_) {
  slot_ = {name, hint};
}

CallerScope::CallerScope(KeepOuter, const char* name) : slot_(current()), previous_(slot_) {
  if (slot_.name == nullptr) {
    slot_ = {name, ""};
  }
}

CallerScope::CallerScope(Rename, const char* name) : slot_(current()), previous_(slot_) {
  slot_.name = name;
}

CallerScope::~CallerScope() {
  slot_ = previous_;
}

const char* sequence_layout(bool batch_first) {
  return batch_first ? "[B, L] (batch_first=true)" : "[L, B] (batch_first=false)";
}

const char* extrapolate_hint(bool python) {
  return python ? " or pass beyond_max_len='extrapolate'"
                : " or pass beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)";
}

void check_dropout(double p) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(p >= 0.0 && p <= 1.0, who, ": dropout must be in [0, 1], but got ", p,
              "; pass the probability of zeroing an element (0 disables dropout)");
}

void check_scale(double scale) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(std::isfinite(scale), who, ": scale must be finite, but got ", scale);
}

void check_scale(double scale, c10::ScalarType dtype) {
  static constexpr detail::CallerName who{};
  check_scale(scale);
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  TORCH_CHECK(dtype == c10::kDouble || std::abs(scale) <= kFloatMax, who,
              ": scale must lie in [-3.4028e38, 3.4028e38] for ", dtype,
              " inputs (computed in float32), but got ", scale,
              "; pass float64 inputs or a smaller scale");
}

void check_argument_device(const at::Tensor& tensor, const char* what, const c10::Device& device) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(tensor.device() == device, who, ": expected all tensors of the call on one device, ",
              "but ", what, " is on ", tensor.device(), " and the input on ", device, "; move ",
              what, " with .to(", device, ")");
}

void check_float_dtype(const char* what, c10::ScalarType dtype) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(is_supported_float(dtype), who, ": ", what,
              " must be float16, bfloat16, float32 or float64, but got ", dtype,
              "; positional encodings are sines and cosines and need a floating dtype");
}

int64_t checked_numel(const char* what, std::initializer_list<int64_t> sizes) {
  static constexpr detail::CallerName who{};
  int64_t elements = 1;
  bool overflow = false;
  std::string product;
  for (const int64_t size : sizes) {
    overflow = overflow || __builtin_mul_overflow(elements, size, &elements);
    product += (product.empty() ? "" : " * ") + std::to_string(size);
  }
  constexpr int64_t kLargestElements = std::numeric_limits<int64_t>::max() / 8;
  TORCH_CHECK(!overflow && elements <= kLargestElements, who, ": ", what, " = ", product,
              " elements is more than a tensor can hold (2^60 elements of 8 bytes); lower them");
  return elements;
}

void check_table_size(const char* what, int64_t rows, int64_t width, const char* lower) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(rows <= kMaxTableElements / width, who, ": ", what, " = ", rows, " * ", width,
              " elements is over posenc's limit of 2^28 elements (1 GiB in float32); lower ",
              lower);
}

void check_sequence_input(const at::Tensor& x, int64_t d_model, bool batch_first,
                          const c10::Device& device) {
  static constexpr detail::CallerName who{};
  const char* layout =
      batch_first ? "[B, L, D] (batch_first=true)" : "[L, B, D] (batch_first=false)";
  TORCH_CHECK(x.defined(), who, ": expected an input tensor of shape ", layout,
              ", but got an undefined tensor");
  TORCH_CHECK(x.dim() == 3, who, ": expected a 3-D input of shape ", layout, ", but got a ",
              x.dim(), "-D tensor of shape ", shape_of(x),
              "; add the missing dimension, e.g. x.unsqueeze(", batch_first ? 0 : 1,
              ") for a single sequence");
  TORCH_CHECK(is_supported_float(x.scalar_type()), who,
              ": expected a floating-point input (float16, bfloat16, float32 or float64), but got ",
              x.scalar_type(), "; embed integer token ids first, e.g. with torch::nn::Embedding");
  // (the sizes compared, not read: torch.export keeps the length and the batch symbolic)
  TORCH_CHECK(d_model == kAnyWidth || size_of(x, 2) == d_model, who,
              ": expected the last dimension of the input to be d_model = ", d_model, ", but got ",
              size_of(x, 2), " (input shape ", shape_of(x),
              "); build the module with d_model = ", size_of(x, 2), " or project the input to ",
              d_model, " features");
  check_input_device(x, device, "the encoding table");
}

void check_input_device(const at::Tensor& x, const c10::Device& device, const char* table_name) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(x.device() == device, who, ": expected the input on the device of ", table_name, " (",
              device, "), but got an input on ", x.device(), "; move the module with module->to(",
              x.device(), ") or the input with x.to(", device, ")");
}

void check_positions_device(const at::Tensor& positions, const c10::Device& device) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(positions.device() == device, who, ": positions must be on the input's device (",
              device, "), but got ", positions.device());
}

void check_no_offset_with_positions(int64_t offset) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(offset == 0, who,
              ": pass either an offset or explicit positions, not both (got offset = ", offset,
              ")");
}

void check_offset_start(int64_t offset, int64_t length) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(offset >= 0, who, ": offset must be >= 0, but got ", offset,
              "; positions start at 0");
  TORCH_CHECK(offset <= std::numeric_limits<int64_t>::max() - length, who,
              ": offset + L must fit in int64, but got offset = ", offset, " and L = ", length);
}

void check_offset(int64_t offset, int64_t length, int64_t max_len, const char* hint) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(offset >= 0, who, ": offset must be >= 0, but got ", offset,
              "; positions start at 0");
  TORCH_CHECK(
      offset <= max_len - length, who,
      ": positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (",
      max_len, "), but got L = ", length, " and offset = ", offset, " (offset + L = ",
      // Printed as a double so that a huge offset cannot overflow the message.
      static_cast<double>(offset) + static_cast<double>(length),
      "); build the module with a larger max_len", hint, ", or split the sequence");
}

TableShape check_table(const at::Tensor& table) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(
      table.defined(), who,
      ": the encoding table is undefined; build it with posenc::functional::sinusoidal_table");
  TORCH_CHECK(table.dim() == 2 || (table.dim() == 3 && table.size(0) == 1), who,
              ": expected the encoding table as [max_len, D] or [1, max_len, D], but got shape ",
              table.sizes());
  check_float_dtype("the encoding table's dtype", table.scalar_type());
  return {table.size(-2), table.size(-1)};
}

at::Tensor table_rows(const at::Tensor& table) {
  return table.dim() == 3 ? table.select(0, 0) : table;
}

void check_positions_form(const at::Tensor& positions, int64_t length, at::IntArrayRef per_sequence,
                          const char* per_sequence_name, const c10::Device& device,
                          bool continuous) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(positions.defined(), who, ": positions are undefined");
  TORCH_CHECK(at::isIntegralType(positions.scalar_type(), /*includeBool=*/false) ||
                  (continuous && is_continuous(positions)),
              who, ": positions must be an integer tensor (int64 or int32)",
              continuous ? " or a floating-point one" : "", ", but got ",
              positions.scalar_type());
  const bool shared = positions.dim() == 1 && positions.size(0) == length;
  const bool each = positions.dim() == 2 && positions.sizes() == per_sequence;
  TORCH_CHECK(shared || each, who, ": positions must have shape [L] = [", length, "] or ",
              per_sequence_name, " = ", per_sequence, ", but got ", positions.sizes());
  check_positions_device(positions, device);
}

bool is_continuous(const at::Tensor& positions) {
  return positions.defined() && at::isFloatingType(positions.scalar_type());
}

void check_continuous_allowed(const at::Tensor& positions, bool has_definition,
                              const char* definition) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(!is_continuous(positions) || has_definition, who, ": floating-point positions (",
              positions.scalar_type(),
              ") are computed from the encoding's definition, which this call lacks (a learned "
              "table has none): pass ",
              definition, " to the operator (posenc's sinusoidal and rotary modules pass their "
              "own), or integer positions");
}

void check_continuous_range(const at::Tensor& host) {
  static constexpr detail::CallerName who{};
  const double* values = host.data_ptr<double>();
  // 2^63: the first value past int64's range; |position * frequency| stays finite below it.
  constexpr double kLimit = 9223372036854775808.0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    TORCH_CHECK(std::isfinite(values[i]) && values[i] >= 0.0 && values[i] < kLimit, who,
                ": floating-point positions must be finite and in [0, 2^63), but got ", values[i],
                " at index ", i, "; replace NaN/Inf (e.g. torch.nan_to_num) before encoding");
  }
}

void check_positions_range(int64_t smallest, int64_t largest, int64_t limit, const char* hint) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(smallest >= -1, who, ": positions must be >= -1 (-1 marks padding), but got ",
              smallest);
  TORCH_CHECK(limit < 0 || largest < limit, who, ": positions must be < max_len (", limit,
              "), but got ", largest,
              "; build the module with max_len >= ", static_cast<double>(largest) + 1, hint);
}

HostValues host_read(std::initializer_list<at::Tensor> ranged, const at::Tensor& whole) {
  RECORD_FUNCTION("posenc::host_read", std::vector<c10::IValue>());
  std::vector<at::Tensor> parts;
  if (whole.defined()) {
    parts.push_back(whole.reshape({-1}).to(at::kLong));
  }
  for (const at::Tensor& t : ranged) {
    if (t.defined() && t.numel() > 0) {
      at::Tensor low;
      at::Tensor high;
      std::tie(low, high) = at::aminmax(t);
      parts.push_back(at::stack({low, high}).to(at::kLong));
    }
  }
  HostValues result;
  const at::Tensor host = parts.empty()       ? at::Tensor()
                          : parts.size() == 1 ? parts[0].to(at::kCPU).contiguous()
                                              : at::cat(parts).to(at::kCPU).contiguous();
  const int64_t* values = host.defined() ? host.data_ptr<int64_t>() : nullptr;
  if (whole.defined()) {
    result.whole = host.narrow(0, 0, whole.numel()).view(whole.sizes());
    values += whole.numel();
  }
  for (const at::Tensor& t : ranged) {
    if (t.defined() && t.numel() > 0) {
      result.ranges.emplace_back(values[0], values[1]);
      values += 2;
    } else {
      result.ranges.emplace_back(0, -1);
    }
  }
  return result;
}

} // namespace detail
} // namespace posenc
