#include <posenc/export.h>

#include <ATen/core/jit_type.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include <memory>

#include <string>

namespace posenc {

namespace {

// Replaces every "{name}" in `text` by `value`.
std::string substitute(std::string text, const std::string& name, const std::string& value) {
  const std::string pattern = "{" + name + "}";
  for (size_t at = text.find(pattern); at != std::string::npos; at = text.find(pattern, at + value.size())) {
    text.replace(at, pattern.size(), value);
  }
  return text;
}

// In TorchScript compiled from C++ a dtype is its c10::ScalarType code (stable across versions):
// Half = 5, Float = 6, Double = 7, BFloat16 = 15. This method names the common ones in messages.
constexpr const char* kDtypeName = R"TS(
    def _dtype_name(self, dtype: int) -> str:
        names = ["Byte", "Char", "Short", "Int", "Long", "Half", "Float", "Double", "ComplexHalf", "ComplexFloat", "ComplexDouble", "Bool"]
        if dtype >= 0 and dtype < len(names):
            return names[dtype]
        if dtype == 15:
            return "BFloat16"
        return "dtype code " + str(dtype)
)TS";

// Checks of an input `x` taken as [B, L, D] or [L, B, D] with D = self.d_model, raising the
// messages of the C++ modules (detail/checks.cpp) with `{who}` as prefix.
constexpr const char* kInputChecks = R"TS(
        layout = "[B, L, D] (batch_first=true)" if self.batch_first else "[L, B, D] (batch_first=false)"
        if x.dim() != 3:
            raise RuntimeError("{who}: expected a 3-D input of shape " + layout + ", but got a " + str(x.dim()) + "-D tensor of shape " + str(x.shape))
        if not (x.dtype == 5 or x.dtype == 15 or x.dtype == 6 or x.dtype == 7):
            raise RuntimeError("{who}: expected a floating-point input (float16, bfloat16, float32 or float64), but got " + self._dtype_name(x.dtype) + "; embed integer token ids first")
        if x.size(2) != self.d_model:
            raise RuntimeError("{who}: expected the last dimension of the input to be d_model = " + str(self.d_model) + ", but got " + str(x.size(2)) + " (input shape " + str(x.shape) + ")")
)TS";

// Checks of `offset` against the table length self.max_len; defines `length` (L).
constexpr const char* kOffsetChecks = R"TS(
        length = x.size(1) if self.batch_first else x.size(0)
        if offset < 0:
            raise RuntimeError("{who}: offset must be >= 0, but got " + str(offset) + "; positions start at 0")
        if offset + length > self.max_len:
            raise RuntimeError("{who}: positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (" + str(self.max_len) + "), but got L = " + str(length) + " and offset = " + str(offset) + " (offset + L = " + str(offset + length) + "); build the module with a larger max_len, or split the sequence")
)TS";

// The device check against the tensor attribute `{table}`.
constexpr const char* kDeviceCheck = R"TS(
        if x.device != self.{table}.device:
            raise RuntimeError("{who}: expected the input on the device of the encoding table (" + str(self.{table}.device) + "), but got an input on " + str(x.device))
)TS";

// x + rows broadcast over the batch, in the dtype of x (the sum formed in at least float32).
constexpr const char* kAddRows = R"TS(
        if self.batch_first:
            rows = rows.unsqueeze(0)
        else:
            rows = rows.unsqueeze(1)
        return torch.add(x, rows).to(x.dtype)
)TS";

// The names the exported code uses: `torch` (the native resolver's) and `RuntimeError`.
struct ExportResolver : torch::jit::NativeResolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(
      const std::string& name,
      torch::jit::GraphFunction& function,
      const torch::jit::SourceRange& location) override {
    if (name == "RuntimeError") {
      return std::make_shared<torch::jit::ExceptionValue>(name);
    }
    return torch::jit::NativeResolver::resolveValue(name, function, location);
  }
};

// Defines `_dtype_name` and the forward given as `source`, with `{who}` and `{table}` filled in.
void define_forward(torch::jit::Module& module, std::string source, const std::string& who, const std::string& table) {
  source = substitute(substitute(std::move(source), "who", who), "table", table);
  module.define(std::string(kDtypeName) + source, std::make_shared<ExportResolver>());
}

} // namespace

torch::jit::Module to_torchscript(const PositionalEncodingImpl& module) {
  torch::jit::Module exported("__torch__.posenc.PositionalEncoding");
  exported.register_buffer("pe", module.pe.detach().clone());
  exported.register_attribute("d_model", c10::IntType::get(), module.options.d_model());
  exported.register_attribute("max_len", c10::IntType::get(), module.options.max_len());
  exported.register_attribute("batch_first", c10::BoolType::get(), module.options.batch_first());
  const std::string source = std::string(R"TS(
    def forward(self, x: Tensor, offset: int = 0) -> Tensor:)TS") +
      kInputChecks + kDeviceCheck + kOffsetChecks + R"TS(
        rows = self.pe[0, offset:offset + length])TS" + kAddRows;
  define_forward(exported, source, "PositionalEncoding", "pe");
  exported.eval();
  return exported;
}

} // namespace posenc
