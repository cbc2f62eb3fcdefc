#include <posenc/export.h>

#include "detail/sinusoidal.h"

#include <ATen/core/jit_type.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace posenc {

namespace {

// Replaces every "{name}" in `text` by `value`.
std::string substitute(std::string text, const std::string& name, const std::string& value) {
  const std::string pattern = "{" + name + "}";
  for (size_t at = text.find(pattern); at != std::string::npos;
       at = text.find(pattern, at + value.size())) {
    text.replace(at, pattern.size(), value);
  }
  return text;
}

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

// In TorchScript compiled from C++ a dtype is its c10::ScalarType code (stable across versions):
// Half = 5, Float = 6, Double = 7, BFloat16 = 15; integers 0-4 (Long = 4), Bool 11. Conversions
// are written .to(4) (int64) and .to(7) (float64) for that reason.
constexpr const char* kCommonMethods = R"TS(
    def _dtype_name(self, dtype: int) -> str:
        names = ["Byte", "Char", "Short", "Int", "Long", "Half", "Float", "Double", "ComplexHalf", "ComplexFloat", "ComplexDouble", "Bool"]
        if dtype >= 0 and dtype < len(names):
            return names[dtype]
        if dtype == 15:
            return "BFloat16"
        return "dtype code " + str(dtype)

    def _check_float(self, x: Tensor):
        if not (x.dtype == 5 or x.dtype == 15 or x.dtype == 6 or x.dtype == 7):
            raise RuntimeError("{who}: expected a floating-point input (float16, bfloat16, float32 or float64), but got " + self._dtype_name(x.dtype) + "; embed integer token ids first")

    def _check_positions(self, positions: Tensor, length: int, each: List[int], each_name: str, device: Device, limit: int):
        if positions.dtype > 4:
            raise RuntimeError("{who}: positions must be an integer tensor (int64 or int32), but got " + self._dtype_name(positions.dtype))
        shared = positions.dim() == 1 and positions.size(0) == length
        if not (shared or (positions.dim() == 2 and positions.shape == each)):
            raise RuntimeError("{who}: positions must have shape [L] = [" + str(length) + "] or " + each_name + " = " + str(each) + ", but got " + str(positions.shape))
        if positions.device != device:
            raise RuntimeError("{who}: positions must be on the input's device (" + str(device) + "), but got " + str(positions.device))
        if positions.numel() > 0:
            smallest = int(positions.min())
            largest = int(positions.max())
            if smallest < -1:
                raise RuntimeError("{who}: positions must be >= -1 (-1 marks padding), but got " + str(smallest))
            if limit >= 0 and largest >= limit:
                raise RuntimeError("{who}: positions must be < max_len (" + str(limit) + "), but got " + str(largest) + "; build the module with max_len >= " + str(largest + 1))
)TS";

// The offset check of modules with a table of self.max_len rows and a self.extrapolate flag.
constexpr const char* kOffsetMethod = R"TS(
    def _check_offset(self, offset: int, length: int):
        if offset < 0:
            raise RuntimeError("{who}: offset must be >= 0, but got " + str(offset) + "; positions start at 0")
        if not self.extrapolate and offset + length > self.max_len:
            raise RuntimeError("{who}: positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (" + str(self.max_len) + "), but got L = " + str(length) + " and offset = " + str(offset) + " (offset + L = " + str(offset + length) + "); build the module with a larger max_len, or split the sequence")
)TS";

