// libFuzzer target for posenc. One byte picks a target (0-7; 8: safetensors; 13: config.json and
// rope_parameters; 14: packed positions; 15: posenc.nn's option texts and deep JSON); the rest
// become its options, input shapes, dtypes, devices, offsets, positions, padding masks and layouts,
// or the bytes of a checkpoint. posenc's promise is checked on each: the call returns a result of
// the right shape and dtype (a reader: defined, fully readable tensors), or throws c10::Error. Any
// other exception escapes to libFuzzer and is reported as a crash, as are the sanitizers' findings.

#include <posenc/export.h>
#include <posenc/io/hf_config.h>
#include <posenc/io/safetensors.h>
#include <posenc/io/state_dict.h>
#include <posenc/posenc.h>

#include "detail/json_text.h"
#include "io/torch_save_reader.h"
#include "text_operators.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <fuzzer/FuzzedDataProvider.h>
#include <nlohmann/json.hpp>

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

namespace {

double pick_double(FuzzedDataProvider& in, std::initializer_list<double> specials, double lo,
                   double hi) {
  if (in.ConsumeBool()) {
    std::vector<double> values(specials);
    return values[in.ConsumeIntegralInRange<size_t>(0, values.size() - 1)];
  }
  return in.ConsumeFloatingPointInRange(lo, hi);
}

int64_t pick_size(FuzzedDataProvider& in, int64_t hi) {
  // Mostly small and valid; sometimes zero, negative or enormous.
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      return 0;
    case 1:
      return -in.ConsumeIntegralInRange<int64_t>(1, 5);
    case 2:
      return in.ConsumeIntegralInRange<int64_t>(int64_t{1} << 33, int64_t{1} << 40);
    default:
      return in.ConsumeIntegralInRange<int64_t>(1, hi);
  }
}

// An offset: mostly small, sometimes anywhere in int64 (near its ends, offset + L overflows).
int64_t pick_offset(FuzzedDataProvider& in, int64_t hi) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return in.ConsumeIntegral<int64_t>();
    case 1:
      return std::numeric_limits<int64_t>::max() - in.ConsumeIntegralInRange<int64_t>(0, 8);
    default:
      return in.ConsumeIntegralInRange<int64_t>(-2, hi);
  }
}

torch::Dtype pick_dtype(FuzzedDataProvider& in) {
  const torch::Dtype dtypes[] = {torch::kFloat,    torch::kFloat, torch::kDouble, torch::kHalf,
                                 torch::kBFloat16, torch::kLong,  torch::kBool,   torch::kInt};
  return dtypes[in.ConsumeIntegralInRange<int>(0, 7)];
}

// An input tensor: rank 1-4 (mostly 3), small dimensions, `width` as last dimension most of the
// time, sometimes non-contiguous, sometimes on the meta device, sometimes holding NaN.
torch::Tensor pick_input(FuzzedDataProvider& in, int64_t width, int64_t rank_default = 3) {
  const int64_t rank = in.ConsumeIntegralInRange<int>(0, 9) == 0
                           ? in.ConsumeIntegralInRange<int64_t>(1, 4)
                           : rank_default;
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < rank; ++d) {
    sizes.push_back(in.ConsumeIntegralInRange<int64_t>(0, 5));
  }
  if (in.ConsumeIntegralInRange<int>(0, 7) != 0 && width > 0 && width <= 64) {
    sizes.back() = width;
  }
  const auto dtype = pick_dtype(in);
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    return torch::empty(sizes, torch::TensorOptions().dtype(dtype).device(torch::kMeta));
  }
  auto x = torch::randn(sizes).mul(pick_double(in, {1.0, 1e30, 0.0}, -4, 4)).to(dtype);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0 && x.numel() > 0 && at::isFloatingType(dtype)) {
    x.view(-1)[0] = std::numeric_limits<double>::quiet_NaN();
  }
  if (rank >= 2 && in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    x = x.transpose(0, 1);
  }
  return x;
}

// Explicit positions for an input of leading dimensions (a, b) (or a rank mismatch).
torch::Tensor pick_positions(FuzzedDataProvider& in, const torch::Tensor& x, int64_t length_dim,
                             int64_t max_len) {
  std::vector<int64_t> sizes;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      sizes = {x.dim() > length_dim ? x.size(length_dim) : 1};
      break;
    case 1:
      sizes = {x.dim() > 0 ? x.size(0) : 1, x.dim() > 1 ? x.size(1) : 1};
      break;
    default:
      sizes = {in.ConsumeIntegralInRange<int64_t>(0, 4), in.ConsumeIntegralInRange<int64_t>(0, 4)};
      break;
  }
  const int64_t hi = in.ConsumeBool() ? max_len + 3 : int64_t{1} << 40;
  auto positions = torch::randint(-3, std::max<int64_t>(hi, 1), sizes, torch::kLong);
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: // integer-valued floats (negative ones are errors: floats have no padding value)
      positions = positions.to(torch::kFloat);
      break;
    case 1: // fractional positions: computed from the definition where the call has it
      positions = positions.to(torch::kDouble) + in.ConsumeProbability<double>();
      break;
    case 2: { // a NaN, an infinity or a value past 2^63 among fractional ones: an error
      positions = positions.to(torch::kDouble).abs_();
      const double bad[] = {std::nan(""), std::numeric_limits<double>::infinity(), 1e19};
      if (positions.numel() > 0) {
        positions.view({-1})[in.ConsumeIntegralInRange<int64_t>(0, positions.numel() - 1)] =
            bad[in.ConsumeIntegralInRange<int>(0, 2)];
      }
      break;
    }
    default:
      break;
  }
  return positions;
}

void check_result(const torch::Tensor& y, const torch::Tensor& x) {
  if (y.sizes() != x.sizes() || y.scalar_type() != x.scalar_type()) {
    abort(); // a wrong-shaped or wrong-typed result is a silent wrong answer
  }
}

double epsilon(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kHalf:
      return 0x1p-10;
    case torch::kBFloat16:
      return 0x1p-7;
    case torch::kFloat:
      return 0x1p-23;
    default:
      return 0x1p-52;
  }
}

// Differential check of a forward that succeeded with consecutive positions and no dropout: y must
// be x * scale + pe[offset : offset + L] computed independently in float64 (ATen ops on the
// module's own table) and rounded to x's dtype, to within a few units in the last place of the
// operands (posenc adds in float32 for reduced-precision inputs, then rounds once).
void check_values(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& table,
                  int64_t offset, bool batch_first, double scale) {
  const int64_t length = x.size(batch_first ? 1 : 0);
  if (x.is_meta() || offset > table.size(1) - length) {
    return; // no values, or positions extrapolated past the table
  }
  auto rows = table[0].slice(0, offset, offset + length).to(torch::kDouble);
  if (!batch_first) {
    rows = rows.unsqueeze(1);
  }
  const auto wide = x.to(torch::kDouble);
  const auto expected = (wide * scale + rows).to(x.scalar_type()).to(torch::kDouble);
  const auto got = y.to(torch::kDouble);
  const auto bound =
      (wide.abs() * std::abs(scale) + rows.abs()) * (4 * epsilon(x.scalar_type())) + 1e-300;
  const auto agree =
      ((got - expected).abs() <= bound) | (got == expected) | (got.isnan() & expected.isnan());
  if (!agree.all().item<bool>()) {
    const auto index = (~agree).flatten().nonzero()[0].item<int64_t>();
    std::cerr << "posenc_fuzzer: wrong value for x " << x.sizes() << " " << x.scalar_type()
              << " (strides " << x.strides() << "), table " << table.sizes() << " "
              << table.scalar_type() << ", offset " << offset << ", batch_first " << batch_first
              << ", scale " << scale << ": element " << index << " is "
              << got.flatten()[index].item<double>() << ", expected "
              << expected.flatten()[index].item<double>() << " (x "
              << wide.flatten()[index].item<double>() << ")\n";
    abort(); // a silent wrong value
  }
}

// The TorchScript export of an eval-mode module must compute the same values as the module (or
// fail: TorchScript's own errors are not c10::Errors, and are accepted here).
void check_export(const posenc::PositionalEncoding& pe, const torch::Tensor& x, int64_t offset,
                  const posenc::PositionalEncodingOptions& options) {
  torch::Tensor exported;
  try {
    exported = posenc::to_torchscript(pe).forward({x.clone(), offset}).toTensor();
  } catch (const std::exception&) {
    return;
  }
  check_result(exported, x);
  check_values(exported, x, pe->pe, offset, options.batch_first(), options.scale());
}

// Where the module rejected an offset, its TorchScript export must reject it too, with an error
// about the offset (offset + L can overflow int64 in the exported code as well, and a
// wrapped-around sum would slice an empty table and fail, if at all, later and elsewhere).
template <typename Module>
void check_export_rejects(Module& module, const torch::Tensor& x, int64_t offset,
                          const c10::Error& error) {
  const std::string message = error.what_without_backtrace();
  if (message.find("offset") == std::string::npos) {
    return;
  }
  try {
    module->forward(x, 0); // only inputs whose one problem is the offset: an input with several
  } catch (const c10::Error&) { // may be rejected for any of them first
    return;
  }
  std::string exported_message = "<no error>";
  try {
    posenc::to_torchscript(module).forward({x, offset});
  } catch (const std::exception& exported_error) {
    // The last line: TorchScript's traceback before it quotes the source, which names `offset`.
    exported_message = exported_error.what();
    while (!exported_message.empty() && exported_message.back() == '\n') {
      exported_message.pop_back();
    }
    exported_message = exported_message.substr(exported_message.rfind('\n') + 1);
    if (exported_message.find("offset") != std::string::npos) {
      return; // rejected for the same reason (an error elsewhere, e.g. a broadcast, is not)
    }
  }
  std::cerr << "posenc_fuzzer: the exported module did not reject offset " << offset
            << " for input " << x.sizes() << ", which the module rejects (" << message
            << "); it gave: " << exported_message << "\n";
  abort();
}

// Runs module(x, offset); with `check_export`, holds its TorchScript export to the same outcome:
// an error where the module rejects the offset, a result of the same shape and dtype otherwise.
// The export is also tried at the largest offset, where offset + L overflows int64 for every
// L >= 1: the module and the export must both reject it.
template <typename Module>
torch::Tensor forward_and_export(Module& module, const torch::Tensor& x, int64_t offset,
                                 bool check_export) {
  if (check_export && offset != std::numeric_limits<int64_t>::max()) {
    try {
      forward_and_export(module, x, std::numeric_limits<int64_t>::max(), true);
    } catch (const c10::Error&) {
    }
  }
  torch::Tensor y;
  try {
    y = module->forward(x, offset);
  } catch (const c10::Error& error) {
    if (check_export) {
      check_export_rejects(module, x, offset, error);
    }
    throw;
  }
  if (check_export) {
    torch::Tensor exported;
    try {
      exported = posenc::to_torchscript(module).forward({x, offset}).toTensor();
    } catch (const std::exception&) {
      return y; // TorchScript's own errors are not c10::Errors; a stricter export is allowed
    }
    if (exported.sizes() != y.sizes() || exported.scalar_type() != y.scalar_type()) {
      std::cerr << "posenc_fuzzer: the exported module returned " << exported.sizes() << " "
                << exported.scalar_type() << " where the module returned " << y.sizes() << " "
                << y.scalar_type() << " (offset " << offset << ")\n";
      abort();
    }
  }
  return y;
}

void fuzz_sinusoidal(FuzzedDataProvider& in) {
  posenc::PositionalEncodingOptions options(pick_size(in, 48), pick_size(in, 64));
  options
      .base(pick_double(in,
                        {10000.0, 0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")},
                        1e-3, 1e6))
      .dropout(pick_double(in, {0.0, 0.5, 1.0, -0.1, 1.5, std::nan("")}, 0, 1))
      .batch_first(in.ConsumeBool())
      .layout(in.ConsumeBool() ? posenc::ChannelLayout::kInterleaved
                               : posenc::ChannelLayout::kConcatenated)
      .spacing(in.ConsumeBool() ? posenc::FrequencySpacing::kPaper
                                : posenc::FrequencySpacing::kTensor2Tensor)
      .beyond_max_len(in.ConsumeBool() ? posenc::BeyondMaxLen::kError
                                       : posenc::BeyondMaxLen::kExtrapolate)
      .scale(
          pick_double(in, {1.0, 2.0, std::nan(""), std::numeric_limits<double>::infinity()}, -4, 4))
      .inplace(in.ConsumeIntegralInRange<int>(0, 3) == 0);
  posenc::PositionalEncoding pe(options);
  in.ConsumeBool() ? pe->train() : pe->eval();
  if (in.ConsumeBool()) {
    pe->to(in.ConsumeBool() ? torch::kDouble : torch::kBFloat16);
  }
  auto x = pick_input(in, options.d_model());
  const auto original = x.detach().clone();
  const bool with_grad = in.ConsumeIntegralInRange<int>(0, 3) == 0 && !x.is_meta() &&
                         at::isFloatingType(x.scalar_type());
  if (with_grad) {
    x.requires_grad_(true); // a leaf: in-place forwards must refuse it with a c10::Error
  }
  torch::Tensor y;
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: {
      const int64_t offset = pick_offset(in, 80);
      const bool export_check = in.ConsumeIntegralInRange<int>(0, 7) == 0 && !pe->is_training() &&
                                !with_grad && !options.inplace();
      y = forward_and_export(pe, x, offset, export_check);
      check_result(y, original);
      if (pe->is_training() && options.dropout() != 0.0) {
        return;
      }
      check_values(y.detach(), original, pe->pe, offset, options.batch_first(), options.scale());
      if (with_grad) {
        // d(x * scale + pe)/dx = scale, in x's dtype.
        y.sum().backward();
        if (!torch::equal(x.grad(), torch::full_like(original, options.scale()))) {
          std::cerr << "posenc_fuzzer: wrong gradient for x " << x.sizes() << " " << x.scalar_type()
                    << ", scale " << options.scale() << "\n";
          abort();
        }
      }
      if (export_check) {
        check_export(pe, original, offset, options);
      }
      return;
    }
    case 1:
      y = pe->forward_positions(
          x, pick_positions(in, x, options.batch_first() ? 1 : 0, options.max_len()));
      break;
    default:
      y = pe->forward_padded(
          x, torch::rand({x.dim() > 0 ? x.size(0) : 1, x.dim() > 1 ? x.size(1) : 1}) < 0.3);
      break;
  }
  check_result(y, original);
}

