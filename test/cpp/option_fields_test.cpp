// The field tables of the module options (<posenc/options/fields.h>) and what is derived from
// them: posenc.nn's keyword arguments read from JSON (ops::read_options), pretty_print
// (detail::print_options) and the TorchScript attributes. Each table is walked field by field, so
// a new table line is tested by the line itself.

#include "detail/print_options.h"
#include "ops/common/options_reader.h"

#include <posenc/export.h>
#include <posenc/modules/attention_bias.h>
#include <posenc/modules/learned_positional_embedding.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/modules/token_and_position_embedding.h>
#include <posenc/modules/vision.h>
#include <posenc/options/fields.h>

#include <torch/csrc/jit/api/module.h>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using nlohmann::json;

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<c10::optional<T>> : std::true_type {};

// A value of the option's type other than `value`.
template <typename T>
T changed(const T& value) {
  if constexpr (std::is_same<T, bool>::value) {
    return !value;
  } else if constexpr (std::is_same<T, int64_t>::value || std::is_same<T, double>::value) {
    return value + 3;
  } else if constexpr (is_optional<T>::value) {
    return value.value_or(0) + 3;
  } else if constexpr (std::is_same<T, std::vector<int64_t>>::value) {
    T longer = value;
    longer.push_back(6);
    return longer;
  } else {
    static_assert(std::is_enum<T>::value, "a type the tables do not use");
    const auto& names = posenc::EnumNames<T>::values;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i].value == value) {
        return names[(i + 1) % names.size()].value;
      }
    }
    return value;
  }
}

// The value as posenc.nn sends it.
template <typename T>
json as_json(const T& value) {
  if constexpr (is_optional<T>::value) {
    return value.has_value() ? json(*value) : json(nullptr);
  } else if constexpr (std::is_enum<T>::value) {
    return posenc::enum_name(value);
  } else {
    return value;
  }
}

template <typename Options>
Options read(const json& keywords) {
  const posenc::detail::CallerScope caller("TestModule");
  posenc::ops::OptionsReader reader(keywords);
  return posenc::ops::read_options<Options>(reader);
}

// Whether `text` shows `name` as an option ("(name=" or " name=").
bool shows(const std::string& text, const char* name) {
  const std::string option = std::string(name) + "=";
  return text.find("(" + option) != std::string::npos ||
         text.find(" " + option) != std::string::npos;
}

template <typename Options>
std::string printed(const Options& options) {
  std::ostringstream stream;
  posenc::detail::print_options(stream, "TestModule", options);
  return stream.str();
}