// Table-based sequence modules (sinusoidal, learned). {table} is the [max_len, D] table
// expression; {extrapolate} the code that fills rows past the table.
constexpr const char* kSequenceMethods = R"TS(
    def _check_input(self, x: Tensor):
        layout = "[B, L, D] (batch_first=true)" if self.batch_first else "[L, B, D] (batch_first=false)"
        if x.dim() != 3:
            raise RuntimeError("{who}: expected a 3-D input of shape " + layout + ", but got a " + str(x.dim()) + "-D tensor of shape " + str(x.shape))
        self._check_float(x)
        if x.size(2) != self.d_model:
            raise RuntimeError("{who}: expected the last dimension of the input to be d_model = " + str(self.d_model) + ", but got " + str(x.size(2)) + " (input shape " + str(x.shape) + ")")
        if x.device != {table}.device:
            raise RuntimeError("{who}: expected the input on the device of the encoding table (" + str({table}.device) + "), but got an input on " + str(x.device))

    def _rows(self, positions: Tensor) -> Tensor:
        flat = positions.reshape(-1).to(4)
        in_table = torch.where(flat < self.max_len, flat, torch.full_like(flat, -1))
        rows = {table}.index_select(0, in_table.clamp(min=0))
        rows = rows.masked_fill((in_table < 0).unsqueeze(1), 0.0)
{extrapolate}
        return rows

    def _broadcast(self, rows: Tensor, positions: Tensor) -> Tensor:
        if positions.dim() == 2:
            return rows.view(positions.size(0), positions.size(1), rows.size(1))
        if self.batch_first:
            return rows.unsqueeze(0)
        return rows.unsqueeze(1)

    def _add(self, x: Tensor, rows: Tensor) -> Tensor:
        if self.scale == 1.0:
            return torch.add(x, rows).to(x.dtype)
        return torch.add(rows, x, alpha=self.scale).to(x.dtype)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        self._check_input(x)
        length = x.size(1) if self.batch_first else x.size(0)
        self._check_offset(offset, length)
        if offset + length <= self.max_len:
            rows = {table}[offset:offset + length]
            rows = rows.unsqueeze(0) if self.batch_first else rows.unsqueeze(1)
            return self._add(x, rows)
        positions = torch.arange(offset, offset + length, device=x.device)
        return self._add(x, self._broadcast(self._rows(positions), positions))

    def forward_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        self._check_input(x)
        length = x.size(1) if self.batch_first else x.size(0)
        each_name = "[B, L] (batch_first=true)" if self.batch_first else "[L, B] (batch_first=false)"
        self._check_positions(positions, length, [x.size(0), x.size(1)], each_name, x.device, -1 if self.extrapolate else self.max_len)
        return self._add(x, self._broadcast(self._rows(positions), positions))

    def forward_padded(self, x: Tensor, padding_mask: Tensor) -> Tensor:
        if padding_mask.dim() != 2 or padding_mask.dtype != 11:
            raise RuntimeError("{who}: expected a bool padding mask (true = padding) of 2 dimensions, but got " + self._dtype_name(padding_mask.dtype) + " of shape " + str(padding_mask.shape))
        real = torch.logical_not(padding_mask).to(4)
        positions = (real.cumsum(1 if self.batch_first else 0) - 1).masked_fill(padding_mask, -1)
        return self.forward_positions(x, positions)
)TS";

// Rows past the table, computed in float64 from the per-column frequency and kind (sin, cos,
// zero) and rounded once to the table's dtype.
constexpr const char* kSinusoidExtrapolation = R"TS(
        past = flat >= self.max_len
        if self.extrapolate and bool(past.any()):
            kind = self.column_kind.to(flat.device)
            angle = flat.to(7).unsqueeze(1) * self.column_frequency.to(flat.device).unsqueeze(0)
            computed = torch.where(kind == 0, torch.sin(angle), torch.cos(angle))
            computed = computed.masked_fill(kind == 2, 0.0).to(rows.dtype)
            rows = torch.where(past.unsqueeze(1), computed, rows))TS";

void define(torch::jit::Module& module,
            const std::string& source,
            const std::string& who,
            const std::string& table) {
  std::string text = substitute(substitute(source, "who", who), "table", table);
  module.define(text, std::make_shared<ExportResolver>());
}

torch::jit::Module sequence_module(const std::string& name,
                                   int64_t d_model,
                                   int64_t max_len,
                                   bool batch_first,
                                   double scale,
                                   bool extrapolate) {
  torch::jit::Module exported("__torch__.posenc." + name);
  exported.register_attribute("d_model", c10::IntType::get(), d_model);
  exported.register_attribute("max_len", c10::IntType::get(), max_len);
  exported.register_attribute("batch_first", c10::BoolType::get(), batch_first);
  exported.register_attribute("scale", c10::FloatType::get(), scale);
  exported.register_attribute("extrapolate", c10::BoolType::get(), extrapolate);
  return exported;
}

} // namespace

torch::jit::Module to_torchscript(const PositionalEncodingImpl& module) {
  const auto& options = module.options;
  const bool extrapolate = options.beyond_max_len() == BeyondMaxLen::kExtrapolate;
  auto exported = sequence_module("PositionalEncoding",
                                  options.d_model(),
                                  options.max_len(),
                                  options.batch_first(),
                                  options.scale(),
                                  extrapolate);
  exported.register_buffer("pe", module.pe.detach().clone());
  const detail::ColumnPlan plan =
      detail::column_plan({options.d_model(), options.base(), options.layout(), options.spacing()});
  // Plain tensor attributes, not buffers: the state dict keeps only `pe`, like the Python module's.
  // (Module.to() does not move attributes, so the code moves them to the input's device.)
  exported.register_attribute("column_frequency",
                              c10::TensorType::get(),
                              at::tensor(plan.frequency, at::kDouble).to(module.pe.device()));
  std::vector<int64_t> kinds(plan.kind.begin(), plan.kind.end());
  exported.register_attribute(
      "column_kind", c10::TensorType::get(), at::tensor(kinds, at::kLong).to(module.pe.device()));
  define(exported,
         std::string(kCommonMethods) + kOffsetMethod +
             substitute(kSequenceMethods, "extrapolate", kSinusoidExtrapolation),
         "PositionalEncoding",
         "self.pe[0]");
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const LearnedPositionalEmbeddingImpl& module) {
  const auto& options = module.options;
  auto exported = sequence_module("LearnedPositionalEmbedding",
                                  options.d_model(),
                                  options.max_len(),
                                  options.batch_first(),
                                  options.scale(),
                                  false);
  exported.register_parameter("weight", module.weight.detach().clone(), /*is_buffer=*/false);
  define(
      exported,
      std::string(kCommonMethods) + kOffsetMethod + substitute(kSequenceMethods, "extrapolate", ""),
      "LearnedPositionalEmbedding",
      "self.weight");
  exported.eval();
  return exported;
}