void fuzz_learned(FuzzedDataProvider& in) {
  posenc::LearnedPositionalEmbedding pos(
      posenc::LearnedPositionalEmbeddingOptions(pick_size(in, 32), pick_size(in, 32))
          .batch_first(in.ConsumeBool())
          .init_std(pick_double(in, {0.02, -1.0, std::nan("")}, 0, 1)));
  const auto x = pick_input(in, pos->options.d_model());
  const auto y = in.ConsumeBool()
                     ? pos(x, in.ConsumeIntegralInRange<int64_t>(-2, 40))
                     : pos->forward_positions(x, pick_positions(in, x, 1, pos->options.max_len()));
  check_result(y, x);
  if (x.requires_grad() || y.requires_grad()) {
    y.sum().backward();
  }
}

void fuzz_rope_scaling(FuzzedDataProvider& in);
void fuzz_hf_config(FuzzedDataProvider& in);
void fuzz_hf_config_text(const std::string& text);
void fuzz_qk_multimodal(FuzzedDataProvider& in);

void fuzz_rotary(FuzzedDataProvider& in) {
  posenc::RotaryEmbeddingOptions options(pick_size(in, 32), pick_size(in, 48));
  if (in.ConsumeBool()) {
    options.rotary_dim(in.ConsumeIntegralInRange<int64_t>(-2, 34));
  }
  options.base(pick_double(in, {10000.0, 0.0, std::nan("")}, 1, 1e6))
      .pairing(in.ConsumeBool() ? posenc::RotaryPairing::kHalfSplit
                                : posenc::RotaryPairing::kInterleaved)
      .heads_first(in.ConsumeBool())
      .beyond_max_len(in.ConsumeBool() ? posenc::BeyondMaxLen::kError
                                       : posenc::BeyondMaxLen::kExtrapolate);
  posenc::RotaryEmbedding rope(options);
  const auto x = pick_input(in, options.head_dim(), 4);
  const bool export_check = in.ConsumeIntegralInRange<int>(0, 7) == 0;
  const auto y =
      in.ConsumeBool()
          ? forward_and_export(rope, x, pick_offset(in, 60), export_check)
          : rope->forward_positions(
                x, pick_positions(in, x, options.heads_first() ? 2 : 1, options.max_len()));
  check_result(y, x);
  // Bytes left over (the seeds and regressions of the plain module end before): the scaling
  // variants, a config.json, or queries and keys in one call and multimodal tables.
  if (in.remaining_bytes() > 0) {
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
      case 0:
        fuzz_rope_scaling(in);
        break;
      case 1:
        fuzz_hf_config(in);
        break;
      default:
        fuzz_qk_multimodal(in);
        break;
    }
  }
}

std::vector<double> pick_factors(FuzzedDataProvider& in, int64_t count) {
  std::vector<double> factors(static_cast<size_t>(std::max<int64_t>(0, count)));
  for (double& factor : factors) {
    factor = pick_double(in, {1.0, 0.0, -1.0, std::nan(""), 1e308}, 0.01, 64.0);
  }
  return factors;
}

// RoPE scaling (every variant, its parameters and freq_factors; bytes left after fuzz_rotary):
// a module is built or rejected, and its forward is a finite result of the input's shape.
void fuzz_rope_scaling(FuzzedDataProvider& in) {
  const auto type = static_cast<posenc::RopeType>(in.ConsumeIntegralInRange<int>(0, 5));
  const int64_t head_dim = pick_size(in, 32);
  const int64_t max_len = pick_size(in, 64);
  posenc::RopeScalingOptions scaling(type);
  if (in.ConsumeBool()) {
    scaling.factor(pick_double(in, {1.0, 0.0, -2.0, std::nan(""), 1e300}, 0.01, 100.0));
  }
  if (in.ConsumeBool()) {
    scaling.max_position_embeddings(pick_size(in, 64));
  }
  if (in.ConsumeBool()) {
    scaling.original_max_position_embeddings(pick_size(in, 64));
  }
  scaling.beta_fast(pick_double(in, {32.0, 0.0, -1.0}, 0.01, 64.0))
      .beta_slow(pick_double(in, {1.0, 0.0, std::nan("")}, 0.01, 64.0))
      .truncate(in.ConsumeBool())
      .low_freq_factor(pick_double(in, {1.0, 0.0, 4.0}, 0.01, 8.0))
      .high_freq_factor(pick_double(in, {4.0, 1.0, 1e308}, 0.01, 8.0));
  if (in.ConsumeBool()) {
    scaling.mscale(pick_double(in, {0.707, 0.0, std::nan("")}, -4.0, 4.0))
        .mscale_all_dim(pick_double(in, {1.0, 0.0, -10.0}, -4.0, 4.0));
  }
  if (in.ConsumeBool()) {
    scaling.attention_factor(pick_double(in, {1.0, 0.0, 1e300}, 0.01, 4.0));
  }
  const int64_t half = std::max<int64_t>(0, std::min<int64_t>(head_dim, 64)) / 2;
  scaling.short_factor(pick_factors(in, half + in.ConsumeIntegralInRange<int>(-1, 1)))
      .long_factor(pick_factors(in, half + in.ConsumeIntegralInRange<int>(-1, 1)));
  posenc::RotaryEmbeddingOptions options(head_dim, max_len);
  options.base(pick_double(in, {10000.0, 1.0, 0.5}, 1.5, 1e6))
      .scaling(scaling)
      .attention_factor_in_cos_sin(in.ConsumeBool())
      .beyond_max_len(in.ConsumeBool() ? posenc::BeyondMaxLen::kError
                                       : posenc::BeyondMaxLen::kExtrapolate);
  if (in.ConsumeBool()) {
    options.freq_factors(pick_factors(in, half));
  }
  posenc::RotaryEmbedding rope(options);
  const auto x = pick_input(in, options.head_dim(), 4);
  const auto y = in.ConsumeBool()
                     ? rope(x, pick_offset(in, 100))
                     : rope->forward_positions(x, pick_positions(in, x, 1, options.max_len()));
  check_result(y, x);
}

// config.json text: read or rejected; what is read builds a module (small ones) or frequencies.
void fuzz_hf_config_text(const std::string& text) {
  const posenc::io::HfRopeConfig config = posenc::io::read_hf_rope_config(text);
  if (!config.rotary_layers.empty()) { // each layer read alone: rotates as the list says
    posenc::io::HfConfigReadOptions read;
    read.layer = static_cast<int64_t>(config.rotary_layers.size()) - 1;
    try {
      const posenc::io::HfRopeConfig last =
          posenc::io::read_hf_rope_config(text, "config.json", read);
      if (last.rotates != config.rotary_layers.back()) {
        std::abort();
      }
    } catch (const c10::Error&) { // (per-layer settings the last layer contradicts)
    }
  }
  const posenc::RotaryEmbeddingOptions& options = config.options;
  if (options.max_len() <= 256 && options.head_dim() <= 256) {
    posenc::RotaryEmbedding rope(options);
    const int64_t length = std::min<int64_t>(options.max_len(), 4);
    const auto x = torch::randn({1, length, 1, options.head_dim()});
    check_result(rope(x), x);
  } else {
    namespace F = posenc::functional;
    const auto table_options =
        F::RotaryTablesFuncOptions().base(options.base()).scaling(options.scaling());
    F::rotary_inv_freq(options.rotated_width(), table_options);
  }
}

// config.json bytes as they come.
void fuzz_hf_config(FuzzedDataProvider& in) {
  fuzz_hf_config_text(in.ConsumeRandomLengthString(2048));
}

// --- structure-aware config.json and rope_parameters -----------------------------------------

// A JSON value from the fuzzer's bytes: mostly what a config holds (numbers of every size, the
// rope types' names, lists of numbers), sometimes the wrong type, nested objects and arrays.
std::string json_value(FuzzedDataProvider& in, int depth);

std::string json_number(FuzzedDataProvider& in) {
  static const char* const specials[] = {"0",
                                         "1",
                                         "-1",
                                         "2",
                                         "0.5",
                                         "1e-300",
                                         "1e308",
                                         "-1e308",
                                         "9223372036854775807",
                                         "9223372036854775808",
                                         "-9223372036854775808",
                                         "4611686018427387904",
                                         "9007199254740993",
                                         "1e16",
                                         "131072",
                                         "500000.0",
                                         "32",
                                         "0.0",
                                         "-0.0",
                                         "3.5",
                                         "128"};
  if (in.ConsumeBool()) {
    return specials[in.ConsumeIntegralInRange<size_t>(0, std::size(specials) - 1)];
  }
  std::ostringstream text;
  text.precision(17);
  if (in.ConsumeBool()) {
    text << in.ConsumeIntegralInRange<int64_t>(-4, 70000);
  } else {
    text << in.ConsumeFloatingPointInRange<double>(-1e6, 1e6);
  }
  return text.str();
}

std::string json_string(FuzzedDataProvider& in) {
  static const char* const names[] = {
      "default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional", "mrope", "su",
      "", "YARN", "ntk",
      // model types with rules of their own (model_type_rules, mrope_rule, layers without rotary)
      "deepseek_v3", "deepseek_v32", "smollm3", "llama4_text", "glm4v_text", "qwen3_vl_text",
      "hunyuan_v1_dense", "nanochat", "full_attention", "sliding_attention"};
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0) {
    return std::string("\"") + names[in.ConsumeIntegralInRange<size_t>(0, std::size(names) - 1)] +
           "\"";
  }
  std::string text = "\"";
  for (const char c : in.ConsumeRandomLengthString(12)) {
    if (c >= 0x20 && c != '"' && c != '\\' && static_cast<unsigned char>(c) < 0x7f) {
      text += c;
    }
  }
  return text + "\"";
}

std::string json_object(FuzzedDataProvider& in, int depth, bool rope_block) {
  static const char* const config_keys[] = {"num_attention_heads",
                                            "num_key_value_heads",
                                            "head_dim",
                                            "hidden_size",
                                            "max_position_embeddings",
                                            "rope_theta",
                                            "partial_rotary_factor",
                                            "rope_scaling",
                                            "rope_parameters",
                                            "text_config",
                                            "original_max_position_embeddings",
                                            "model_type",
                                            "qk_rope_head_dim",
                                            "rope_interleave",
                                            "no_rope_layers",
                                            "no_rope_layer_interval",
                                            "num_hidden_layers",
                                            "layer_types"};
  static const char* const rope_keys[] = {"rope_type",
                                          "type",
                                          "factor",
                                          "original_max_position_embeddings",
                                          "beta_fast",
                                          "beta_slow",
                                          "mscale",
                                          "mscale_all_dim",
                                          "truncate",
                                          "attention_factor",
                                          "short_factor",
                                          "long_factor",
                                          "low_freq_factor",
                                          "high_freq_factor",
                                          "partial_rotary_factor",
                                          "rope_theta",
                                          "mrope_section",
                                          "mrope_interleaved",
                                          "max_position_embeddings",
                                          "full_attention"};
  std::string text = "{";
  const int count = in.ConsumeIntegralInRange<int>(0, rope_block ? 8 : 10);
  for (int i = 0; i < count && in.remaining_bytes() > 0; ++i) {
    std::string key;
    if (in.ConsumeIntegralInRange<int>(0, 9) == 0) {
      key = json_string(in);
    } else {
      key = std::string("\"") +
            (rope_block
                 ? rope_keys[in.ConsumeIntegralInRange<size_t>(0, std::size(rope_keys) - 1)]
                 : config_keys[in.ConsumeIntegralInRange<size_t>(0, std::size(config_keys) - 1)]) +
            "\"";
    }
    const bool nested_block =
        !rope_block &&
        (key == "\"rope_scaling\"" || key == "\"rope_parameters\"" || key == "\"text_config\"");
    std::string value;
    if (nested_block && depth < 3 && in.ConsumeIntegralInRange<int>(0, 4) != 0) {
      value = json_object(in, depth + 1, key != "\"text_config\"");
    } else {
      value = json_value(in, depth + 1);
    }
    text += (i == 0 ? "" : ",") + key + ":" + value;
  }
  return text + "}";
}

std::string json_value(FuzzedDataProvider& in, int depth) {
  switch (in.ConsumeIntegralInRange<int>(0, depth >= 3 ? 4 : 6)) {
    case 0:
      return "null";
    case 1:
      return in.ConsumeBool() ? "true" : "false";
    case 2:
      return json_string(in);
    case 5: {
      std::string text = "[";
      const int count = in.ConsumeIntegralInRange<int>(0, 70);
      for (int i = 0; i < count; ++i) {
        text += (i == 0 ? "" : ",") + (in.ConsumeIntegralInRange<int>(0, 15) == 0
                                           ? json_value(in, depth + 1)
                                           : json_number(in));
      }
      return text + "]";
    }
    case 6:
      return json_object(in, depth + 1, in.ConsumeBool());
    default:
      return json_number(in);
  }
}