// Each field: its name once; JSON of every option changed reads back to those values; a field
// alone given as a string is refused under its name; an unknown key is refused; pretty_print
// shows each field as its flags say.
template <typename Options>
void expect_table_drives_the_options(const Options& base) {
  constexpr size_t constructor_arguments = posenc::OptionTable<Options>::kConstructorArguments;
  std::set<std::string> names;
  json keywords = json::object();
  Options expected = base;
  size_t index = 0;
  posenc::for_each_option<Options>([&](const auto& field) {
    EXPECT_TRUE(names.insert(field.name).second) << field.name << " twice";
    if (index++ < constructor_arguments) {
      keywords[field.name] = as_json(field.get(base));
      return;
    }
    field.ref(expected) = changed(field.get(base));
    keywords[field.name] = as_json(field.get(expected));
  });

  const Options read_back = read<Options>(keywords);
  posenc::for_each_option<Options>([&](const auto& field) {
    EXPECT_TRUE(field.get(read_back) == field.get(expected)) << field.name;
  });
  // the constructor's arguments alone: every other option at its default
  json arguments = json::object();
  index = 0;
  posenc::for_each_option<Options>([&](const auto& field) {
    if (index++ < constructor_arguments) {
      arguments[field.name] = keywords[field.name];
    }
  });
  const Options defaults = read<Options>(arguments);
  posenc::for_each_option<Options>([&](const auto& field) {
    EXPECT_TRUE(field.get(defaults) == field.get(posenc::option_defaults(base))) << field.name;
  });

  posenc::for_each_option<Options>([&](const auto& field) {
    json wrong = arguments;
    wrong[field.name] = "not-a-value";
    try {
      read<Options>(wrong);
      ADD_FAILURE() << field.name << " read a string of no meaning";
    } catch (const c10::Error& error) {
      EXPECT_NE(std::string(error.what_without_backtrace())
                    .find(": " + std::string(field.name) + " must"),
                std::string::npos)
          << error.what_without_backtrace();
    }
  });
  // None: the default where the line says kNullable, refused elsewhere
  posenc::for_each_option<Options>([&](const auto& field) {
    json with_none = arguments;
    with_none[field.name] = nullptr;
    if (field.has(posenc::kNullable)) {
      EXPECT_TRUE(field.get(read<Options>(with_none)) == field.get(defaults)) << field.name;
      return;
    }
    try {
      read<Options>(with_none);
      ADD_FAILURE() << field.name << " took None";
    } catch (const c10::Error& error) {
      EXPECT_NE(std::string(error.what_without_backtrace())
                    .find(": " + std::string(field.name) + " must not be None"),
                std::string::npos)
          << error.what_without_backtrace();
    }
  });
  json unknown = arguments;
  unknown["no_such_option"] = 1;
  EXPECT_THROW(read<Options>(unknown), c10::Error);

  const std::string at_defaults = printed(defaults);
  const std::string all_changed = printed(expected);
  posenc::for_each_option<Options>([&](const auto& field) {
    const bool never = field.has(posenc::kShowNever);
    const bool if_changed = field.has(posenc::kShowIfChanged);
    EXPECT_EQ(shows(at_defaults, field.name), !never && !if_changed)
        << at_defaults << " / " << field.name;
    EXPECT_EQ(shows(all_changed, field.name), !never) << all_changed << " / " << field.name;
  });
}

TEST(OptionFields, EveryTableReadsAndPrintsItsFields) {
  expect_table_drives_the_options(posenc::PositionalEncodingOptions(16, 32));
  expect_table_drives_the_options(posenc::LearnedPositionalEmbeddingOptions(16, 32));
  expect_table_drives_the_options(posenc::TokenAndPositionEmbeddingOptions(100, 16, 32));
  expect_table_drives_the_options(posenc::TimestepEmbeddingOptions(16));
  expect_table_drives_the_options(posenc::TimestepEmbedderOptions(32));
  expect_table_drives_the_options(posenc::AxialRotaryEmbeddingOptions({8, 8}));
  expect_table_drives_the_options(posenc::VisionRotaryEmbeddingOptions(16));
  expect_table_drives_the_options(posenc::ALiBiOptions(8));
  expect_table_drives_the_options(posenc::AttentionTemperatureOptions());
  expect_table_drives_the_options(posenc::RelativePositionBiasOptions(4));
  expect_table_drives_the_options(posenc::RelPositionalEncodingOptions(16));
  expect_table_drives_the_options(posenc::RelPositionMultiheadAttentionOptions(16, 4));
}

TEST(OptionFields, DefaultsFollowTheConstructor) {
  // TokenAndPositionEmbedding's scale starts at sqrt(d_model): read from the constructor's
  // arguments, not from a fixed default
  const auto options = read<posenc::TokenAndPositionEmbeddingOptions>(
      {{"vocab_size", 10}, {"d_model", 64}, {"max_len", 8}});
  EXPECT_EQ(options.scale(), 8.0);
  EXPECT_EQ(posenc::option_defaults(posenc::TokenAndPositionEmbeddingOptions(10, 64, 8).scale(2.0))
                .scale(),
            8.0);
}

template <typename Module>
std::string pretty(const Module& module, bool odd_flags = false) {
  std::ostringstream stream;
  if (odd_flags) {
    stream << std::fixed << std::hex << std::showpos << std::noboolalpha;
  }
  module->pretty_print(stream);
  return stream.str();
}