namespace {

constexpr const char* kRotaryMethods = R"TS(
    def _check_input(self, x: Tensor):
        layout = "[B, H, L, Dh] (heads_first=true)" if self.heads_first else "[B, L, H, Dh] (heads_first=false)"
        if x.dim() != 4:
            raise RuntimeError("{who}: expected a 4-D query or key tensor of shape " + layout + ", but got a " + str(x.dim()) + "-D tensor of shape " + str(x.shape))
        self._check_float(x)
        if x.size(3) < self.rotary_dim:
            raise RuntimeError("{who}: the head dimension Dh = " + str(x.size(3)) + " is smaller than the rotated width " + str(self.rotary_dim) + " (input shape " + str(x.shape) + ")")
        if x.device != self.cos.device:
            raise RuntimeError("{who}: expected the input on the device of the cos/sin caches (" + str(self.cos.device) + "), but got an input on " + str(x.device))

    def _tables(self, positions: Tensor) -> Tuple[Tensor, Tensor]:
        flat = positions.reshape(-1).to(4)
        in_table = torch.where(flat < self.max_len, flat, torch.full_like(flat, -1))
        outside = (in_table < 0).unsqueeze(1)
        c = self.cos.index_select(0, in_table.clamp(min=0)).masked_fill(outside, 1.0)
        s = self.sin.index_select(0, in_table.clamp(min=0)).masked_fill(outside, 0.0)
        past = flat >= self.max_len
        if self.extrapolate and bool(past.any()):
            angle = flat.to(7).unsqueeze(1) * self.inv_freq.to(flat.device).unsqueeze(0)
            c = torch.where(past.unsqueeze(1), torch.cos(angle).to(c.dtype), c)
            s = torch.where(past.unsqueeze(1), torch.sin(angle).to(s.dtype), s)
        return c, s

    def _broadcast(self, rows: Tensor, batch: int, length: int) -> Tensor:
        if self.heads_first:
            return rows.view(batch, 1, length, rows.size(1))
        return rows.view(batch, length, 1, rows.size(1))

    def _rotate(self, x: Tensor, c: Tensor, s: Tensor) -> Tensor:
        half = c.size(-1)
        rotated = 2 * half
        part = x[..., :rotated]
        if self.interleaved:
            shape = part.shape[:-1]
            shape.append(half)
            shape.append(2)
            pairs = part.reshape(shape)
            a = pairs.select(-1, 0)
            b = pairs.select(-1, 1)
        else:
            a = part[..., :half]
            b = part[..., half:rotated]
        new_a = a.mul(c).sub(b.mul(s))
        new_b = a.mul(s).add(b.mul(c))
        if self.interleaved:
            out = torch.stack([new_a, new_b], -1).flatten(-2)
        else:
            out = torch.cat([new_a, new_b], -1)
        if rotated < x.size(-1):
            out = torch.cat([out, x[..., rotated:].to(out.dtype)], -1)
        return out.to(x.dtype)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        self._check_input(x)
        length = x.size(2) if self.heads_first else x.size(1)
        self._check_offset(offset, length)
        if offset + length <= self.max_len:
            c = self.cos[offset:offset + length]
            s = self.sin[offset:offset + length]
        else:
            c, s = self._tables(torch.arange(offset, offset + length, device=x.device))
        return self._rotate(x, self._broadcast(c, 1, length), self._broadcast(s, 1, length))

    def forward_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        self._check_input(x)
        length = x.size(2) if self.heads_first else x.size(1)
        self._check_positions(positions, length, [x.size(0), length], "[B, L]", x.device, -1 if self.extrapolate else self.max_len)
        c, s = self._tables(positions)
        batch = positions.size(0) if positions.dim() == 2 else 1
        return self._rotate(x, self._broadcast(c, batch, length), self._broadcast(s, batch, length))
)TS";

} // namespace