// A config.json built key by key (known keys, values of every type and size, nested blocks):
// read or rejected by the reader; what is read builds a module or its frequencies; the rope
// block alone goes to the rope_frequencies operator as its rope_parameters.
void fuzz_config_json(FuzzedDataProvider& in) {
  const std::string config = json_object(in, 0, /*rope_block=*/false);
  try {
    fuzz_hf_config_text(config);
  } catch (const c10::Error&) {
  }
  // the operator's own JSON reader, through the dispatcher
  const std::string block = json_object(in, 1, /*rope_block=*/true);
  const int64_t rotary_dim = 2 * in.ConsumeIntegralInRange<int64_t>(1, 64);
  const c10::optional<int64_t> seq_len =
      in.ConsumeBool() ? c10::optional<int64_t>(in.ConsumeIntegral<int64_t>()) : c10::nullopt;
  const auto result = posenc_test::rope_frequencies_op().call(
      rotary_dim, 10000.0, block, c10::nullopt, seq_len, c10::nullopt, c10::nullopt, c10::nullopt);
  const at::Tensor& inv_freq = std::get<0>(result);
  if (inv_freq.numel() != rotary_dim / 2 || !inv_freq.isfinite().all().item<bool>() ||
      !(std::get<1>(result).item<double>() > 0.0)) {
    abort();
  }
}

// packed_positions, context_parallel_packed_positions and context_parallel_positions with
// cu_seqlens, totals, starts, world sizes and ranks anywhere in int64: positions that count from
// each sequence's start (shards of the batch), or an error.
void fuzz_positions(FuzzedDataProvider& in) {
  const auto extreme = [&]() -> int64_t {
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0:
        return std::numeric_limits<int64_t>::max() - in.ConsumeIntegralInRange<int64_t>(0, 3);
      case 1:
        return std::numeric_limits<int64_t>::min() + in.ConsumeIntegralInRange<int64_t>(0, 3);
      case 2:
        return in.ConsumeIntegral<int64_t>();
      default:
        return in.ConsumeIntegralInRange<int64_t>(-2, 12);
    }
  };
  const auto fuzzed_cu = [&] {
    std::vector<int64_t> cu(static_cast<size_t>(in.ConsumeIntegralInRange<int>(0, 6)));
    for (int64_t& entry : cu) {
      entry = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? extreme()
                                                        : in.ConsumeIntegralInRange<int64_t>(0, 12);
    }
    std::sort(cu.begin(), cu.end());
    if (!cu.empty() && in.ConsumeBool()) {
      cu[in.ConsumeIntegralInRange<size_t>(0, cu.size() - 1)] = extreme(); // maybe unsorted
    }
    return cu;
  };
  const int form = in.ConsumeIntegralInRange<int>(0, 2);
  if (form == 0) {
    const std::vector<int64_t> cu = fuzzed_cu();
    const int64_t total = in.ConsumeBool() ? (cu.empty() ? 0 : cu.back()) : extreme();
    c10::optional<at::Tensor> start;
    if (in.ConsumeBool()) {
      std::vector<int64_t> starts(cu.empty() ? 0 : cu.size() - 1);
      for (int64_t& s : starts) {
        s = extreme();
      }
      start = torch::tensor(starts, torch::kLong);
    }
    const at::Tensor positions =
        posenc::ops::packed_positions(torch::tensor(cu, torch::kLong), total, start);
    if (positions.dim() != 1 || positions.size(0) != total) {
      abort();
    }
    // each sequence counts up by one from its start
    for (size_t s = 0; s + 1 < cu.size() && total <= 4096; ++s) {
      for (int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        const int64_t expected =
            (start ? (*start)[static_cast<int64_t>(s)].item<int64_t>() : 0) + (t - cu[s]);
        if (positions[t].item<int64_t>() != expected) {
          abort();
        }
      }
    }
  } else if (form == 1) { // (small world sizes too, so that valid splits are reached)
    const std::vector<int64_t> cu = fuzzed_cu();
    const int64_t total = in.ConsumeBool() ? (cu.empty() ? 0 : cu.back()) : extreme();
    const int64_t world_size =
        in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 4) : extreme();
    const int64_t rank = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 3) : extreme();
    const bool zigzag = in.ConsumeBool();
    const auto [positions, indices] = posenc::ops::context_parallel_packed_positions(
        torch::tensor(cu, torch::kLong), total, world_size, rank, zigzag);
    if (positions.dim() != 1 || indices.sizes() != positions.sizes() ||
        positions.numel() * world_size != total) {
      abort();
    }
    // sequence by sequence, the shard of a whole sequence of that length, at its place in the batch
    int64_t first = 0;
    for (size_t s = 0; s + 1 < cu.size() && total <= 4096; ++s) {
      const at::Tensor own =
          posenc::ops::context_parallel_positions(cu[s + 1] - cu[s], world_size, rank, zigzag);
      if (!torch::equal(positions.narrow(0, first, own.numel()), own) ||
          !torch::equal(indices.narrow(0, first, own.numel()), own + cu[s])) {
        abort();
      }
      first += own.numel();
    }
  } else {
    const int64_t seq_len = extreme();
    const int64_t world_size = extreme();
    const int64_t rank = extreme();
    const bool zigzag = in.ConsumeBool();
    const at::Tensor positions =
        posenc::ops::context_parallel_positions(seq_len, world_size, rank, zigzag);
    if (positions.dim() != 1 || positions.numel() * world_size != seq_len ||
        (positions.numel() > 0 &&
         (positions.min().item<int64_t>() < 0 || positions.max().item<int64_t>() >= seq_len))) {
      abort();
    }
  }
}

bool same_bits(const torch::Tensor& a, const torch::Tensor& b);

// apply_rotary_qk(_) with independent q and k shapes (heads, widths, batch, length, dtype: most
// combinations invalid), then multimodal_rotary_tables with fuzzed sections and positions.
void fuzz_qk_multimodal(FuzzedDataProvider& in) {
  namespace F = posenc::functional;
  const int64_t half = in.ConsumeIntegralInRange<int64_t>(1, 8);
  const auto tables = F::rotary_tables(in.ConsumeIntegralInRange<int64_t>(1, 40), 2 * half);
  auto q = pick_input(in, in.ConsumeIntegralInRange<int64_t>(0, 20), 4);
  auto k = pick_input(in, in.ConsumeIntegralInRange<int64_t>(0, 20), 4);
  const int64_t offset = pick_offset(in, 60);
  const bool interleaved = in.ConsumeBool();
  const bool heads_first = in.ConsumeBool();
  try {
    if (in.ConsumeBool()) {
      const auto out = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, offset,
                                                    c10::nullopt, interleaved, heads_first);
      check_result(std::get<0>(out), q);
      check_result(std::get<1>(out), k);
    } else {
      const auto q_before = q.clone();
      const auto k_before = k.clone();
      try {
        posenc::ops::apply_rotary_qk_(q, k, tables.first, tables.second, offset, c10::nullopt,
                                      interleaved, heads_first);
      } catch (const c10::Error&) {
        // bitwise: a NaN in q or k is unchanged too (torch::equal would call it different)
        if (!same_bits(q, q_before) || !same_bits(k, k_before)) {
          abort(); // a refused call must not have written anything
        }
        throw;
      }
    }
  } catch (const c10::Error&) {
  }
  std::vector<int64_t> section;
  const int count = in.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < count; ++i) {
    section.push_back(in.ConsumeIntegralInRange<int64_t>(-1, 8));
  }
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int64_t length = in.ConsumeIntegralInRange<int64_t>(0, 4);
  std::vector<int64_t> values;
  for (int64_t i = 0; i < 3 * batch * length; ++i) {
    values.push_back(in.ConsumeIntegralInRange<int64_t>(-2, 50));
  }
  const auto positions = torch::tensor(values, torch::kLong).view({3, batch, length});
  const auto rows = F::multimodal_rotary_tables(tables.first, tables.second, positions, section,
                                                in.ConsumeBool());
  if (rows.first.sizes() != at::IntArrayRef({batch, length, half})) {
    abort();
  }
}

void fuzz_token(FuzzedDataProvider& in) {
  posenc::TokenAndPositionEmbeddingOptions options(pick_size(in, 40), pick_size(in, 32),
                                                   pick_size(in, 32));
  options
      .positions(in.ConsumeBool() ? posenc::PositionKind::kSinusoidal
                                  : posenc::PositionKind::kLearned)
      .dropout(pick_double(in, {0.0, 0.3, 1.0}, 0, 1))
      .batch_first(in.ConsumeBool())
      .beyond_max_len(in.ConsumeBool() ? posenc::BeyondMaxLen::kError
                                       : posenc::BeyondMaxLen::kExtrapolate);
  if (in.ConsumeBool()) {
    options.padding_idx(in.ConsumeIntegralInRange<int64_t>(-1, 41));
  }
  posenc::TokenAndPositionEmbedding embed(options);
  in.ConsumeBool() ? embed->train() : embed->eval();
  const int64_t vocab = options.vocab_size();
  auto ids = torch::randint(
      -2, std::max<int64_t>(vocab + 2, 1),
      {in.ConsumeIntegralInRange<int64_t>(0, 4), in.ConsumeIntegralInRange<int64_t>(0, 6)},
      torch::kLong);
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    ids = ids.clamp(0, std::max<int64_t>(vocab - 1, 0));
  }
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    ids = ids.to(torch::kFloat);
  }
  const bool export_check = in.ConsumeIntegralInRange<int>(0, 7) == 0 && !embed->is_training();
  const auto y = forward_and_export(embed, ids, pick_offset(in, 40), export_check);
  if (y.dim() != 3 || y.size(2) != options.d_model()) {
    abort();
  }
}

// The encoding's definition as data, for positions past a table: none, the real column plan of a
// sinusoid of `width`, or a malformed one (wrong shape, dtype, or kinds).
c10::optional<torch::Tensor> pick_columns(FuzzedDataProvider& in, int64_t width) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
    case 1:
      return width >= 1
                 ? c10::optional<torch::Tensor>(posenc::functional::sinusoidal_columns(width))
                 : c10::nullopt;
    case 2:
      return torch::randn({2, width + in.ConsumeIntegralInRange<int64_t>(0, 1)}, torch::kDouble);
    case 3:
      return torch::zeros({2, width});
    default:
      return c10::nullopt;
  }
}

// Moves `t` to the meta device now and then: every kernel must then reject the mixed call.
torch::Tensor maybe_meta(FuzzedDataProvider& in, const torch::Tensor& t, bool& moved) {
  if (in.ConsumeIntegralInRange<int>(0, 11) != 0) {
    return t;
  }
  moved = true;
  return t.to(torch::Device(torch::kMeta));
}

// True when the defined tensors of a call lie on more than one device.
bool mixed_devices(std::initializer_list<c10::optional<torch::Tensor>> tensors) {
  c10::optional<torch::Device> device;
  for (const auto& t : tensors) {
    if (!t || !t->defined()) {
      continue;
    }
    if (device && *device != t->device()) {
      return true;
    }
    device = t->device();
  }
  return false;
}

// Bitwise equality (NaN included) of two tensors of one shape and dtype.
bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.is_meta()) {
    return true;
  }
  const auto ca = a.contiguous();
  const auto cb = b.contiguous();
  if (ca.nbytes() == 0) {
    return cb.nbytes() == 0; // an empty tensor's data pointer may be null
  }
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// A tensor of `like`'s shape and dtype on the memory of `input` (its start or its end, so that the
// overlap is full or partial), or an undefined tensor where none fits: the target of an in-place or
// out= call that shares memory with one of the call's inputs. posenc must then raise (it rejects
// any overlap between what it writes and what it reads), as ATen's assert_no_overlap does.
torch::Tensor view_of(FuzzedDataProvider& in, const c10::optional<torch::Tensor>& input,
                      const torch::Tensor& like) {
  if (!input || !input->defined() || input->is_meta() || like.is_meta() || like.numel() == 0 ||
      !input->is_contiguous() || !at::isFloatingType(like.scalar_type())) {
    return {};
  }
  try {
    const auto flat = input->view(like.scalar_type()).reshape(-1);
    if (flat.numel() < like.numel()) {
      return {};
    }
    const int64_t start = in.ConsumeBool() ? 0 : flat.numel() - like.numel();
    return flat.narrow(0, start, like.numel()).view(like.sizes());
  } catch (const c10::Error&) {
    return {};
  }
}

// How an in-place target relates to autograd: a plain tensor, a leaf that requires grad, or a view
// of one. Autograd forbids writing the last two in place: posenc must raise before writing.
torch::Tensor pick_grad_target(FuzzedDataProvider& in, const torch::Tensor& x, bool& forbidden) {
  const int kind = in.ConsumeIntegralInRange<int>(0, 5);
  if (kind > 1 || x.is_meta() || !at::isFloatingType(x.scalar_type())) {
    return x;
  }
  forbidden = true;
  auto leaf = x.detach().clone().requires_grad_(true);
  return kind == 0 ? leaf : leaf.view(x.sizes());
}