// The printouts the modules' hand-written pretty_print gave before the tables (commit 30678e2),
// for their defaults and for every option changed; the same whatever the stream's format flags.
TEST(OptionFields, PrintoutsAreThoseOfTheHandWrittenOnes) {
  using namespace posenc;
  const std::vector<std::pair<std::string, std::string>> printouts = {
      {pretty(PositionalEncoding(PositionalEncodingOptions(16, 32))),
       "posenc::PositionalEncoding(d_model=16, max_len=32, dropout=0, batch_first=true)"},
      {pretty(PositionalEncoding(PositionalEncodingOptions(16, 32)
                                     .base(500)
                                     .dropout(0.1)
                                     .batch_first(false)
                                     .layout(ChannelLayout::kConcatenated)
                                     .spacing(FrequencySpacing::kTensor2Tensor)
                                     .beyond_max_len(BeyondMaxLen::kExtrapolate)
                                     .scale(2.5)
                                     .inplace(true))),
       "posenc::PositionalEncoding(d_model=16, max_len=32, base=500, dropout=0.1, "
       "batch_first=false, layout=concatenated, spacing=tensor2tensor, "
       "beyond_max_len=extrapolate, scale=2.5, inplace=true)"},
      {pretty(LearnedPositionalEmbedding(LearnedPositionalEmbeddingOptions(16, 32))),
       "posenc::LearnedPositionalEmbedding(d_model=16, max_len=32, dropout=0, batch_first=true)"},
      {pretty(LearnedPositionalEmbedding(LearnedPositionalEmbeddingOptions(16, 32)
                                             .init_std(0.1)
                                             .dropout(0.2)
                                             .batch_first(false)
                                             .scale(0.5)
                                             .inplace(true))),
       "posenc::LearnedPositionalEmbedding(d_model=16, max_len=32, dropout=0.2, "
       "batch_first=false, scale=0.5, inplace=true)"},
      {pretty(TokenAndPositionEmbedding(TokenAndPositionEmbeddingOptions(100, 16, 32))),
       "posenc::TokenAndPositionEmbedding(vocab_size=100, d_model=16, max_len=32, "
       "positions=sinusoidal, scale=4, dropout=0, batch_first=true)"},
      {pretty(TokenAndPositionEmbedding(TokenAndPositionEmbeddingOptions(100, 16, 32)
                                            .positions(PositionKind::kLearned)
                                            .scale(1.5)
                                            .padding_idx(0)
                                            .dropout(0.1)
                                            .batch_first(false)
                                            .base(100))),
       "posenc::TokenAndPositionEmbedding(vocab_size=100, d_model=16, max_len=32, "
       "positions=learned, scale=1.5, padding_idx=0, dropout=0.1, batch_first=false)"},
      {pretty(Timesteps(TimestepEmbeddingOptions(16))), "posenc::Timesteps(embedding_dim=16)"},
      {pretty(Timesteps(TimestepEmbeddingOptions(16)
                            .flip_sin_to_cos(true)
                            .downscale_freq_shift(0)
                            .scale(2)
                            .max_period(100))),
       "posenc::Timesteps(embedding_dim=16, flip_sin_to_cos=true, downscale_freq_shift=0, "
       "scale=2, max_period=100)"},
      {pretty(TimestepEmbedder(TimestepEmbedderOptions(32))),
       "posenc::TimestepEmbedder(hidden_size=32, frequency_embedding_size=256)"},
      {pretty(TimestepEmbedder(
           TimestepEmbedderOptions(32).frequency_embedding_size(64).max_period(100))),
       "posenc::TimestepEmbedder(hidden_size=32, frequency_embedding_size=64)"},
      {pretty(AxialRotaryEmbedding(AxialRotaryEmbeddingOptions({8, 8}))),
       "posenc::AxialRotaryEmbedding(axes_dim=[8, 8])"},
      {pretty(AxialRotaryEmbedding(AxialRotaryEmbeddingOptions({8, 8})
                                       .theta(100)
                                       .pairing(RotaryPairing::kHalfSplit)
                                       .heads_first(true))),
       "posenc::AxialRotaryEmbedding(axes_dim=[8, 8], theta=100, pairing=half_split, "
       "heads_first=true)"},
      {pretty(VisionRotaryEmbedding(VisionRotaryEmbeddingOptions(16))),
       "posenc::VisionRotaryEmbedding(dim=16)"},
      {pretty(VisionRotaryEmbedding(VisionRotaryEmbeddingOptions(16)
                                        .temperature(100)
                                        .ref_feat_shape({4, 4})
                                        .grid_offset(0.5)
                                        .grid_indexing(GridIndexing::kXY)
                                        .pairing(RotaryPairing::kHalfSplit)
                                        .num_prefix_tokens(0)
                                        .heads_first(false))),
       "posenc::VisionRotaryEmbedding(dim=16, temperature=100, ref_feat_shape=[4, 4], "
       "grid_offset=0.5, grid_indexing=xy, pairing=half_split, num_prefix_tokens=0, "
       "heads_first=false)"},
      {pretty(ALiBi(ALiBiOptions(8))), "posenc::ALiBi(num_heads=8)"},
      {pretty(ALiBi(ALiBiOptions(8).max_bias(16))), "posenc::ALiBi(num_heads=8, max_bias=16)"},
      {pretty(ALiBi(ALiBiOptions(32).first_head(8).heads(8))),
       "posenc::ALiBi(num_heads=32, first_head=8, heads=8)"},
      {pretty(ALiBi(ALiBiOptions(32).first_head(8))),
       "posenc::ALiBi(num_heads=32, first_head=8, heads=24)"},
      {pretty(AttentionTemperature(AttentionTemperatureOptions())),
       "posenc::AttentionTemperature(form=llama4, floor_scale=8192, attn_scale=0.1, "
       "heads_first=false)"},
      {pretty(AttentionTemperature(AttentionTemperatureOptions()
                                       .form(AttentionTemperatureForm::kMinistral3)
                                       .floor_scale(4096)
                                       .attn_scale(0.5)
                                       .heads_first(true))),
       "posenc::AttentionTemperature(form=ministral3, floor_scale=4096, attn_scale=0.5, "
       "heads_first=true)"},
      {pretty(RelativePositionBias(RelativePositionBiasOptions(4))),
       "posenc::RelativePositionBias(num_heads=4, num_buckets=32, max_distance=128, "
       "bidirectional=true)"},
      {pretty(RelativePositionBias(
           RelativePositionBiasOptions(4).num_buckets(16).max_distance(64).bidirectional(false))),
       "posenc::RelativePositionBias(num_heads=4, num_buckets=16, max_distance=64, "
       "bidirectional=false)"},
      {pretty(RelPositionalEncoding(RelPositionalEncodingOptions(16))),
       "posenc::RelPositionalEncoding(d_model=16, max_len=5000)"},
      {pretty(RelPositionalEncoding(RelPositionalEncodingOptions(16)
                                        .max_len(64)
                                        .dropout(0.1)
                                        .scale_input(false)
                                        .legacy(true)
                                        .base(100))),
       "posenc::RelPositionalEncoding(d_model=16, max_len=64, dropout=0.1, scale_input=false, "
       "legacy=true, base=100)"},
      {pretty(RelPositionMultiheadAttention(RelPositionMultiheadAttentionOptions(16, 4))),
       "posenc::RelPositionMultiheadAttention(embed_dim=16, num_heads=4, dropout=0)"},
      {pretty(
           RelPositionMultiheadAttention(RelPositionMultiheadAttentionOptions(16, 4).dropout(0.1))),
       "posenc::RelPositionMultiheadAttention(embed_dim=16, num_heads=4, dropout=0.1)"},
  };
  for (const auto& [printed_text, expected] : printouts) {
    EXPECT_EQ(printed_text, expected);
  }
  // whatever the stream's format flags
  EXPECT_EQ(pretty(ALiBi(ALiBiOptions(32).first_head(8).max_bias(16)), /*odd_flags=*/true),
            "posenc::ALiBi(num_heads=32, max_bias=16, first_head=8, heads=24)");
  EXPECT_EQ(
      pretty(RelPositionalEncoding(RelPositionalEncodingOptions(16).dropout(0.1).legacy(true)),
             /*odd_flags=*/true),
      "posenc::RelPositionalEncoding(d_model=16, max_len=5000, dropout=0.1, legacy=true)");
}