torch::jit::Module to_torchscript(const RotaryEmbeddingImpl& module) {
  const auto& options = module.options;
  const int64_t rotary_dim = options.rotated_width();
  torch::jit::Module exported("__torch__.posenc.RotaryEmbedding");
  exported.register_attribute("max_len", c10::IntType::get(), options.max_len());
  exported.register_attribute("rotary_dim", c10::IntType::get(), rotary_dim);
  exported.register_attribute(
      "interleaved", c10::BoolType::get(), options.pairing() == RotaryPairing::kInterleaved);
  exported.register_attribute("heads_first", c10::BoolType::get(), options.heads_first());
  exported.register_attribute(
      "extrapolate", c10::BoolType::get(), options.beyond_max_len() == BeyondMaxLen::kExtrapolate);
  exported.register_buffer("cos", module.cos.detach().clone());
  exported.register_buffer("sin", module.sin.detach().clone());
  std::vector<double> inv_freq(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] =
        std::pow(options.base(), -static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
  }
  exported.register_attribute("inv_freq",
                              c10::TensorType::get(),
                              at::tensor(inv_freq, at::kDouble).to(module.cos.device()));
  define(exported,
         std::string(kCommonMethods) + kOffsetMethod + kRotaryMethods,
         "RotaryEmbedding",
         "self.cos");
  exported.eval();
  return exported;
}

namespace {

constexpr const char* kTokenMethods = R"TS(
    def forward(self, ids: Tensor) -> Tensor:
        layout = "[B, L] (batch_first=true)" if self.batch_first else "[L, B] (batch_first=false)"
        if ids.dim() != 2:
            raise RuntimeError("{who}: expected token ids of shape " + layout + ", but got a " + str(ids.dim()) + "-D tensor of shape " + str(ids.shape))
        if ids.dtype > 4:
            raise RuntimeError("{who}: expected integer token ids, but got " + self._dtype_name(ids.dtype))
        if ids.device != self.weight.device:
            raise RuntimeError("{who}: expected the token ids on the module's device (" + str(self.weight.device) + "), but got " + str(ids.device))
        if ids.numel() > 0:
            smallest = int(ids.min())
            largest = int(ids.max())
            if smallest < 0 or largest >= self.weight.size(0):
                raise RuntimeError("{who}: token ids must lie in [0, vocab_size) = [0, " + str(self.weight.size(0)) + "), but got ids from " + str(smallest) + " to " + str(largest))
        return torch.embedding(self.weight, ids.to(4), self.padding_idx)
)TS";

constexpr const char* kTokenAndPositionMethods = R"TS(
    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        embedded = self.tokens.forward(ids)
        if self.padding_idx < 0:
            return self.positions.forward(embedded, offset)
        if offset < 0:
            raise RuntimeError("{who}: offset must be >= 0, but got " + str(offset) + "; positions start at 0")
        padding = ids == self.padding_idx
        real = torch.logical_not(padding).to(4)
        positions = (real.cumsum(1 if self.batch_first else 0) - 1).masked_fill(padding, -1)
        positions = torch.where(positions < 0, positions, positions + offset)
        return self.positions.forward_positions(embedded, positions)

    def forward_positions(self, ids: Tensor, positions: Tensor) -> Tensor:
        return self.positions.forward_positions(self.tokens.forward(ids), positions)
)TS";

} // namespace

torch::jit::Module to_torchscript(const TokenAndPositionEmbeddingImpl& module) {
  const auto& options = module.options;
  const int64_t padding_idx = options.padding_idx().value_or(-1);
  torch::jit::Module tokens("__torch__.posenc.TokenEmbedding");
  tokens.register_parameter("weight", module.tokens->weight.detach().clone(), /*is_buffer=*/false);
  tokens.register_attribute("batch_first", c10::BoolType::get(), options.batch_first());
  tokens.register_attribute("padding_idx", c10::IntType::get(), padding_idx);
  define(tokens,
         std::string(kCommonMethods) + kTokenMethods,
         "TokenAndPositionEmbedding",
         "self.weight");

  torch::jit::Module exported("__torch__.posenc.TokenAndPositionEmbedding");
  exported.register_module("tokens", tokens);
  exported.register_module(
      "positions",
      module.sinusoidal ? to_torchscript(*module.sinusoidal) : to_torchscript(*module.learned));
  exported.register_attribute("batch_first", c10::BoolType::get(), options.batch_first());
  exported.register_attribute("padding_idx", c10::IntType::get(), padding_idx);
  define(exported, kTokenAndPositionMethods, "TokenAndPositionEmbedding", "");
  exported.eval();
  return exported;
}

} // namespace posenc