// A call rejected in place must leave its target as it was; one that had to be rejected (mixed
// devices, an aliased or autograd-forbidden target) must not return.
template <typename F>
void run_inplace(torch::Tensor& target, bool must_raise, F&& call) {
  const auto before = target.detach().clone();
  try {
    call();
  } catch (const c10::Error&) {
    if (!same_bits(target.detach(), before)) {
      abort(); // a rejected in-place call changed its target
    }
    throw;
  }
  if (must_raise) {
    abort(); // an in-place call that had to be rejected returned
  }
}

void fuzz_ops(FuzzedDataProvider& in) {
  const int64_t width = in.ConsumeIntegralInRange<int64_t>(0, 16);
  bool mixed = false; // the arguments of the call lie on two devices
  auto table = maybe_meta(
      in,
      torch::randn({in.ConsumeIntegralInRange<int64_t>(0, 20),
                    in.ConsumeBool() ? width : in.ConsumeIntegralInRange<int64_t>(0, 16)})
          .to(pick_dtype(in)),
      mixed);
  const auto x = pick_input(in, width);
  c10::optional<torch::Tensor> positions =
      in.ConsumeBool() ? c10::optional<torch::Tensor>(
                             pick_positions(in, x, 1, table.dim() > 0 ? table.size(0) + 4 : 0))
                       : c10::nullopt;
  if (positions) {
    positions = maybe_meta(in, *positions, mixed);
  }
  auto columns = pick_columns(in, table.dim() == 2 ? table.size(1) : width);
  if (columns) {
    columns = maybe_meta(in, *columns, mixed);
  }
  const int64_t offset = pick_offset(in, 25);
  const bool batch_first = in.ConsumeBool();
  const double scale = pick_double(in, {1.0, std::nan("")}, -3, 3);
  const int which = in.ConsumeIntegralInRange<int>(0, 5);
  try {
    switch (which) {
      case 0:
        mixed = mixed_devices({x, table, positions, columns});
        check_result(posenc::ops::add_position_table(x, table, offset, batch_first, positions,
                                                     scale, columns),
                     x);
        break;
      case 1: {
        bool forbidden = false;
        auto target = in.ConsumeIntegralInRange<int>(0, 3) == 0
                          ? view_of(in,
                                    in.ConsumeBool()   ? c10::optional<torch::Tensor>(table)
                                    : in.ConsumeBool() ? positions
                                                       : columns,
                                    x)
                          : torch::Tensor();
        forbidden = target.defined();
        if (!target.defined()) {
          target = pick_grad_target(in, x.clone(), forbidden);
          if (table.defined() && in.ConsumeIntegralInRange<int>(0, 7) == 0 && !table.is_meta() &&
              at::isFloatingType(table.scalar_type())) {
            table.requires_grad_(true); // the in-place result then joins the graph
          }
        }
        mixed = mixed_devices({target, table, positions, columns});
        run_inplace(target, forbidden || mixed, [&] {
          posenc::ops::add_position_table_(target, table, offset, batch_first, positions, scale,
                                           columns);
        });
        break;
      }
      case 2: {
        auto out = in.ConsumeBool() ? torch::empty_like(x) : torch::empty({0}, x.options());
        out = maybe_meta(in, out, mixed);
        const auto alias =
            view_of(in, in.ConsumeBool() ? c10::optional<torch::Tensor>(table) : positions, x);
        const bool aliased = alias.defined() && in.ConsumeBool();
        if (aliased) {
          out = alias;
        }
        mixed = mixed_devices({x, table, positions, columns, out});
        posenc::ops::add_position_table_out(out, x, table, offset, batch_first, positions, scale,
                                            columns);
        if (aliased) {
          abort(); // an out= call writing into one of its inputs returned
        }
        check_result(out, x);
        break;
      }
      case 3:
        mixed = mixed_devices({x, positions});
        check_result(
            posenc::ops::add_positional_encoding(x, offset, pick_double(in, {10000.0, 0.0}, 1, 1e5),
                                                 batch_first, positions, scale),
            x);
        break;
      case 4: {
        const auto cos = maybe_meta(in,
                                    torch::randn({in.ConsumeIntegralInRange<int64_t>(0, 20),
                                                  in.ConsumeIntegralInRange<int64_t>(0, 5)}),
                                    mixed);
        const auto sin =
            in.ConsumeBool() ? torch::randn(cos.sizes(), cos.options()) : torch::randn({2, 2});
        auto inv_freq =
            in.ConsumeBool() && cos.dim() == 2 && cos.size(1) >= 1
                ? c10::optional<torch::Tensor>(posenc::functional::rotary_inv_freq(2 * cos.size(1)))
                : c10::nullopt;
        if (inv_freq) {
          inv_freq = maybe_meta(in, *inv_freq, mixed);
        }
        const auto q = pick_input(in, 2 * (cos.dim() == 2 ? cos.size(1) : 0), 4);
        const bool interleaved = in.ConsumeBool();
        const bool heads_first = in.ConsumeBool();
        const bool inverse = in.ConsumeBool();
        const double factor = pick_double(in, {1.0, 0.0, 1e300}, 0.5, 2);
        if (in.ConsumeBool()) {
          mixed = mixed_devices({q, cos, sin, positions, inv_freq});
          check_result(posenc::ops::apply_rotary(q, cos, sin, offset, positions, interleaved,
                                                 heads_first, inverse, inv_freq, factor),
                       q);
          break;
        }
        // In place: the target may alias cos, sin or positions, or be forbidden by autograd.
        bool forbidden = false;
        auto target = in.ConsumeIntegralInRange<int>(0, 3) == 0
                          ? view_of(in,
                                    in.ConsumeBool()   ? c10::optional<torch::Tensor>(cos)
                                    : in.ConsumeBool() ? c10::optional<torch::Tensor>(sin)
                                                       : positions,
                                    q)
                          : torch::Tensor();
        forbidden = target.defined();
        if (!target.defined()) {
          target = pick_grad_target(in, q.clone(), forbidden);
        }
        mixed = mixed_devices({target, cos, sin, positions, inv_freq});
        run_inplace(target, forbidden || mixed, [&] {
          posenc::ops::apply_rotary_(target, cos, sin, offset, positions, interleaved, heads_first,
                                     inverse, inv_freq, factor);
        });
        break;
      }
      default: {
        const auto weight = maybe_meta(
            in, torch::randn({in.ConsumeIntegralInRange<int64_t>(0, 10), width}).to(pick_dtype(in)),
            mixed);
        const auto ids = torch::randint(
            -1, 11,
            {in.ConsumeIntegralInRange<int64_t>(0, 3), in.ConsumeIntegralInRange<int64_t>(0, 5)},
            torch::kLong);
        mixed = mixed_devices({ids, weight, table, positions, columns});
        posenc::ops::token_and_position_embedding(
            ids, weight, table, offset, batch_first, positions, scale,
            in.ConsumeIntegralInRange<int64_t>(-1, 10), pick_double(in, {0.0, 0.5, 1.0, 2.0}, 0, 1),
            in.ConsumeBool(), columns);
        break;
      }
    }
  } catch (const c10::Error&) {
    return;
  }
  if (mixed) {
    abort(); // a call with arguments on two devices returned instead of raising
  }
}

// posenc::load_state_dict of `bytes` into a PositionalEncoding whose table has `shape`: a load
// that fails must leave the module exactly as it was; one that succeeds, a finite table.
void load_into_module(const std::string& bytes, const std::vector<int64_t>& shape, bool strict) {
  static const std::string path = "/tmp/posenc_fuzzer_" + std::to_string(::getpid()) + ".pt";
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  posenc::PositionalEncoding pe(shape[2], shape[1]);
  const auto before = pe->pe.clone();
  try {
    posenc::load_state_dict(*pe, path, posenc::LoadStateDictOptions().strict(strict));
  } catch (const c10::Error&) {
    if (!torch::equal(pe->pe, before)) {
      abort(); // a failed load changed the module
    }
    return;
  }
  if (pe->pe.sizes() != before.sizes() || !pe->pe.isfinite().all().item<bool>()) {
    abort();
  }
}

// The rest of the input as a pickle inside a well-formed archive (with a storage record), or as a
// raw file: posenc's reader of Python checkpoints.
void fuzz_reader(FuzzedDataProvider& in) {
  // One byte decides: a raw file (v % 4 == 0), and whether a file that reads is then loaded into
  // a module with posenc::load_state_dict (v >= 4; strict when v % 4 == 1).
  const int choice = in.ConsumeIntegralInRange<int>(0, 7);
  const bool raw = choice % 4 == 0;
  const std::string storage = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(0, 64));
  const std::string pickle = in.ConsumeRemainingBytesAsString();
  std::string bytes;
  if (raw) {
    bytes = pickle;
  } else {
    std::ostringstream buffer;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      buffer.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeRecord("data/0", storage.data(), storage.size());
    writer.writeEndOfFile();
    bytes = buffer.str();
  }
  std::istringstream stream(bytes);
  const auto entries = posenc::detail::read_torch_save_state_dict(stream, "fuzz");
  std::vector<int64_t> shape = {1, 4, 4};
  for (const auto& entry : entries) {
    if (!entry.second.defined()) {
      abort();
    }
    (void)entry.second.sum(); // the rebuilt tensor's memory must be readable in full
    if (entry.second.dim() == 3 && entry.second.size(0) == 1 && entry.second.numel() > 0 &&
        entry.second.numel() <= 4096) {
      shape = entry.second.sizes().vec(); // a table a module could take
    }
  }
  if (choice >= 4) {
    load_into_module(bytes, shape, choice % 4 == 1);
  }
}

// Every byte of a tensor's memory, so that the sanitizers see a tensor that is not fully backed.
unsigned read_all_bytes(const torch::Tensor& tensor) {
  const auto* bytes = static_cast<const unsigned char*>(tensor.data_ptr());
  unsigned sum = 0;
  for (size_t i = 0; i < tensor.nbytes(); ++i) {
    sum += bytes[i];
  }
  return sum;
}

bool same_tensor_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

// The rest of the input as a safetensors file. read_safetensors must return CPU, contiguous,
// fully readable tensors that write_safetensors writes and read_safetensors reads back bit for bit,
// or throw c10::Error; load_safetensors into a LearnedPositionalEmbedding (weight [3, 2] float32,
// the shape of the seeds) must, when it throws, leave the module bit for bit as it was.
void fuzz_safetensors(FuzzedDataProvider& in) {
  const bool strict = in.ConsumeBool();
  const std::string bytes = in.ConsumeRemainingBytesAsString();
  posenc::SafetensorsFile file;
  bool read = false;
  try {
    std::istringstream stream(bytes);
    file = posenc::read_safetensors(stream, "fuzz");
    read = true;
  } catch (const c10::Error&) {
    // A clear error; the load below must fail too, leaving the module unchanged.
  }
  if (read) {
    for (const auto& item : file.tensors) {
      const torch::Tensor& tensor = item.value();
      if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous()) {
        abort();
      }
      (void)read_all_bytes(tensor);
    }
    try {
      std::ostringstream written;
      posenc::write_safetensors(written, file.tensors, file.metadata);
      std::istringstream again(written.str());
      const posenc::SafetensorsFile reread = posenc::read_safetensors(again, "fuzz (again)");
      if (reread.metadata != file.metadata || reread.tensors.size() != file.tensors.size()) {
        abort(); // a file read, written and read again changed
      }
      for (const auto& item : file.tensors) {
        const torch::Tensor* other = reread.tensors.find(item.key());
        if (other == nullptr || !same_tensor_bits(*other, item.value())) {
          abort();
        }
      }
    } catch (const c10::Error&) {
      abort(); // what read_safetensors returned, write_safetensors must write
    }
  }
  posenc::LearnedPositionalEmbedding module(2, 3);
  const torch::Tensor before = module->weight.detach().clone();
  try {
    std::istringstream stream(bytes);
    posenc::load_safetensors(*module, stream, posenc::LoadStateDictOptions().strict(strict),
                             "fuzz");
  } catch (const c10::Error&) {
    if (!same_tensor_bits(module->weight.detach(), before)) {
      abort(); // a failed load changed the module
    }
    return;
  }
  if (!read || module->weight.sizes() != before.sizes() ||
      !module->weight.isfinite().all().item<bool>()) {
    abort(); // a file that does not read loaded, or a load gave a wrong or non-finite weight
  }
}

// Attention biases and relative encodings: slopes, both ALiBi forms (masks of any shape and
// dtype), T5's buckets (any int64 value must land in a bucket) and bias, the relative table,
// rel_shift, and the Conformer modules with streaming offsets. Lengths stay small (a valid
// request for a huge bias is the allocator's to refuse); offsets and values range over int64.
int64_t pick_length(FuzzedDataProvider& in) {
  return in.ConsumeIntegralInRange<int64_t>(-2, 24);
}