// The exported module holds each kTorchScript option under its name, with its value.
template <typename Options, typename Module>
void expect_attributes(const Module& module, const Options& options) {
  const torch::jit::Module exported = posenc::to_torchscript(*module);
  int registered = 0;
  posenc::for_each_option<Options>([&](const auto& field) {
    if (!field.has(posenc::kTorchScript)) {
      return;
    }
    ++registered;
    ASSERT_TRUE(exported.hasattr(field.name)) << field.name;
    const c10::IValue value = exported.attr(field.name);
    using T = typename std::decay_t<decltype(field)>::type;
    if constexpr (std::is_same<T, bool>::value) {
      EXPECT_EQ(value.toBool(), field.get(options)) << field.name;
    } else if constexpr (std::is_same<T, int64_t>::value) {
      EXPECT_EQ(value.toInt(), field.get(options)) << field.name;
    } else if constexpr (std::is_same<T, double>::value) {
      EXPECT_EQ(value.toDouble(), field.get(options)) << field.name;
    } else if constexpr (std::is_same<T, std::vector<int64_t>>::value) {
      EXPECT_EQ(value.toIntVector(), field.get(options)) << field.name;
    } else if constexpr (std::is_enum<T>::value) {
      EXPECT_EQ(value.toStringRef(), posenc::enum_name(field.get(options))) << field.name;
    } else {
      ADD_FAILURE() << field.name << " has a type TorchScript attributes do not take";
    }
  });
  EXPECT_GT(registered, 0);
}

