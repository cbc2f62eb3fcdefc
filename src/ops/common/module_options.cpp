// The checks of each module's options (ops/common/module_options.h), and the operator through which
// posenc.nn's constructors make them:
//
//   check_module_options(str module, str options) -> ()
//
// `module` is the module's name ("PositionalEncoding", ..., as posenc.nn and the C++ kName spell
// it) and `options` a JSON object of its keyword arguments under posenc.nn's names (those of the
// C++ options; enumerations as their names, e.g. "layout": "concatenated"; a missing key: the
// default, as a null is where posenc.nn's default is None). It reads them into the C++ options,
// refusing unknown keys, values of the wrong type and names outside an enumeration, and makes the
// checks of the C++ module's reset(). Numbers JSON cannot hold are passed as the strings "nan",
// "inf" and "-inf" (posenc.nn does so), so that the check, not the reader, says what must hold.
// Returns nothing; CompositeExplicitAutograd (no tensor argument).

#include "ops/common/module_options.h"
#include "ops/common/options_reader.h"

#include "detail/attention_bias.h"
#include "detail/checks.h"
#include "detail/json_text.h"
#include "detail/sinusoidal.h"
#include "detail/vision.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>
#include <torch/library.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace posenc {
namespace ops {

// ---- the checks, shared with the modules' reset() ------------------------------------------

void check_options(const PositionalEncodingOptions& options) {
  detail::check_table_arguments(options.max_len(), options.d_model(), options.base());
  detail::check_dropout(options.dropout());
  detail::check_scale(options.scale());
}

void check_options(const LearnedPositionalEmbeddingOptions& options) {
  static constexpr detail::CallerName who{};
  detail::check_table_arguments(options.max_len(), options.d_model(), /*base=*/1.0);
  detail::check_dropout(options.dropout());
  TORCH_CHECK(std::isfinite(options.init_std()) && options.init_std() >= 0, who,
              ": init_std must be finite and >= 0, but got ", options.init_std());
  detail::check_scale(options.scale());
}

void check_options(const TokenAndPositionEmbeddingOptions& options, OptionSpelling spelling) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(options.vocab_size() >= 1, who, ": vocab_size must be >= 1, but got ",
              options.vocab_size());
  TORCH_CHECK(options.d_model() >= 1, who, ": d_model must be >= 1, but got ", options.d_model());
  detail::check_table_size("a token table of vocab_size * d_model", options.vocab_size(),
                           options.d_model(), "vocab_size");
  detail::check_scale(options.scale());
  if (options.padding_idx()) {
    const int64_t pad = *options.padding_idx();
    TORCH_CHECK(pad >= 0 && pad < options.vocab_size(), who,
                ": padding_idx must be in [0, vocab_size) = [0, ", options.vocab_size(),
                "), but got ", pad);
  }
  const bool python = spelling == OptionSpelling::kPython;
  TORCH_CHECK(options.positions() == PositionKind::kSinusoidal ||
                  options.beyond_max_len() == BeyondMaxLen::kError,
              who, ": learned positions cannot extrapolate past max_len; use ",
              python ? "positions='sinusoidal' or beyond_max_len='error'"
                     : "PositionKind::kSinusoidal or BeyondMaxLen::kError");
  // the position table (its module's checks, under this module's name)
  detail::check_table_size("a position table of max_len * d_model", options.max_len(),
                           options.d_model(), "max_len");
  const bool sinusoidal = options.positions() == PositionKind::kSinusoidal;
  detail::check_table_arguments(options.max_len(), options.d_model(),
                                sinusoidal ? options.base() : 1.0);
  detail::check_dropout(options.dropout());
}

void check_options(const TimestepEmbeddingOptions& options) {
  detail::check_timestep_spec(detail::timestep_spec(options));
}

void check_options(const TimestepEmbedderOptions& options) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(options.hidden_size() >= 1, who, ": hidden_size must be >= 1, but got ",
              options.hidden_size());
  detail::check_table_size("a weight of hidden_size * hidden_size", options.hidden_size(),
                           options.hidden_size(), "hidden_size");
  // DiT's frequencies: cos first, no shift
  detail::check_timestep_spec(
      detail::timestep_spec(TimestepEmbeddingOptions(options.frequency_embedding_size())
                                .flip_sin_to_cos(true)
                                .downscale_freq_shift(0.0)
                                .max_period(options.max_period())));
  detail::check_table_size("a weight of hidden_size * frequency_embedding_size",
                           options.hidden_size(), options.frequency_embedding_size(),
                           "hidden_size or frequency_embedding_size");
}

void check_options(const AxialRotaryEmbeddingOptions& options) {
  // the tables' argument checks, on no tokens
  detail::check_axial_rotary_arguments(
      at::empty({0, static_cast<int64_t>(options.axes_dim().size())}), options.axes_dim(),
      options.theta());
}

void check_options(const VisionRotaryEmbeddingOptions& options) {
  static constexpr detail::CallerName who{};
  // the tables' argument checks, on a 1 x 1 grid
  detail::check_grid_rotary_arguments({1, 1}, options.dim(), options.temperature(),
                                      options.ref_feat_shape(), options.grid_offset(),
                                      grid_indexing_name(options.grid_indexing()));
  TORCH_CHECK(
      options.num_prefix_tokens() >= 0 && options.num_prefix_tokens() <= detail::kMaxTableElements,
      who,
      ": num_prefix_tokens must be in [0, 2^28] (the class and register tokens before the "
      "patches), but got ",
      options.num_prefix_tokens());
}