void fuzz_attention_bias(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: {
      const int64_t heads = in.ConsumeIntegralInRange<int64_t>(-2, 70);
      const double max_bias = pick_double(in, {8.0, 0.0, -1.0, NAN, INFINITY, 1e300}, -20, 20);
      const int64_t first = in.ConsumeIntegralInRange<int64_t>(-2, 72);
      const c10::optional<int64_t> count =
          in.ConsumeBool() ? c10::optional<int64_t>(in.ConsumeIntegralInRange<int64_t>(-2, 72))
                           : c10::nullopt;
      const torch::Tensor slopes = posenc::functional::alibi_slopes(heads, max_bias, first, count);
      if (slopes.dim() != 1 || !(slopes > 0).all().item<bool>() ||
          !slopes.isfinite().all().item<bool>()) {
        abort(); // slopes are positive finite numbers
      }
      break;
    }
    case 1: {
      const int64_t heads = in.ConsumeIntegralInRange<int64_t>(0, 6);
      std::vector<int64_t> shape = {heads};
      if (in.ConsumeBool()) {
        shape.insert(shape.begin(), in.ConsumeIntegralInRange<int64_t>(0, 3));
      }
      torch::Tensor slopes = torch::rand(shape).to(pick_dtype(in));
      const int64_t queries = pick_length(in);
      const int64_t keys = pick_length(in);
      const c10::optional<int64_t> offset =
          in.ConsumeBool() ? c10::optional<int64_t>(pick_offset(in, 30)) : c10::nullopt;
      if (in.ConsumeBool()) {
        const torch::Tensor bias =
            posenc::functional::alibi_bias(slopes, queries, keys, offset, in.ConsumeBool());
        if (bias.size(-1) != keys || bias.size(-2) != queries || bias.isnan().any().item<bool>()) {
          abort();
        }
      } else {
        torch::Tensor mask;
        if (in.ConsumeBool()) {
          mask = torch::randint(2, {in.ConsumeIntegralInRange<int64_t>(0, 3),
                                    in.ConsumeIntegralInRange<int64_t>(0, 24)})
                     .to(pick_dtype(in));
        }
        const torch::Tensor bias = posenc::functional::alibi_causal_bias(slopes, keys, mask);
        if (bias.size(-1) != keys || bias.size(-2) != 1) {
          abort();
        }
      }
      break;
    }
    case 2: {
      const bool bidirectional = in.ConsumeBool();
      const int64_t buckets = in.ConsumeIntegralInRange<int64_t>(-1, 130);
      const int64_t distance = pick_offset(in, 2000);
      std::vector<int64_t> values;
      const int64_t count = in.ConsumeIntegralInRange<int64_t>(0, 16);
      for (int64_t i = 0; i < count; ++i) {
        values.push_back(in.ConsumeIntegral<int64_t>());
      }
      torch::Tensor relative = torch::tensor(values, torch::kLong);
      if (in.ConsumeBool()) {
        relative = relative.to(pick_dtype(in));
      }
      const torch::Tensor result =
          posenc::functional::relative_position_bucket(relative, bidirectional, buckets, distance);
      if (result.numel() > 0 &&
          (result.min().item<int64_t>() < 0 || result.max().item<int64_t>() >= buckets)) {
        abort(); // every relative position lands in a bucket
      }
      break;
    }
    case 3: {
      const torch::Tensor weight = torch::randn({in.ConsumeIntegralInRange<int64_t>(0, 40),
                                                 in.ConsumeIntegralInRange<int64_t>(0, 4)})
                                       .to(pick_dtype(in));
      const int64_t queries = pick_length(in);
      const int64_t keys = pick_length(in);
      const torch::Tensor bias = posenc::functional::relative_position_bias(
          weight, queries, keys, in.ConsumeBool(), pick_offset(in, 200), pick_offset(in, 30));
      if (bias.size(-1) != keys || bias.size(-2) != queries) {
        abort();
      }
      break;
    }
    case 4: {
      const int64_t length = pick_length(in);
      const int64_t width = in.ConsumeIntegralInRange<int64_t>(-1, 16);
      const c10::optional<int64_t> keys =
          in.ConsumeBool() ? c10::optional<int64_t>(pick_offset(in, 30)) : c10::nullopt;
      const torch::Tensor table = posenc::functional::relative_sinusoidal_table(
          length, width, keys, pick_double(in, {10000.0, 0.0, -1.0, NAN}, 0.5, 1e6));
      if (table.size(0) != length + keys.value_or(length) - 1 ||
          !table.isfinite().all().item<bool>()) {
        abort();
      }
      std::vector<int64_t> shape;
      const int rank = in.ConsumeIntegralInRange<int>(0, 4);
      for (int i = 0; i < rank; ++i) {
        shape.push_back(in.ConsumeIntegralInRange<int64_t>(0, 9));
      }
      const torch::Tensor scores = torch::randn(shape);
      const torch::Tensor shifted = posenc::functional::rel_shift(scores);
      if (shifted.size(-2) != scores.size(-2)) {
        abort();
      }
      break;
    }
    default: {
      const int64_t width = in.ConsumeIntegralInRange<int64_t>(1, 4) * 4;
      posenc::RelPositionalEncoding pos(posenc::RelPositionalEncodingOptions(width)
                                            .max_len(in.ConsumeIntegralInRange<int64_t>(1, 20))
                                            .legacy(in.ConsumeBool()));
      posenc::RelPositionMultiheadAttention attn(
          width, in.ConsumeIntegralInRange<int64_t>(1, 4) == 3 ? 4 : 2);
      const torch::Tensor x = pick_input(in, width);
      const int64_t offset = pick_offset(in, 20);
      const torch::Tensor before = pos->pe.clone();
      try {
        auto [scaled, pos_emb] = pos->forward(x, offset);
        if (!pos->options.legacy() && offset == 0) {
          (void)attn(scaled, scaled, scaled, pos_emb);
        }
      } catch (const c10::Error&) {
        if (!torch::equal(pos->pe, before)) {
          abort(); // a rejected call changed the module
        }
        throw;
      }
      break;
    }
  }
}
// Vision and diffusion: timestep embeddings, 2-D tables and axial RoPE with fuzzed arguments;
// whatever is returned has the promised shape and finite values.
void fuzz_vision(FuzzedDataProvider& in) {
  namespace F = posenc::functional;
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 5: {
      const int64_t dim = in.ConsumeIntegralInRange<int64_t>(-16, 48);
      std::vector<int64_t> spatial(static_cast<size_t>(in.ConsumeIntegralInRange<int>(0, 3)));
      for (auto& size : spatial) {
        size = in.ConsumeIntegralInRange<int64_t>(-1, 5);
      }
      const int64_t frames = in.ConsumeIntegralInRange<int64_t>(-1, 4);
      const torch::Tensor table = F::sincos_3d_table(
          posenc::Sincos3dTableOptions(dim, spatial, frames)
              .spatial_interpolation_scale(pick_double(in, {1.0, 0.0, -1.0, NAN, 1e-300}, 0.1, 4))
              .temporal_interpolation_scale(pick_double(in, {1.0, 0.0, INFINITY, 1e-300}, 0.1, 4)));
      if (table.size(0) != frames || table.size(1) != spatial.front() * spatial.back() ||
          table.size(2) != dim || !table.isfinite().all().item<bool>()) {
        abort();
      }
      break;
    }
    case 6: {
      const int64_t prefix = in.ConsumeIntegralInRange<int64_t>(-1, 3);
      const torch::Tensor posemb = pick_input(in, in.ConsumeIntegralInRange<int64_t>(0, 6));
      std::vector<int64_t> old_size;
      if (in.ConsumeBool()) {
        old_size = {in.ConsumeIntegralInRange<int64_t>(-1, 5),
                    in.ConsumeIntegralInRange<int64_t>(-1, 5)};
      }
      std::vector<int64_t> new_size(static_cast<size_t>(in.ConsumeIntegralInRange<int>(0, 3)));
      for (auto& size : new_size) {
        size = in.ConsumeIntegralInRange<int64_t>(-1, 6);
      }
      const torch::Tensor out = F::crop_position_table(
          posemb,
          posenc::CropPositionTableOptions(new_size).old_size(old_size).num_prefix_tokens(prefix));
      if (out.size(-2) != prefix + new_size.front() * new_size.back() ||
          out.dim() != posemb.dim() ||
          !same_bits(out.narrow(-2, 0, prefix), posemb.narrow(-2, 0, prefix))) {
        abort();
      }
      break;
    }
    case 7: {
      const posenc::GridIndexing indexings[] = {posenc::GridIndexing::kIJ,
                                                posenc::GridIndexing::kXY};
      std::vector<int64_t> ref;
      if (in.ConsumeBool()) {
        ref = {in.ConsumeIntegralInRange<int64_t>(-1, 6),
               in.ConsumeIntegralInRange<int64_t>(-1, 6)};
      }
      const auto options =
          posenc::VisionRotaryEmbeddingOptions(in.ConsumeIntegralInRange<int64_t>(-4, 24))
              .temperature(pick_double(in, {10000.0, 0.0, -1.0, NAN}, 1, 1e5))
              .ref_feat_shape(ref)
              .grid_offset(pick_double(in, {0.0, 0.5, INFINITY, NAN}, -2, 2))
              .grid_indexing(indexings[in.ConsumeIntegralInRange<int>(0, 1)])
              .pairing(in.ConsumeBool() ? posenc::RotaryPairing::kInterleaved
                                        : posenc::RotaryPairing::kHalfSplit)
              .num_prefix_tokens(in.ConsumeIntegralInRange<int64_t>(-1, 2))
              .heads_first(in.ConsumeBool());
      std::vector<int64_t> grid(static_cast<size_t>(in.ConsumeIntegralInRange<int>(0, 3)));
      for (auto& size : grid) {
        size = in.ConsumeIntegralInRange<int64_t>(-1, 4);
      }
      posenc::VisionRotaryEmbedding rope(options);
      torch::Tensor x =
          pick_input(in, in.ConsumeIntegralInRange<int64_t>(0, 24), /*rank_default=*/4);
      if (grid.size() == 2 && grid[0] >= 0 && grid[1] >= 0 && options.num_prefix_tokens() >= 0 &&
          x.dim() == 4 && in.ConsumeBool()) {
        // the token count of the grid, along the layout's token dimension
        std::vector<int64_t> sizes = x.sizes().vec();
        sizes[options.heads_first() ? 2 : 1] = options.num_prefix_tokens() + grid[0] * grid[1];
        x = torch::randn(sizes).to(x.scalar_type());
      }
      const torch::Tensor y = rope(x, grid);
      if (y.sizes() != x.sizes() || y.scalar_type() != x.scalar_type()) {
        abort();
      }
      break;
    }
    case 4: {
      const int64_t prefix = in.ConsumeIntegralInRange<int64_t>(-1, 3);
      const torch::Tensor posemb = pick_input(in, in.ConsumeIntegralInRange<int64_t>(0, 6));
      std::vector<int64_t> old_size;
      if (in.ConsumeBool()) {
        old_size = {in.ConsumeIntegralInRange<int64_t>(-1, 5),
                    in.ConsumeIntegralInRange<int64_t>(-1, 5)};
      }
      std::vector<int64_t> new_size(static_cast<size_t>(in.ConsumeIntegralInRange<int>(0, 3)));
      for (auto& size : new_size) {
        size = in.ConsumeIntegralInRange<int64_t>(-1, 9);
      }
      const posenc::Interpolation modes[] = {posenc::Interpolation::kBicubic,
                                             posenc::Interpolation::kBilinear,
                                             posenc::Interpolation::kNearest};
      const torch::Tensor out = F::resample_position_table(
          posemb, posenc::ResamplePositionTableOptions(new_size)
                      .old_size(old_size)
                      .num_prefix_tokens(prefix)
                      .interpolation(modes[in.ConsumeIntegralInRange<int>(0, 2)])
                      .antialias(in.ConsumeBool())
                      .align_corners(in.ConsumeBool()));
      if (out.size(-2) != prefix + new_size.front() * new_size.back() ||
          out.dim() != posemb.dim()) {
        abort();
      }
      break;
    }
    case 0: {
      const int64_t dim = in.ConsumeIntegralInRange<int64_t>(-1, 40);
      torch::Tensor t = torch::rand({in.ConsumeIntegralInRange<int64_t>(0, 6)})
                            .mul(pick_double(in, {1000.0, 1e300, 0.0}, -10, 10))
                            .to(pick_dtype(in));
      if (in.ConsumeIntegralInRange<int>(0, 7) == 0 && t.numel() > 0 &&
          at::isFloatingType(t.scalar_type())) {
        t[0] = std::numeric_limits<double>::quiet_NaN();
      }
      const torch::Tensor emb = F::timestep_embedding(
          t, posenc::TimestepEmbeddingOptions(dim)
                 .flip_sin_to_cos(in.ConsumeBool())
                 .downscale_freq_shift(pick_double(in, {0.0, 1.0, NAN, dim / 2.0}, -2, 2))
                 .scale(pick_double(in, {1.0, 1000.0, INFINITY, 1e300}, -10, 10))
                 .max_period(in.ConsumeIntegralInRange<int64_t>(-1, 20000)));
      if (emb.size(0) != t.size(0) || emb.size(1) != dim || !emb.isfinite().all().item<bool>()) {
        abort();
      }
      break;
    }
    case 1: {
      const int64_t dim = in.ConsumeIntegralInRange<int64_t>(-4, 40);
      const int64_t height = in.ConsumeIntegralInRange<int64_t>(-1, 6);
      const int64_t width = in.ConsumeIntegralInRange<int64_t>(-1, 6);
      const bool cls = in.ConsumeBool();
      const int64_t extra = in.ConsumeIntegralInRange<int64_t>(-1, 3);
      const torch::Tensor table = F::sincos_2d_table(
          posenc::Sincos2dTableOptions(dim, {height, width})
              .cls_token(cls)
              .extra_tokens(extra)
              .interpolation_scale(pick_double(in, {1.0, 0.0, -1.0, NAN, 1e-300}, 0.1, 4))
              .base_size(in.ConsumeIntegralInRange<int64_t>(-1, 20)));
      if (table.size(0) != (cls ? extra : 0) + height * width || table.size(1) != dim ||
          !table.isfinite().all().item<bool>()) {
        abort();
      }
      break;
    }
    case 2: {
      const int64_t height = in.ConsumeIntegralInRange<int64_t>(-1, 6);
      const int64_t width = in.ConsumeIntegralInRange<int64_t>(-1, 6);
      const int64_t dim = in.ConsumeIntegralInRange<int64_t>(-4, 40);
      const torch::Tensor table = F::sincos_2d_grid_table(
          {height, width}, dim, pick_double(in, {10000.0, 0.0, -1.0, NAN, 1e300}, 0.5, 1e5),
          in.ConsumeBool(), in.ConsumeBool());
      if (table.size(0) != height * width || table.size(1) != dim ||
          !table.isfinite().all().item<bool>()) {
        abort();
      }
      break;
    }
    default: {
      std::vector<int64_t> axes;
      const int count = in.ConsumeIntegralInRange<int>(0, 3);
      int64_t half = 0;
      for (int a = 0; a < count; ++a) {
        axes.push_back(in.ConsumeIntegralInRange<int64_t>(-1, 8));
        half += axes.back() / 2;
      }
      const int64_t tokens = in.ConsumeIntegralInRange<int64_t>(0, 6);
      torch::Tensor ids = torch::randn({tokens, in.ConsumeIntegralInRange<int64_t>(0, 4)})
                              .mul(pick_double(in, {100.0, 1e300, 0.0}, -10, 10))
                              .to(pick_dtype(in));
      if (in.ConsumeIntegralInRange<int>(0, 7) == 0 && ids.numel() > 0 &&
          at::isFloatingType(ids.scalar_type())) {
        ids.view(-1)[0] = std::numeric_limits<double>::infinity();
      }
      posenc::AxialRotaryEmbedding rope(
          posenc::AxialRotaryEmbeddingOptions(axes)
              .theta(pick_double(in, {10000.0, 0.0, NAN, 1e300}, 0.5, 1e5))
              .heads_first(in.ConsumeBool()));
      if (in.ConsumeBool()) {
        const auto tables = rope->tables(ids);
        const torch::Tensor& cos = std::get<0>(tables);
        if (cos.size(0) != tokens || cos.size(1) != half || !cos.isfinite().all().item<bool>() ||
            cos.abs().gt(1).any().item<bool>()) {
          abort();
        }
      } else {
        const torch::Tensor x =
            pick_input(in, 2 * half + in.ConsumeIntegralInRange<int64_t>(0, 2), 4);
        const torch::Tensor y = rope(x, ids);
        if (y.sizes() != x.sizes()) {
          abort();
        }
      }
      break;
    }
  }
}
// --- option texts: the JSON front doors of posenc.nn
// ----------------------------------------------
//
// posenc.nn sends each module's keyword arguments as JSON text: check_module_options(module,
// options) checks those of every module but RotaryEmbedding, whose text
// rotary_embedding_frequencies and rotary_embedding_call(_qk) read (and keep, 256 texts, behind a
// mutex). Texts are built key by key from each module's own keys (values of every type, the
// spellings "nan" / "inf", lists, rope blocks, nesting up to a few hundred levels) or are the raw
// bytes; every JSON reader posenc has (those two, rope_frequencies' rope_parameters,
// read_hf_rope_config, a safetensors header) also gets the deep values. Promises checked:
//   - a text nested deeper than detail::kMaxJsonDepth levels or longer than the reader's size limit
//     is refused by every reader, with a message naming the limit (checked before parsing);
//   - the same options with their keys in another order and other white space give the same
//     outcome: the same frequencies bit for bit, or the same message;
//   - a text read once (the cache) reads the same again;
//   - check_module_options refuses a name that is not a module's (RotaryEmbedding's included), and
//     its messages (and rotary_embedding_frequencies') start with the module's or the operator's
//     name;
//   - accepted rotary options give finite frequencies, a positive attention factor, and calls that
//     rotate the input into its shape and dtype, q alone as q beside k.

