#include <posenc/export.h>

#include "detail/attention_bias.h"
#include "detail/checks.h"
#include "detail/rope_types.h"
#include "detail/rotary.h"
#include "detail/sinusoidal.h"
#include "detail/vision.h"
#include "torchscript_sources.h"

#include <ATen/core/jit_type.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include <c10/util/Exception.h>

#include <cmath>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

// posenc::to_torchscript: the TorchScript methods of the exported modules are the classes of the
// Python files in src/export/torchscript/ (see common.py there), embedded at build time
// (src/export/CMakeLists.txt); this file registers the modules' attributes, buffers and
// parameters and defines those methods on them.

namespace posenc {

namespace {

// The names the exported code uses: `torch` (the native resolver's) and `RuntimeError`; and the
// type `torch.device` (as Python's TorchScript frontend reads it).
struct ExportResolver : torch::jit::NativeResolver {
  c10::TypePtr resolveType(const std::string& name,
                           const torch::jit::SourceRange& location) override {
    if (name == "torch.device") {
      return c10::DeviceObjType::get();
    }
    return torch::jit::NativeResolver::resolveType(name, location);
  }

  std::shared_ptr<torch::jit::SugaredValue> resolveValue(
      const std::string& name, torch::jit::GraphFunction& function,
      const torch::jit::SourceRange& location) override {
    if (name == "RuntimeError") {
      return std::make_shared<torch::jit::ExceptionValue>(name);
    }
    return torch::jit::NativeResolver::resolveValue(name, function, location);
  }
};

// One of the TorchScript sources, src/export/torchscript/<file>, embedded at build time (a pointer
// to the generated variable, so that the constants below need no dynamic initialization).
struct Source {
  const char* file;
  const char* const* text;
};

// The body of the one class of a source: the lines after its `class ...:` line, `def`s and
// comments indented by 4 spaces (test/python/test_export.py checks that the files have this form).
std::string class_body(const Source& source) {
  const std::string text(*source.text);
  size_t at = text.rfind("\nclass ");
  TORCH_INTERNAL_ASSERT(at != std::string::npos && text.find("\nclass ") == at,
                        "posenc: the TorchScript source ", source.file, " must hold one class");
  at = text.find('\n', at + 1);
  TORCH_INTERNAL_ASSERT(at != std::string::npos, "posenc: ", source.file, " has an empty class");
  return text.substr(at + 1);
}

// Registers the module's name `name` (what starts the error messages, `self.who`) and defines
// the methods of the classes in `sources`, compiled together.
void define(torch::jit::Module& module, const std::string& name,
            std::initializer_list<Source> sources) {
  module.register_attribute("who", c10::StringType::get(), name);
  std::string text;
  for (const Source& source : sources) {
    text += class_body(source);
    text += '\n';
  }
  module.define(text, std::make_shared<ExportResolver>());
}

namespace sources = detail::torchscript_sources;
constexpr Source kCommon{"common.py", &sources::common_py};
constexpr Source kOffset{"offset.py", &sources::offset_py};
constexpr Source kSequence{"sequence.py", &sources::sequence_py};
constexpr Source kSinusoidal{"sinusoidal.py", &sources::sinusoidal_py};
constexpr Source kLearned{"learned.py", &sources::learned_py};
constexpr Source kRotation{"rotation.py", &sources::rotation_py};
constexpr Source kRotary{"rotary.py", &sources::rotary_py};
constexpr Source kTokenEmbedding{"token_embedding.py", &sources::token_embedding_py};
constexpr Source kTokenAndPosition{"token_and_position.py", &sources::token_and_position_py};
constexpr Source kALiBi{"alibi.py", &sources::alibi_py};
constexpr Source kAttentionTemperature{"attention_temperature.py",
                                       &sources::attention_temperature_py};
constexpr Source kT5Bias{"t5_bias.py", &sources::t5_bias_py};
constexpr Source kRelativeEncoding{"relative_encoding.py", &sources::relative_encoding_py};
constexpr Source kRelativeAttention{"relative_attention.py", &sources::relative_attention_py};
constexpr Source kTimestep{"timestep.py", &sources::timestep_py};
constexpr Source kTimesteps{"timesteps.py", &sources::timesteps_py};
constexpr Source kTimestepEmbedder{"timestep_embedder.py", &sources::timestep_embedder_py};
constexpr Source kAxial{"axial.py", &sources::axial_py};
constexpr Source kAxialRotary{"axial_rotary.py", &sources::axial_rotary_py};
constexpr Source kVisionRotary{"vision_rotary.py", &sources::vision_rotary_py};

// An option as an attribute of the exported module (an enumeration as its name).
void register_option(torch::jit::Module& exported, const char* name, int64_t value) {
  exported.register_attribute(name, c10::IntType::get(), value);
}
void register_option(torch::jit::Module& exported, const char* name, double value) {
  exported.register_attribute(name, c10::FloatType::get(), value);
}
void register_option(torch::jit::Module& exported, const char* name, bool value) {
  exported.register_attribute(name, c10::BoolType::get(), value);
}
void register_option(torch::jit::Module& exported, const char* name,
                     const std::vector<int64_t>& value) {
  exported.register_attribute(name, c10::ListType::ofInts(), c10::List<int64_t>(value));
}
template <typename Enum, typename = std::enable_if_t<std::is_enum<Enum>::value>>
void register_option(torch::jit::Module& exported, const char* name, Enum value) {
  exported.register_attribute(name, c10::StringType::get(), std::string(enum_name(value)));
}
// (No attribute type for the others: an optional, a list of floats. A table line that gives one
// kTorchScript fails every export of its module, in the tests.)
template <typename T, typename = std::enable_if_t<!std::is_enum<T>::value>>
void register_option(torch::jit::Module& /*exported*/, const char* name, const T& /*value*/) {
  TORCH_INTERNAL_ASSERT(false, "posenc: the option ", name, " has no TorchScript attribute type");
}

// Registers the options whose table line (<posenc/options/fields.h>) has kTorchScript as
// attributes of their names, in the table's order.
template <typename Options>
void register_options(torch::jit::Module& exported, const Options& options) {
  for_each_option<Options>([&](const auto& field) {
    if (field.has(kTorchScript)) {
      register_option(exported, field.name, field.get(options));
    }
  });
}

// The sequence encodings' module: d_model, max_len, batch_first and scale (their tables'
// TorchScript options) and `extrapolate`.
template <typename Options>
torch::jit::Module sequence_module(const std::string& name, const Options& options,
                                   bool extrapolate) {
  torch::jit::Module exported("__torch__.posenc." + name);
  register_options(exported, options);
  exported.register_attribute("extrapolate", c10::BoolType::get(), extrapolate);
  return exported;
}

// A submodule holding the parameters of a torch::nn::Linear (`weight`, and `bias` where it has
// one), which the exported code applies with torch.linear.
torch::jit::Module linear_parameters(const torch::nn::Linear& linear) {
  torch::jit::Module exported("__torch__.posenc.Linear");
  exported.register_parameter("weight", linear->weight.detach().clone(), /*is_buffer=*/false);
  if (linear->bias.defined()) {
    exported.register_parameter("bias", linear->bias.detach().clone(), /*is_buffer=*/false);
  }
  return exported;
}

// The attributes of the timestep embedding (timestep.py): the options it reads and the float64
// frequencies of posenc::detail::timestep_frequencies (a plain attribute: the C++ module has no
// buffers).
void register_timestep_embedding(torch::jit::Module& exported, const detail::TimestepSpec& spec) {
  exported.register_attribute("embedding_dim", c10::IntType::get(), spec.embedding_dim);
  exported.register_attribute("flip_sin_to_cos", c10::BoolType::get(), spec.flip_sin_to_cos);
  exported.register_attribute("downscale_freq_shift", c10::FloatType::get(),
                              spec.downscale_freq_shift);
  exported.register_attribute("scale", c10::FloatType::get(), spec.scale);
  exported.register_attribute("max_period", c10::IntType::get(), spec.max_period);
  exported.register_attribute("frequencies", c10::TensorType::get(),
                              at::tensor(detail::timestep_frequencies(spec), at::kDouble));
}

// The attributes of the axial tables (axial.py): `axes_dim`, and each axis' plain RoPE
// frequencies (posenc::detail::rope_frequencies, as detail::axial_rotary_tables computes them)
// one axis after the other, with the axis of each.
void register_axial_tables(torch::jit::Module& exported, const std::vector<int64_t>& axes_dim,
                           double theta) {
  c10::List<int64_t> dims;
  std::vector<double> inv_freq;
  std::vector<int64_t> axis_of;
  for (size_t a = 0; a < axes_dim.size(); ++a) {
    dims.push_back(axes_dim[a]);
    const detail::RopeSpec spec = detail::rope_spec(
        axes_dim[a], functional::RotaryTablesFuncOptions().base(theta), /*max_len=*/1);
    const detail::RopeFrequencies frequencies = detail::rope_frequencies(spec, c10::nullopt);
    TORCH_INTERNAL_ASSERT(frequencies.attention_factor == 1.0);
    inv_freq.insert(inv_freq.end(), frequencies.inv_freq.begin(), frequencies.inv_freq.end());
    axis_of.insert(axis_of.end(), frequencies.inv_freq.size(), static_cast<int64_t>(a));
  }
  exported.register_attribute("axes_dim", c10::ListType::ofInts(), dims);
  exported.register_attribute("axial_inv_freq", c10::TensorType::get(),
                              at::tensor(inv_freq, at::kDouble));
  exported.register_attribute("axial_axis", c10::TensorType::get(), at::tensor(axis_of, at::kLong));
}

} // namespace

torch::jit::Module to_torchscript(const PositionalEncodingImpl& module) {
  const auto& options = module.options;
  const bool extrapolate = options.beyond_max_len() == BeyondMaxLen::kExtrapolate;
  auto exported = sequence_module("PositionalEncoding", options, extrapolate);
  exported.register_buffer("pe", module.pe.detach().clone());
  const detail::ColumnPlan plan = detail::column_plan(detail::sinusoid_spec(options));
  // Plain tensor attributes, not buffers: the state dict keeps only `pe`, like the Python module's.
  // (Module.to() does not move attributes, so the code moves them to the input's device.)
  exported.register_attribute("column_frequency", c10::TensorType::get(),
                              at::tensor(plan.frequency, at::kDouble).to(module.pe.device()));
  std::vector<int64_t> kinds(plan.kind.begin(), plan.kind.end());
  exported.register_attribute("column_kind", c10::TensorType::get(),
                              at::tensor(kinds, at::kLong).to(module.pe.device()));
  define(exported, "PositionalEncoding", {kCommon, kOffset, kSequence, kSinusoidal});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const LearnedPositionalEmbeddingImpl& module) {
  const auto& options = module.options;
  auto exported = sequence_module("LearnedPositionalEmbedding", options, /*extrapolate=*/false);
  exported.register_parameter("weight", module.weight.detach().clone(), /*is_buffer=*/false);
  define(exported, "LearnedPositionalEmbedding", {kCommon, kOffset, kSequence, kLearned});
  exported.eval();
  return exported;
}

namespace {
// The attributes rotation.py reads: `interleaved` (pairs (2i, 2i + 1)), `deinterleave` (pairs
// (2i, 2i + 1) read, halves written: RotaryEmbeddingOptions::deinterleave), `inverse` (turned
// by -theta: RotaryEmbeddingOptions::inverse) and `rotate_last` (the last rotated channels:
// RotaryEmbeddingOptions::rotate_last_channels).
void register_pairing(torch::jit::Module& exported, RotaryPairing pairing,
                      bool deinterleave = false, bool inverse = false, bool rotate_last = false) {
  exported.register_attribute("interleaved", c10::BoolType::get(),
                              pairing == RotaryPairing::kInterleaved);
  exported.register_attribute("deinterleave", c10::BoolType::get(), deinterleave);
  exported.register_attribute("inverse", c10::BoolType::get(), inverse);
  exported.register_attribute("rotate_last", c10::BoolType::get(), rotate_last);
}
} // namespace

torch::jit::Module to_torchscript(const RotaryEmbeddingImpl& module) {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, "to_torchscript");
  const auto& options = module.options;
  const int64_t rotary_dim = options.rotated_width();
  torch::jit::Module exported("__torch__.posenc.RotaryEmbedding");
  exported.register_attribute("max_len", c10::IntType::get(), options.max_len());
  exported.register_attribute("rotary_dim", c10::IntType::get(), rotary_dim);
  exported.register_attribute("head_dim", c10::IntType::get(), options.head_dim());
  register_pairing(exported, options.pairing(), options.deinterleave(), options.inverse(),
                   options.rotate_last_channels());
  exported.register_attribute("heads_first", c10::BoolType::get(), options.heads_first());
  exported.register_attribute("extrapolate", c10::BoolType::get(),
                              options.beyond_max_len() == BeyondMaxLen::kExtrapolate);
  exported.register_buffer("cos", module.cos.detach().clone());
  exported.register_buffer("sin", module.sin.detach().clone());
  // The frequencies of the caches, for positions past them (a plain attribute, like
  // column_frequency above).
  const detail::RopeSpec spec = detail::rope_spec(options);
  const detail::RopeFrequencies frequencies = detail::rope_frequencies(spec);
  exported.register_attribute(
      "inv_freq", c10::TensorType::get(),
      at::tensor(frequencies.inv_freq, at::kDouble).to(module.cos.device()));
  exported.register_attribute("attention_factor", c10::FloatType::get(),
                              frequencies.attention_factor);
  // dynamic and longrope: the frequencies of calls past `switch_len` (-1: none). LongRoPE's are
  // fixed (long_inv_freq); dynamic NTK's follow from the call's length, the base, the factor and
  // the per-frequency divisors.
  const c10::optional<int64_t> switch_length = detail::rope_switch_length(spec);
  exported.register_attribute("switch_len", c10::IntType::get(), switch_length.value_or(-1));
  const bool longrope =
      detail::rope_type_entry(spec.scaling.type()).switches == detail::RopeSwitch::kLongFactors;
  const at::Tensor long_inv_freq =
      longrope
          ? at::tensor(detail::rope_frequencies(spec, *switch_length + 1).inv_freq, at::kDouble)
          : at::empty({0}, at::kDouble);
  exported.register_attribute("long_inv_freq", c10::TensorType::get(), long_inv_freq);
  exported.register_attribute("ntk_base", c10::FloatType::get(), spec.base);
  exported.register_attribute("ntk_factor", c10::FloatType::get(),
                              spec.scaling.factor().value_or(1.0));
  std::vector<double> divisors = spec.freq_factors;
  divisors.resize(static_cast<size_t>(rotary_dim / 2), 1.0);
  exported.register_attribute("freq_divisors", c10::TensorType::get(),
                              at::tensor(divisors, at::kDouble));
  c10::List<int64_t> mrope_axes;
  if (!options.mrope_section().empty()) {
    for (const int64_t axis :
         options.mrope_hw_alternating()
             ? detail::mrope_hw_alternating_axes(options.mrope_section(), rotary_dim / 2)
             : detail::mrope_axes(options.mrope_section(), options.mrope_interleaved(),
                                  rotary_dim / 2)) {
      mrope_axes.push_back(axis);
    }
  }
  exported.register_attribute("mrope_axes", c10::ListType::ofInts(), mrope_axes);
  define(exported, "RotaryEmbedding", {kCommon, kOffset, kRotation, kRotary});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const TokenAndPositionEmbeddingImpl& module) {
  const auto& options = module.options;
  const int64_t padding_idx = options.padding_idx().value_or(-1);
  torch::jit::Module tokens("__torch__.posenc.TokenEmbedding");
  tokens.register_parameter("weight", module.tokens->weight.detach().clone(), /*is_buffer=*/false);
  register_options(tokens, options); // batch_first
  tokens.register_attribute("padding_idx", c10::IntType::get(), padding_idx);
  define(tokens, "TokenAndPositionEmbedding", {kCommon, kTokenEmbedding});

  torch::jit::Module exported("__torch__.posenc.TokenAndPositionEmbedding");
  exported.register_module("tokens", tokens);
  exported.register_module("positions", module.sinusoidal ? to_torchscript(*module.sinusoidal)
                                                          : to_torchscript(*module.learned));
  register_options(exported, options); // batch_first
  exported.register_attribute("padding_idx", c10::IntType::get(), padding_idx);
  define(exported, "TokenAndPositionEmbedding", {kCommon, kTokenAndPosition});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const ALiBiImpl& module) {
  torch::jit::Module exported("__torch__.posenc.ALiBi");
  exported.register_buffer("slopes", module.slopes.detach().clone());
  define(exported, "ALiBi", {kCommon, kALiBi});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const AttentionTemperatureImpl& module) {
  const auto& options = module.options;
  torch::jit::Module exported("__torch__.posenc.AttentionTemperature");
  register_options(exported, options); // form, floor_scale, attn_scale, heads_first
  define(exported, "AttentionTemperature", {kCommon, kAttentionTemperature});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const RelativePositionBiasImpl& module) {
  const auto& options = module.options;
  torch::jit::Module table("__torch__.posenc.Embedding");
  table.register_parameter("weight", module.relative_attention_bias->weight.detach().clone(),
                           /*is_buffer=*/false);
  torch::jit::Module exported("__torch__.posenc.RelativePositionBias");
  exported.register_module("relative_attention_bias", table);
  register_options(exported, options); // max_distance
  // The buckets of relative positions -max_distance .. max_distance; every position past them
  // shares the bucket of the nearer end, so the exported code clamps and looks up.
  std::vector<int64_t> buckets;
  buckets.reserve(static_cast<size_t>(2 * options.max_distance() + 1));
  for (int64_t position = -options.max_distance(); position <= options.max_distance(); ++position) {
    buckets.push_back(detail::relative_position_bucket(
        position, options.bidirectional(), options.num_buckets(), options.max_distance()));
  }
  exported.register_attribute("bucket_of", c10::TensorType::get(), at::tensor(buckets, at::kLong));
  define(exported, "RelativePositionBias", {kCommon, kT5Bias});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const RelPositionalEncodingImpl& module) {
  const auto& options = module.options;
  torch::jit::Module exported("__torch__.posenc.RelPositionalEncoding");
  exported.register_buffer("pe", module.pe.detach().clone());
  register_options(exported, options); // d_model, max_len, legacy
  exported.register_attribute(
      "scale", c10::FloatType::get(),
      options.scale_input() ? std::sqrt(static_cast<double>(options.d_model())) : 1.0);
  define(exported, "RelPositionalEncoding", {kCommon, kRelativeEncoding});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const RelPositionMultiheadAttentionImpl& module) {
  const auto& options = module.options;
  torch::jit::Module exported("__torch__.posenc.RelPositionMultiheadAttention");
  exported.register_module("linear_q", linear_parameters(module.linear_q));
  exported.register_module("linear_k", linear_parameters(module.linear_k));
  exported.register_module("linear_v", linear_parameters(module.linear_v));
  exported.register_module("linear_out", linear_parameters(module.linear_out));
  exported.register_module("linear_pos", linear_parameters(module.linear_pos));
  exported.register_parameter("pos_bias_u", module.pos_bias_u.detach().clone(), false);
  exported.register_parameter("pos_bias_v", module.pos_bias_v.detach().clone(), false);
  register_options(exported, options); // embed_dim, num_heads
  const int64_t depth = options.embed_dim() / options.num_heads();
  exported.register_attribute("score_scale", c10::FloatType::get(),
                              1.0 / std::sqrt(static_cast<double>(depth)));
  define(exported, "RelPositionMultiheadAttention", {kCommon, kRelativeAttention});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const TimestepsImpl& module) {
  const detail::TimestepSpec spec = detail::timestep_spec(module.options);
  torch::jit::Module exported("__torch__.posenc.Timesteps");
  register_timestep_embedding(exported, spec);
  define(exported, TimestepsImpl::kName, {kCommon, kTimestep, kTimesteps});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const TimestepEmbedderImpl& module) {
  const auto& options = module.options;
  // DiT's embedding: cos first, no shift (as TimestepEmbedderImpl::forward)
  detail::TimestepSpec spec;
  spec.embedding_dim = options.frequency_embedding_size();
  spec.flip_sin_to_cos = true;
  spec.downscale_freq_shift = 0.0;
  spec.max_period = options.max_period();
  torch::jit::Module mlp("__torch__.posenc.Sequential");
  mlp.register_module(
      "0", linear_parameters(torch::nn::Linear(module.mlp->ptr<torch::nn::LinearImpl>(0))));
  mlp.register_module(
      "2", linear_parameters(torch::nn::Linear(module.mlp->ptr<torch::nn::LinearImpl>(2))));
  torch::jit::Module exported("__torch__.posenc.TimestepEmbedder");
  exported.register_module("mlp", mlp);
  register_options(exported, options); // hidden_size
  register_timestep_embedding(exported, spec);
  define(exported, TimestepEmbedderImpl::kName, {kCommon, kTimestep, kTimestepEmbedder});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const AxialRotaryEmbeddingImpl& module) {
  const auto& options = module.options;
  torch::jit::Module exported("__torch__.posenc.AxialRotaryEmbedding");
  const detail::CallerScope caller(detail::CallerScope::Rename{}, AxialRotaryEmbeddingImpl::kName);
  register_axial_tables(exported, options.axes_dim(), options.theta());
  register_options(exported, options); // theta, heads_first
  register_pairing(exported, options.pairing());
  define(exported, AxialRotaryEmbeddingImpl::kName, {kCommon, kRotation, kAxial, kAxialRotary});
  exported.eval();
  return exported;
}

torch::jit::Module to_torchscript(const VisionRotaryEmbeddingImpl& module) {
  const auto& options = module.options;
  torch::jit::Module exported("__torch__.posenc.VisionRotaryEmbedding");
  const detail::CallerScope caller(detail::CallerScope::Rename{}, VisionRotaryEmbeddingImpl::kName);
  register_axial_tables(exported, {options.dim() / 2, options.dim() / 2}, options.temperature());
  // dim, temperature, ref_feat_shape, grid_offset, grid_indexing, num_prefix_tokens, heads_first
  register_options(exported, options);
  register_pairing(exported, options.pairing());
  define(exported, VisionRotaryEmbeddingImpl::kName, {kCommon, kRotation, kAxial, kVisionRotary});
  exported.eval();
  return exported;
}

} // namespace posenc