void check_options(const ALiBiOptions& options) {
  detail::check_alibi_arguments(
      options.num_heads(), options.max_bias(), options.first_head(),
      options.heads().value_or(options.num_heads() > options.first_head()
                                   ? options.num_heads() - options.first_head()
                                   : 0));
}

void check_options(const AttentionTemperatureOptions& options) {
  detail::check_attention_temperature(options.floor_scale(), options.attn_scale());
}

void check_options(const RelativePositionBiasOptions& options) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(options.num_heads() >= 1, who, ": num_heads must be >= 1, but got ",
              options.num_heads());
  detail::check_bucket_arguments(options.bidirectional(), options.num_buckets(),
                                 options.max_distance());
  detail::check_table_size("a bias table of num_buckets * num_heads", options.num_buckets(),
                           options.num_heads(), "num_buckets or num_heads");
}

void check_options(const RelPositionalEncodingOptions& options) {
  detail::check_dropout(options.dropout());
  if (options.legacy()) {
    detail::check_table_request(options.max_len(), options.d_model(), options.base(),
                                /*offset=*/0, at::kFloat);
  } else {
    detail::check_relative_table_arguments(options.max_len(), options.max_len(), options.d_model(),
                                           options.base());
  }
}

void check_options(const RelPositionMultiheadAttentionOptions& options) {
  static constexpr detail::CallerName who{};
  const int64_t width = options.embed_dim();
  const int64_t heads = options.num_heads();
  TORCH_CHECK(heads >= 1 && width >= 1 && width % heads == 0, who,
              ": embed_dim must be a positive multiple of num_heads >= 1, but got embed_dim = ",
              width, " and num_heads = ", heads);
  detail::check_dropout(options.dropout());
  detail::check_table_size("a weight of embed_dim * embed_dim", width, width, "embed_dim");
}

namespace {

// ---- posenc.nn's options, read from JSON ------------------------------------------------------

using nlohmann::json;

// One reading per module: its options by their field table, then its checks.
template <typename Options>
void check_module(OptionsReader& read) {
  check_options(read_options<Options>(read));
}

void check_token_and_position_embedding(OptionsReader& read) {
  check_options(read_options<TokenAndPositionEmbeddingOptions>(read), OptionSpelling::kPython);
}

struct ModuleEntry {
  const char* name;
  void (*check)(OptionsReader& read);
};

const std::vector<ModuleEntry>& module_entries() {
  static const std::vector<ModuleEntry> entries = {
      {"PositionalEncoding", &check_module<PositionalEncodingOptions>},
      {"LearnedPositionalEmbedding", &check_module<LearnedPositionalEmbeddingOptions>},
      {"TokenAndPositionEmbedding", &check_token_and_position_embedding},
      {"Timesteps", &check_module<TimestepEmbeddingOptions>},
      {"TimestepEmbedder", &check_module<TimestepEmbedderOptions>},
      {"AxialRotaryEmbedding", &check_module<AxialRotaryEmbeddingOptions>},
      {"VisionRotaryEmbedding", &check_module<VisionRotaryEmbeddingOptions>},
      {"ALiBi", &check_module<ALiBiOptions>},
      {"AttentionTemperature", &check_module<AttentionTemperatureOptions>},
      {"RelativePositionBias", &check_module<RelativePositionBiasOptions>},
      {"RelPositionalEncoding", &check_module<RelPositionalEncodingOptions>},
      {"RelPositionMultiheadAttention", &check_module<RelPositionMultiheadAttentionOptions>},
  };
  return entries;
}

constexpr const char* kOp = "posenc::check_module_options";

void check_module_options(c10::string_view module, c10::string_view options) {
  const ModuleEntry* entry = nullptr;
  std::ostringstream names;
  for (const ModuleEntry& candidate : module_entries()) {
    names << (&candidate == &module_entries().front() ? "" : ", ") << candidate.name;
    if (module == candidate.name) {
      entry = &candidate;
    }
  }
  TORCH_CHECK(entry != nullptr, kOp, ": module must name a posenc module with options (",
              names.str(),
              "; RotaryEmbedding's are checked by rotary_embedding_frequencies), "
              "but got '",
              std::string(module), "'");
  detail::check_json_limits(options, detail::kMaxOptionTextBytes, std::string(kOp) + ": options");
  const json parsed = json::parse(options.begin(), options.end(), nullptr,
                                  /*allow_exceptions=*/false);
  TORCH_CHECK(parsed.is_object(), kOp, ": options must be a JSON object of ", entry->name,
              "'s keyword arguments (e.g. {\"d_model\": 512}), but got '", std::string(options),
              "'");
  const detail::CallerScope caller(entry->name);
  OptionsReader read(parsed);
  entry->check(read);
}

} // namespace

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def("check_module_options(str module, str options) -> ()");
}

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("check_module_options", &check_module_options);
}

} // namespace ops
} // namespace posenc