using OpOutcome = std::string; // "" where the call returned, else "error: " and its message

template <typename Call>
OpOutcome outcome_of(Call&& call) {
  try {
    call();
  } catch (const c10::Error& error) {
    return std::string("error: ") + error.what_without_backtrace();
  }
  return "";
}

// The levels of objects and arrays in `text`: '{' and '[' outside strings, counted independently of
// posenc's own count (detail::json_depth_exceeded_at).
int json_depth(const std::string& text) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// A reader's outcome on `text`: past the depth limit or `max_bytes`, a refusal; where the text is
// valid JSON (else a parse error may come first), one whose message names the limit.
void check_limits(const char* reader, const std::string& text, size_t max_bytes,
                  const OpOutcome& outcome) {
  const int depth = json_depth(text);
  const bool deep = depth > posenc::detail::kMaxJsonDepth;
  const bool large = text.size() > max_bytes;
  if (!deep && !large) {
    return;
  }
  if (outcome.empty()) {
    std::cerr << "posenc_fuzzer: " << reader << " accepted a JSON text of " << text.size()
              << " bytes nested " << depth << " levels, past posenc's limits ("
              << posenc::detail::kMaxJsonDepth << " levels, " << max_bytes << " bytes)\n";
    abort();
  }
  const std::string named = large ? std::to_string(max_bytes) + " bytes"
                                  : std::to_string(posenc::detail::kMaxJsonDepth) + " levels";
  if (nlohmann::json::accept(text) && outcome.find(named) == std::string::npos) {
    std::cerr << "posenc_fuzzer: " << reader << " refused a JSON text of " << text.size()
              << " bytes nested " << depth << " levels without naming the limit (\"" << named
              << "\"): " << outcome.substr(0, 400) << "\n";
    abort();
  }
}

// Each module's keyword arguments as posenc.nn sends them, with their kinds ('i' an integer, 'n' a
// number, 'b' a boolean, 'e' a name, 'I' a list of integers, 'N' a list of numbers, 'r' a rope
// block), whether the module needs them (no default) and values it accepts (so that most texts
// reach the checks behind the reader). The last module is RotaryEmbedding
// (rotary_embedding_frequencies / rotary_embedding_call).
struct OptionKey {
  const char* name;
  char kind;
  bool required;
  std::vector<const char*> good;
};

struct ModuleKeys {
  const char* module;
  std::vector<OptionKey> keys;
};

const std::vector<ModuleKeys>& option_modules() {
  static const std::vector<const char*> sizes = {"8", "16", "4", "32", "64", "2"};
  static const std::vector<const char*> lengths = {"16", "32", "8", "128", "1"};
  static const std::vector<const char*> dropout = {"0", "0.1", "0.5", "1", "0.0"};
  static const std::vector<const char*> base = {"10000", "10000.0", "100", "500000.0", "2"};
  static const std::vector<const char*> scale = {"1", "1.0", "0.5", "2", "-1"};
  static const std::vector<const char*> boolean = {"true", "false"};
  static const std::vector<const char*> beyond = {"\"error\"", "\"extrapolate\""};
  static const std::vector<const char*> pairing = {"\"half_split\"", "\"interleaved\""};
  static const std::vector<ModuleKeys> modules = {
      {"PositionalEncoding",
       {{"d_model", 'i', true, sizes},
        {"max_len", 'i', true, lengths},
        {"base", 'n', false, base},
        {"dropout", 'n', false, dropout},
        {"batch_first", 'b', false, boolean},
        {"layout", 'e', false, {"\"interleaved\"", "\"concatenated\""}},
        {"spacing", 'e', false, {"\"paper\"", "\"tensor2tensor\""}},
        {"beyond_max_len", 'e', false, beyond},
        {"scale", 'n', false, scale},
        {"inplace", 'b', false, boolean}}},
      {"LearnedPositionalEmbedding",
       {{"d_model", 'i', true, sizes},
        {"max_len", 'i', true, lengths},
        {"init_std", 'n', false, {"0.02", "0", "1"}},
        {"dropout", 'n', false, dropout},
        {"batch_first", 'b', false, boolean},
        {"scale", 'n', false, scale},
        {"inplace", 'b', false, boolean}}},
      {"TokenAndPositionEmbedding",
       {{"vocab_size", 'i', true, {"10", "100", "1", "32000"}},
        {"d_model", 'i', true, sizes},
        {"max_len", 'i', true, lengths},
        {"positions", 'e', false, {"\"sinusoidal\"", "\"learned\""}},
        {"scale", 'n', false, {"null", "1", "8.0"}},
        {"padding_idx", 'i', false, {"null", "0", "1", "9"}},
        {"dropout", 'n', false, dropout},
        {"batch_first", 'b', false, boolean},
        {"base", 'n', false, base},
        {"beyond_max_len", 'e', false, beyond}}},
      {"Timesteps",
       {{"embedding_dim", 'i', true, {"8", "32", "256", "6"}},
        {"flip_sin_to_cos", 'b', false, boolean},
        {"downscale_freq_shift", 'n', false, {"0", "1", "0.5"}},
        {"scale", 'n', false, {"1", "1000", "0.5"}},
        {"max_period", 'i', false, {"10000", "2", "100"}}}},
      {"TimestepEmbedder",
       {{"hidden_size", 'i', true, sizes},
        {"frequency_embedding_size", 'i', false, {"256", "8", "16"}},
        {"max_period", 'i', false, {"10000", "100"}}}},
      {"AxialRotaryEmbedding",
       {{"axes_dim", 'I', true, {"[4, 4]", "[16, 56, 56]", "[2]", "[]"}},
        {"theta", 'n', false, base},
        {"pairing", 'e', false, pairing},
        {"heads_first", 'b', false, boolean}}},
      {"VisionRotaryEmbedding",
       {{"dim", 'i', true, {"8", "16", "64", "4"}},
        {"temperature", 'n', false, base},
        {"ref_feat_shape", 'I', false, {"null", "[2, 2]", "[16, 16]"}},
        {"grid_offset", 'n', false, {"0", "0.5", "1"}},
        {"grid_indexing", 'e', false, {"\"ij\"", "\"xy\""}},
        {"pairing", 'e', false, pairing},
        {"num_prefix_tokens", 'i', false, {"0", "1", "4"}},
        {"heads_first", 'b', false, boolean}}},
      {"ALiBi",
       {{"num_heads", 'i', true, {"8", "12", "1", "32", "5"}},
        {"max_bias", 'n', false, {"8", "8.0", "1", "64", "16"}},
        {"first_head", 'i', false, {"0", "1", "4"}},
        {"heads", 'i', false, {"null", "1", "2", "4"}}}},
      {"AttentionTemperature",
       {{"floor_scale", 'n', false, {"8192", "8192.0", "4", "1"}},
        {"attn_scale", 'n', false, {"0.1", "1", "0.5", "1e-3"}},
        {"form", 'e', false, {"\"llama4\"", "\"ministral3\""}},
        {"heads_first", 'b', false, boolean}}},
      {"RelativePositionBias",
       {{"num_heads", 'i', true, sizes},
        {"num_buckets", 'i', false, {"32", "8", "4", "64"}},
        {"max_distance", 'i', false, {"128", "16", "1"}},
        {"bidirectional", 'b', false, boolean}}},
      {"RelPositionalEncoding",
       {{"d_model", 'i', true, sizes},
        {"max_len", 'i', false, lengths},
        {"dropout", 'n', false, dropout},
        {"scale_input", 'b', false, boolean},
        {"legacy", 'b', false, boolean},
        {"base", 'n', false, base}}},
      {"RelPositionMultiheadAttention",
       {{"embed_dim", 'i', true, {"8", "16", "12"}},
        {"num_heads", 'i', true, {"1", "2", "4", "3"}},
        {"dropout", 'n', false, dropout}}},
      {"RotaryEmbedding",
       {{"head_dim", 'i', true, {"8", "16", "4", "64", "6"}},
        {"max_len", 'i', true, {"16", "32", "8", "4"}},
        {"cached_len", 'i', false, {"null", "8", "4"}},
        {"rotary_dim", 'i', false, {"null", "4", "8", "2"}},
        {"base", 'n', false, base},
        {"deinterleave", 'b', false, boolean},
        {"inverse", 'b', false, boolean},
        {"rotate_last_channels", 'b', false, boolean},
        {"heads_first", 'b', false, boolean},
        {"freq_factors", 'N', false, {"null", "[1, 2]", "[1, 1, 2, 2]", "[]"}},
        {"attention_factor_in_cos_sin", 'b', false, boolean},
        {"mrope_section", 'I', false, {"null", "[1, 1, 0]", "[1, 1, 2]", "[]"}},
        {"mrope_interleaved", 'b', false, boolean},
        {"mrope_hw_alternating", 'b', false, boolean},
        {"pairing", 'e', false, pairing},
        {"beyond_max_len", 'e', false, beyond},
        {"rope_parameters",
         'r',
         false,
         {"null", "{\"rope_type\": \"default\"}", "{\"rope_type\": \"linear\", \"factor\": 2.0}",
          "{\"rope_type\": \"dynamic\", \"factor\": 2.0, \"max_position_embeddings\": 8}",
          "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 8}",
          "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
          "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8}",
          "{\"type\": \"linear\", \"factor\": 4}",
          "{\"rope_type\": \"longrope\", \"original_max_position_embeddings\": 8, "
          "\"short_factor\": [1, 1], \"long_factor\": [2, 2]}"}}}},
  };
  return modules;
}