TEST(OptionFields, TorchScriptAttributesAreTheTablesOptions) {
  const auto sinusoidal = posenc::PositionalEncodingOptions(16, 32).batch_first(false).scale(2.0);
  expect_attributes(posenc::PositionalEncoding(sinusoidal), sinusoidal);
  const auto learned = posenc::LearnedPositionalEmbeddingOptions(16, 32).scale(0.5);
  expect_attributes(posenc::LearnedPositionalEmbedding(learned), learned);
  const auto tokens = posenc::TokenAndPositionEmbeddingOptions(100, 16, 32).batch_first(false);
  expect_attributes(posenc::TokenAndPositionEmbedding(tokens), tokens);
  const auto embedder = posenc::TimestepEmbedderOptions(32);
  expect_attributes(posenc::TimestepEmbedder(embedder), embedder);
  const auto axial = posenc::AxialRotaryEmbeddingOptions({8, 8}).theta(100.0).heads_first(true);
  expect_attributes(posenc::AxialRotaryEmbedding(axial), axial);
  const auto vision = posenc::VisionRotaryEmbeddingOptions(16)
                          .ref_feat_shape({4, 4})
                          .grid_indexing(posenc::GridIndexing::kXY)
                          .num_prefix_tokens(2);
  expect_attributes(posenc::VisionRotaryEmbedding(vision), vision);
  const auto temperature = posenc::AttentionTemperatureOptions()
                               .form(posenc::AttentionTemperatureForm::kMinistral3)
                               .floor_scale(4096.0);
  expect_attributes(posenc::AttentionTemperature(temperature), temperature);
  const auto t5 = posenc::RelativePositionBiasOptions(4).max_distance(64);
  expect_attributes(posenc::RelativePositionBias(t5), t5);
  const auto relative = posenc::RelPositionalEncodingOptions(16).max_len(64).legacy(true);
  expect_attributes(posenc::RelPositionalEncoding(relative), relative);
  const auto attention = posenc::RelPositionMultiheadAttentionOptions(16, 4);
  expect_attributes(posenc::RelPositionMultiheadAttention(attention), attention);
}

} // namespace