// An integer literal: mostly small, sometimes at or past posenc's limits and int64's, or not an
// integer. `huge`: 2^28 itself, which sizes are allowed to be (RotaryEmbedding's takes 1048576: a
// head_dim of 2^28 holds 2^27 float64 frequencies, 1 GiB, which is valid but no fuzzing speed).
std::string option_integer(FuzzedDataProvider& in, bool huge = true) {
  static const char* const specials[] = {"0",
                                         "-1",
                                         "1",
                                         "3",
                                         "1048576",
                                         "268435457",
                                         "2147483648",
                                         "9007199254740993",
                                         "9223372036854775807",
                                         "9223372036854775808",
                                         "-9223372036854775808",
                                         "18446744073709551615",
                                         "18446744073709551616",
                                         "4.0",
                                         "4.5",
                                         "1e3",
                                         "-0"};
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    const std::string special =
        specials[in.ConsumeIntegralInRange<size_t>(0, std::size(specials) - 1)];
    return huge && special == "1048576" ? "268435456" : special;
  }
  return std::to_string(in.ConsumeBool() ? 2 * in.ConsumeIntegralInRange<int64_t>(1, 32)
                                         : in.ConsumeIntegralInRange<int64_t>(-2, 300));
}

std::string option_number(FuzzedDataProvider& in) {
  static const char* const specials[] = {"0.1",
                                         "0.5",
                                         "1",
                                         "2",
                                         "8",
                                         "10000",
                                         "500000.0",
                                         "8192",
                                         "64",
                                         "64.000001",
                                         "0",
                                         "-0.0",
                                         "-1",
                                         "1e-50",
                                         "1e-320",
                                         "1e39",
                                         "1e308",
                                         "3.4028234663852886e38",
                                         "3.4028235677973366e38",
                                         "\"nan\"",
                                         "\"inf\"",
                                         "\"-inf\""};
  if (in.ConsumeBool()) {
    return specials[in.ConsumeIntegralInRange<size_t>(0, std::size(specials) - 1)];
  }
  return json_number(in);
}

std::string option_name(FuzzedDataProvider& in) {
  static const char* const names[] = {"interleaved", "concatenated", "paper",      "tensor2tensor",
                                      "error",       "extrapolate",  "sinusoidal", "learned",
                                      "half_split",  "ij",           "xy",         "llama4",
                                      "ministral3",  "nan",          "inf",        "",
                                      "Interleaved", "half-split"};
  return std::string("\"") + names[in.ConsumeIntegralInRange<size_t>(0, std::size(names) - 1)] +
         "\"";
}

// A string with what a reader must not mistake for structure: brackets, escaped quotes and
// backslashes, escapes of control characters and of surrogates (lone ones are invalid JSON).
std::string tricky_string(FuzzedDataProvider& in) {
  static const char* const pieces[] = {
      "[",       "{", "]", "}", "\\\"", "\\\\", "\\u0000", "\\ud83d\\ude00",
      "\\ud800", "a", ":", ",", "\\n",  "\\/"};
  std::string text = "\"";
  const int count = in.ConsumeIntegralInRange<int>(0, 12);
  for (int i = 0; i < count; ++i) {
    text += pieces[in.ConsumeIntegralInRange<size_t>(0, std::size(pieces) - 1)];
  }
  return text + "\"";
}

std::string option_list(FuzzedDataProvider& in, bool integers) {
  std::string text = "[";
  const int count = in.ConsumeIntegralInRange<int>(0, in.ConsumeBool() ? 4 : 40);
  for (int i = 0; i < count; ++i) {
    text += (i == 0 ? "" : ",") +
            (integers ? (in.ConsumeIntegralInRange<int>(0, 7) == 0
                             ? option_integer(in)
                             : std::to_string(2 * in.ConsumeIntegralInRange<int>(0, 8)))
                      : option_number(in));
  }
  return text + "]";
}

// A value nested `levels` deep below a value that is already `outer` levels down: arrays, objects
// (keys that hold brackets too) or both in a pattern, around a leaf.
std::string deep_value(FuzzedDataProvider& in, int outer) {
  int levels = 0;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: // at the limit: one level under it, on it, one and two past it
      levels = posenc::detail::kMaxJsonDepth - outer + in.ConsumeIntegralInRange<int>(-1, 2);
      break;
    case 1:
      levels = in.ConsumeIntegralInRange<int>(1, 80);
      break;
    default:
      levels = in.ConsumeIntegralInRange<int>(1, 400);
      break;
  }
  levels = std::max(levels, 1);
  const int shape = in.ConsumeIntegralInRange<int>(0, 3); // arrays, objects, alternating, bits
  const uint32_t bits = in.ConsumeIntegral<uint32_t>();
  static const char* const keys[] = {"\"a\"", "\"rope_type\"", "\"[\"", "\"{\\\"\"", "\"\""};
  const char* key = keys[in.ConsumeIntegralInRange<size_t>(0, std::size(keys) - 1)];
  std::string open;
  std::string close;
  for (int level = 0; level < levels; ++level) {
    const bool array = shape == 0 || (shape == 2 && level % 2 == 0) ||
                       (shape == 3 && ((bits >> (level % 32)) & 1u) != 0);
    if (array) {
      open += '[';
      close += ']';
    } else {
      open += std::string("{") + key + ":";
      close += '}';
    }
  }
  std::reverse(close.begin(), close.end());
  std::string leaf;
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      leaf = option_number(in);
      break;
    case 1:
      leaf = tricky_string(in);
      break;
    case 2:
      leaf = in.ConsumeBool() ? "[]" : "{}";
      break;
    case 3:
      leaf = "null";
      break;
    default:
      leaf = option_integer(in);
      break;
  }
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    close.resize(close.size() / 2); // unclosed: invalid JSON, refused either way
  }
  return open + leaf + close;
}

// A value for `key`: mostly one it accepts or one of its type (small, at the limits), else
// anything: null, the wrong type, a spelled number, a string with brackets, a rope block, a deep
// value.
std::string option_value(FuzzedDataProvider& in, const OptionKey& key, int outer,
                         bool huge = true) {
  const int choice = in.ConsumeIntegralInRange<int>(0, 7);
  if (choice < 5 && !key.good.empty()) {
    return key.good[in.ConsumeIntegralInRange<size_t>(0, key.good.size() - 1)];
  }
  if (choice < 7) {
    switch (key.kind) {
      case 'i':
        return option_integer(in, huge);
      case 'n':
        return option_number(in);
      case 'b':
        return in.ConsumeBool() ? "true" : "false";
      case 'e':
        return option_name(in);
      case 'I':
        return option_list(in, /*integers=*/true);
      case 'N':
        return option_list(in, /*integers=*/false);
      default: // a rope block (mode 13's generator), or its type alone
        return in.ConsumeIntegralInRange<int>(0, 3) != 0
                   ? json_object(in, 1, /*rope_block=*/true)
                   : "{\"rope_type\": " + json_string(in) + "}";
    }
  }
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      return "null";
    case 1:
      return in.ConsumeBool() ? "true" : "false";
    case 2:
      return option_name(in);
    case 3:
      return tricky_string(in);
    case 4:
      return option_list(in, in.ConsumeBool());
    case 5:
      return json_object(in, 1, in.ConsumeBool());
    case 6:
    case 7:
      return deep_value(in, outer);
    case 8:
      return option_integer(in, huge);
    default:
      return option_number(in);
  }
}

using OptionFields = std::vector<std::pair<std::string, std::string>>; // quoted key, value text

// Fields for `module`: its keys (the leading ones, its sizes, mostly present), sometimes another
// module's key, a misspelt or odd one, or a key twice; `unique` says whether every key is distinct.
OptionFields option_fields(FuzzedDataProvider& in, const ModuleKeys& module, bool& unique) {
  OptionFields fields;
  std::set<std::string> seen;
  unique = true;
  const bool huge = std::strcmp(module.module, "RotaryEmbedding") != 0;
  for (const OptionKey& option : module.keys) {
    // (about two of the others)
    const bool wanted = option.required
                            ? in.ConsumeIntegralInRange<int>(0, 7) != 0
                            : in.ConsumeIntegralInRange<size_t>(0, module.keys.size() / 2) == 0;
    if (wanted) {
      const std::string key = std::string("\"") + option.name + "\"";
      fields.emplace_back(key, option_value(in, option, 1, huge));
      seen.insert(key);
    }
  }
  const int extra =
      in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegralInRange<int>(1, 3) : 0;
  for (int i = 0; i < extra; ++i) {
    static const OptionKey odd = {"", 'n', false, {}};
    std::string key;
    const OptionKey* option = &odd;
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: { // another module's key
        const auto& other =
            option_modules()[in.ConsumeIntegralInRange<size_t>(0, option_modules().size() - 1)];
        option = &other.keys[in.ConsumeIntegralInRange<size_t>(0, other.keys.size() - 1)];
        key = std::string("\"") + option->name + "\"";
        break;
      }
      case 1:
        key = json_string(in);
        break;
      case 2:
        key = tricky_string(in);
        break;
      default: // a key of its own again (nlohmann-json keeps the last)
        option = &module.keys[in.ConsumeIntegralInRange<size_t>(0, module.keys.size() - 1)];
        key = std::string("\"") + option->name + "\"";
        break;
    }
    unique = seen.insert(key).second && unique;
    fields.emplace_back(key, option_value(in, *option, 1, huge));
  }
  // shuffled: the readers take keys in any order
  for (size_t i = fields.size(); i > 1; --i) {
    std::swap(fields[i - 1], fields[in.ConsumeIntegralInRange<size_t>(0, i - 1)]);
  }
  return fields;
}

// The fields as a JSON object: compact, spaced as Python's json.dumps, or in reverse order with
// new lines and tabs.
std::string render(const OptionFields& fields, int style) {
  std::string text = style == 2 ? "\n{\t" : "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& field = fields[style == 2 ? fields.size() - 1 - i : i];
    text += i == 0 ? "" : (style == 0 ? "," : style == 1 ? ", " : ",\n\t");
    text += field.first + (style == 0 ? ":" : style == 1 ? ": " : " :\t") + field.second;
  }
  return text + (style == 2 ? "\n}\n" : "}");
}

using Frequencies = posenc_test::RotaryFrequencies;
using posenc_test::check_module_options_op;
using posenc_test::rope_frequencies_op;
using posenc_test::rotary_call_op;
using posenc_test::rotary_call_qk_op;
using posenc_test::rotary_frequencies_op;

// posenc::read_hf_rope_config (libposenc_io's operator for posenc.nn), called boxed.
OpOutcome read_hf_config_op(const std::string& config) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("posenc::read_hf_rope_config", "");
  return outcome_of([&] {
    std::vector<c10::IValue> stack = {config, false, std::string("config.json"), c10::IValue(),
                                      std::string()};
    op.callBoxed(&stack);
    if (stack.size() != 1 || !stack[0].isString()) {
      abort();
    }
  });
}

OpOutcome check_module_options_outcome(const std::string& module, const std::string& text) {
  return outcome_of([&] { check_module_options_op().call(module, text); });
}

bool same_frequencies(const Frequencies& a, const Frequencies& b) {
  return same_tensor_bits(std::get<0>(a), std::get<0>(b)) &&
         same_tensor_bits(std::get<1>(a), std::get<1>(b)) &&
         same_tensor_bits(std::get<2>(a), std::get<2>(b));
}

// rotary_embedding_frequencies of `text`: its outcome, and the frequencies where it returned
// (finite; longrope's long ones empty or as many as the others; a positive attention factor).
OpOutcome rotary_frequencies_outcome(const std::string& text, Frequencies& frequencies) {
  const OpOutcome outcome = outcome_of([&] { frequencies = rotary_frequencies_op().call(text); });
  if (outcome.empty()) {
    const at::Tensor& inv_freq = std::get<0>(frequencies);
    const at::Tensor& long_inv_freq = std::get<1>(frequencies);
    const at::Tensor& factor = std::get<2>(frequencies);
    if (inv_freq.dim() != 1 || inv_freq.scalar_type() != at::kDouble ||
        !inv_freq.isfinite().all().item<bool>() || long_inv_freq.dim() != 1 ||
        (long_inv_freq.numel() != 0 && long_inv_freq.numel() != inv_freq.numel()) ||
        !long_inv_freq.isfinite().all().item<bool>() || factor.dim() != 0 ||
        !(factor.item<double>() > 0.0) || !std::isfinite(factor.item<double>())) {
      std::cerr << "posenc_fuzzer: rotary_embedding_frequencies(" << text
                << ") returned frequencies " << inv_freq << ", long " << long_inv_freq
                << ", factor " << factor << "\n";
      abort();
    }
  }
  return outcome;
}

// The same fields rendered another way must give the same outcome (past the limits only "refused":
// the message names the byte where the limit is passed).
void check_same_outcome(const char* reader, const std::string& text, const OpOutcome& outcome,
                        const std::string& other_text, const OpOutcome& other) {
  // (a text that is not JSON is quoted in its message)
  const bool over =
      json_depth(text) > posenc::detail::kMaxJsonDepth || !nlohmann::json::accept(text);
  if (over ? outcome.empty() != other.empty() : outcome != other) {
    std::cerr << "posenc_fuzzer: " << reader << " read one set of options two ways:\n  " << text
              << "\n  -> " << (outcome.empty() ? "accepted" : outcome) << "\n  " << other_text
              << "\n  -> " << (other.empty() ? "accepted" : other) << "\n";
    abort();
  }
}

// check_module_options on a module's fields (or an odd module name), two renderings.
void fuzz_module_options(FuzzedDataProvider& in) {
  const auto& modules = option_modules();
  const size_t index = in.ConsumeIntegralInRange<size_t>(0, modules.size() - 1);
  std::string name = modules[index].module; // RotaryEmbedding: refused, its text is read elsewhere
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      name = json_string(in); // (quoted: not a module)
      break;
    case 1:
      name = in.ConsumeRandomLengthString(32);
      break;
    case 2:
      name += in.ConsumeBool() ? " " : "Impl";
      break;
    default:
      break;
  }
  bool unique = true;
  const OptionFields fields = option_fields(in, modules[index], unique);
  const int style = in.ConsumeIntegralInRange<int>(0, 2);
  const std::string text = render(fields, style);
  const OpOutcome outcome = check_module_options_outcome(name, text);
  const bool known =
      std::any_of(modules.begin(), modules.end() - 1,
                  [&](const ModuleKeys& candidate) { return name == candidate.module; });
  if (known) {
    check_limits("posenc::check_module_options", text, posenc::detail::kMaxOptionTextBytes,
                 outcome);
    if (!outcome.empty() && outcome.rfind(std::string("error: ") + name, 0) != 0 &&
        outcome.rfind("error: posenc::check_module_options", 0) != 0) {
      std::cerr << "posenc_fuzzer: check_module_options(" << name << ", " << text
                << ") gave a message naming neither the module nor the operator: " << outcome
                << "\n";
      abort();
    }
  } else if (outcome.empty()) {
    std::cerr << "posenc_fuzzer: check_module_options accepted module '" << name << "'\n";
    abort();
  }
  if (unique) {
    const std::string other_text = render(fields, (style + 1 + in.ConsumeBool()) % 3);
    check_same_outcome("posenc::check_module_options", text, outcome, other_text,
                       check_module_options_outcome(name, other_text));
  }
}

// rotary_embedding_call and _qk with the options of `text` (accepted by
// rotary_embedding_frequencies): caches from its frequencies, an input of its head_dim; the
// result has the input's shape and dtype, and the call of q alone rotates q as the call of q and k.
void rotary_calls(FuzzedDataProvider& in, const std::string& text, const Frequencies& frequencies) {
  const nlohmann::json options = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto integer = [&](const char* key, int64_t fallback) {
    const auto found = options.find(key);
    return found != options.end() && found->is_number_integer() ? found->get<int64_t>() : fallback;
  };
  const int64_t head_dim = integer("head_dim", 0);
  const int64_t max_len = integer("max_len", 0);
  const int64_t rows = integer("cached_len", max_len);
  const auto heads_first_value = options.find("heads_first");
  const bool heads_first = heads_first_value != options.end() && heads_first_value->is_boolean() &&
                           heads_first_value->get<bool>();
  if (head_dim < 2 || head_dim > 256 || rows < 1 || rows > 512) {
    return;
  }
  const at::Tensor& inv_freq = std::get<0>(frequencies);
  const at::Tensor angles =
      torch::arange(rows, torch::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);
  const at::Tensor cos = angles.cos().to(torch::kFloat);
  const at::Tensor sin = angles.sin().to(torch::kFloat);
  const c10::optional<at::Tensor> long_inv_freq =
      std::get<1>(frequencies).numel() > 0 ? c10::optional<at::Tensor>(std::get<1>(frequencies))
                                           : c10::nullopt;
  const int64_t length = in.ConsumeIntegralInRange<int64_t>(0, std::min<int64_t>(rows, 16) + 2);
  const int64_t heads = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t width = in.ConsumeIntegralInRange<int>(0, 7) == 0
                            ? in.ConsumeIntegralInRange<int64_t>(0, head_dim + 2)
                            : head_dim;
  const at::Tensor x = torch::randn(heads_first ? std::vector<int64_t>{1, heads, length, width}
                                                : std::vector<int64_t>{1, length, heads, width})
                           .to(in.ConsumeBool() ? torch::kFloat : pick_dtype(in));
  const int64_t reach = std::min<int64_t>(max_len, 1 << 20); // (max_len may be near int64's end)
  const int64_t offset = pick_offset(in, reach + 4);
  c10::optional<at::Tensor> positions;
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    positions = pick_positions(in, x, heads_first ? 2 : 1, reach);
  }
  at::Tensor y;
  try {
    y = rotary_call_op().call(x, cos, sin, inv_freq, long_inv_freq, text, offset, positions);
  } catch (const c10::Error&) {
    return;
  }
  check_result(y, x);
  if (!at::isFloatingType(x.scalar_type())) {
    return;
  }
  const at::Tensor k = torch::randn(x.sizes()).to(x.scalar_type());
  const auto qk =
      rotary_call_qk_op().call(x, k, cos, sin, inv_freq, long_inv_freq, text, offset, positions);
  check_result(std::get<0>(qk), x);
  check_result(std::get<1>(qk), k);
  const double tolerance = 8 * epsilon(x.scalar_type());
  if (!same_bits(std::get<0>(qk), y) &&
      !torch::allclose(std::get<0>(qk).to(torch::kDouble), y.to(torch::kDouble), tolerance,
                       tolerance, /*equal_nan=*/true)) {
    std::cerr << "posenc_fuzzer: rotary_embedding_call_qk rotated q unlike rotary_embedding_call "
              << "for " << text << ", x " << x.sizes() << " " << x.scalar_type() << ", offset "
              << offset << "\n";
    abort();
  }
}

// RotaryEmbedding's options text: rotary_embedding_frequencies (twice: the second read from the
// cache), another rendering, then calls.
void fuzz_rotary_options(FuzzedDataProvider& in) {
  bool unique = true;
  const OptionFields fields = option_fields(in, option_modules().back(), unique);
  const int style = in.ConsumeIntegralInRange<int>(0, 2);
  const std::string text = render(fields, style);
  Frequencies frequencies;
  const OpOutcome outcome = rotary_frequencies_outcome(text, frequencies);
  check_limits("posenc::rotary_embedding_frequencies", text, posenc::detail::kMaxOptionTextBytes,
               outcome);
  if (!outcome.empty() && outcome.rfind("error: RotaryEmbedding", 0) != 0 &&
      outcome.rfind("error: posenc::rotary_embedding_frequencies", 0) != 0) {
    std::cerr << "posenc_fuzzer: rotary_embedding_frequencies(" << text
              << ") gave a message naming neither RotaryEmbedding nor the operator: " << outcome
              << "\n";
    abort();
  }
  Frequencies again;
  const OpOutcome cached = rotary_frequencies_outcome(text, again);
  if (cached != outcome || (outcome.empty() && !same_frequencies(frequencies, again))) {
    std::cerr << "posenc_fuzzer: rotary_embedding_frequencies read " << text
              << " differently the second time (its cache)\n";
    abort();
  }
  if (unique) {
    const std::string other_text = render(fields, (style + 1 + in.ConsumeBool()) % 3);
    Frequencies other;
    const OpOutcome other_outcome = rotary_frequencies_outcome(other_text, other);
    check_same_outcome("posenc::rotary_embedding_frequencies", text, outcome, other_text,
                       other_outcome);
    if (outcome.empty() && !same_frequencies(frequencies, other)) {
      std::cerr << "posenc_fuzzer: rotary_embedding_frequencies gave other frequencies for "
                << other_text << " than for " << text << "\n";
      abort();
    }
  }
  if (outcome.empty()) {
    rotary_calls(in, text, frequencies);
  }
}

// Raw bytes as the text of every JSON reader.
void fuzz_raw_texts(FuzzedDataProvider& in) {
  const auto& modules = option_modules();
  const std::string module =
      modules[in.ConsumeIntegralInRange<size_t>(0, modules.size() - 2)].module;
  const std::string text = in.ConsumeRemainingBytesAsString();
  check_limits("posenc::check_module_options", text, posenc::detail::kMaxOptionTextBytes,
               check_module_options_outcome(module, text));
  Frequencies frequencies;
  check_limits("posenc::rotary_embedding_frequencies", text, posenc::detail::kMaxOptionTextBytes,
               rotary_frequencies_outcome(text, frequencies));
  check_limits("posenc::rope_frequencies", text, posenc::detail::kMaxOptionTextBytes,
               outcome_of([&] {
                 rope_frequencies_op().call(8, 10000.0, text, c10::nullopt, c10::nullopt,
                                            c10::nullopt, c10::nullopt, c10::nullopt);
               }));
  check_limits("posenc::read_hf_rope_config", text, posenc::detail::kMaxConfigFileBytes,
               read_hf_config_op(text));
}

// A deep value (or, rarely, a text over the size limit) in each reader's own place: a module's
// option, RotaryEmbedding's rope_parameters, rope_frequencies' rope_parameters, a config.json's
// key and rope block, a safetensors header's metadata.
void fuzz_deep_texts(FuzzedDataProvider& in) {
  const auto& modules = option_modules();
  const ModuleKeys& module = modules[in.ConsumeIntegralInRange<size_t>(0, modules.size() - 2)];
  const OptionKey& key = module.keys[in.ConsumeIntegralInRange<size_t>(0, module.keys.size() - 1)];
  const bool large = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  // 1 MiB and a byte: the option texts' limit passed by one
  const std::string padding =
      large ? ", \"padding\": \"" + std::string(posenc::detail::kMaxOptionTextBytes, 'a') + "\""
            : "";
  const std::string value = deep_value(in, 1);
  const std::string text = "{\"" + std::string(key.name) + "\": " + value + padding + "}";
  check_limits("posenc::check_module_options", text, posenc::detail::kMaxOptionTextBytes,
               check_module_options_outcome(module.module, text));
  const std::string rope = deep_value(in, 2);
  const std::string rotary =
      "{\"head_dim\": 8, \"max_len\": 16, \"rope_parameters\": {\"rope_type\": \"linear\", "
      "\"factor\": " +
      rope + "}" + padding + "}";
  Frequencies frequencies;
  check_limits("posenc::rotary_embedding_frequencies", rotary, posenc::detail::kMaxOptionTextBytes,
               rotary_frequencies_outcome(rotary, frequencies));
  const std::string block =
      "{\"rope_type\": \"yarn\", \"factor\": 2.0, \"beta_fast\": " + deep_value(in, 1) + padding +
      "}";
  check_limits("posenc::rope_frequencies", block, posenc::detail::kMaxOptionTextBytes,
               outcome_of([&] {
                 rope_frequencies_op().call(8, 10000.0, block, c10::nullopt, c10::nullopt,
                                            c10::nullopt, c10::nullopt, c10::nullopt);
               }));
  const std::string config =
      "{\"num_attention_heads\": 4, \"hidden_size\": 32, \"max_position_embeddings\": 64, " +
      std::string(in.ConsumeBool() ? "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": "
                                   : "\"architectures\": {\"x\": ") +
      deep_value(in, 2) + "}}";
  check_limits("posenc::read_hf_rope_config", config, posenc::detail::kMaxConfigFileBytes,
               read_hf_config_op(config));
  check_limits("posenc::io::read_hf_rope_config", config, posenc::detail::kMaxConfigFileBytes,
               outcome_of([&] { posenc::io::read_hf_rope_config(config); }));
  // a safetensors header whose metadata nests (safetensors' own, smaller limit)
  const std::string header = "{\"__metadata__\": {\"k\": " + deep_value(in, 2) + "}}";
  std::string file(8, '\0');
  for (size_t i = 0; i < 8; ++i) {
    file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  std::istringstream stream(file + header);
  if (outcome_of([&] { posenc::read_safetensors(stream, "fuzz"); }).empty() &&
      json_depth(header) > posenc::detail::kMaxJsonDepth) {
    std::cerr << "posenc_fuzzer: read_safetensors accepted a header nested " << json_depth(header)
              << " levels\n";
    abort();
  }
}

// Option texts (mode 15): which front door the rest of the input feeds.
void fuzz_option_texts(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
    case 1:
      fuzz_module_options(in);
      break;
    case 2:
      fuzz_rotary_options(in);
      break;
    case 3:
      fuzz_deep_texts(in);
      break;
    default:
      fuzz_raw_texts(in);
      break;
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  torch::manual_seed(in.ConsumeIntegral<uint32_t>());
  try {
    // One byte picks the mode (FuzzedDataProvider takes it from the end of the input, just before
    // the seed's four bytes): its value mod 16, where 8 is safetensors, 13 a structured
    // config.json and rope_parameters, 14 packed and context-parallel positions, 15 the option
    // texts of posenc.nn (check_module_options, RotaryEmbedding's text, deep JSON for every
    // reader), and any other value v mode v % 8. (13, 14 and 15 reached modes 5, 6 and 7 before
    // these modes existed; the seeds and regressions of those modes use 5, 6 and 7, so they still
    // reach theirs.)
    const int pick = in.ConsumeIntegralInRange<int>(0, 15);
    switch (pick == 8 || pick >= 13 ? pick : pick % 8) {
      case 13:
        fuzz_config_json(in);
        break;
      case 15:
        fuzz_option_texts(in);
        break;
      case 14:
        fuzz_positions(in);
        break;
      case 0:
        fuzz_sinusoidal(in);
        break;
      case 1:
        fuzz_learned(in);
        break;
      case 2:
        fuzz_rotary(in);
        break;
      case 3:
        fuzz_token(in);
        break;
      case 4:
        fuzz_ops(in);
        break;
      case 6:
        fuzz_attention_bias(in);
        break;
      case 7:
        fuzz_vision(in);
        break;
      case 8:
        fuzz_safetensors(in);
        break;
      default:
        fuzz_reader(in);
        break;
    }
  } catch (const c10::Error&) {
    // A clear error is a correct answer to bad input.
  }
  return 0;
}
