// Every error posenc::PositionalEncoding raises: one test per message, each also checking that
// the module is unchanged afterwards.

#include <posenc/io/hf_config.h>
#include <posenc/posenc.h>

#include "test_util.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <functional>
#include <thread>
#include <limits>
#include <string>
#include <vector>

using posenc::PositionalEncoding;
using posenc::PositionalEncodingOptions;

namespace {

class PositionalEncodingErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
  }

  PositionalEncoding module{PositionalEncodingOptions(8, 16).dropout(0.1)};
  torch::Tensor table_before = module->pe.clone();

  // The module is exactly as it was built: options, buffer identity, values and dtype.
  void expect_unchanged() const {
    EXPECT_EQ(module->options.d_model(), 8);
    EXPECT_EQ(module->options.max_len(), 16);
    EXPECT_EQ(module->options.dropout(), 0.1);
    ASSERT_EQ(module->named_buffers().size(), 1u);
    EXPECT_TRUE(module->pe.is_same(module->named_buffers()["pe"]));
    EXPECT_TRUE(torch::equal(module->pe, table_before));
  }
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

} // namespace

TEST_F(PositionalEncodingErrors, DModelBelowOne) {
  EXPECT_POSENC_ERROR(PositionalEncoding(0, 16),
                      "PositionalEncoding: d_model must be >= 1, but got 0; pass the width");
}

TEST_F(PositionalEncodingErrors, MaxLenBelowOne) {
  EXPECT_POSENC_ERROR(PositionalEncoding(8, -1),
                      "PositionalEncoding: max_len must be >= 1, but got -1");
}

TEST_F(PositionalEncodingErrors, DropoutOutsideUnitInterval) {
  for (const double p : {-0.1, 1.5, kNaN}) {
    EXPECT_POSENC_ERROR(PositionalEncoding(PositionalEncodingOptions(8, 16).dropout(p)),
                        "PositionalEncoding: dropout must be in [0, 1], but got ");
  }
}

TEST_F(PositionalEncodingErrors, BaseNotPositiveOrNotFinite) {
  for (const double base : {0.0, -10000.0, kInf, kNaN}) {
    EXPECT_POSENC_ERROR(PositionalEncoding(PositionalEncodingOptions(8, 16).base(base)),
                        "PositionalEncoding: base must be finite and >= 5.2e-290");
  }
}

TEST_F(PositionalEncodingErrors, TableTooLarge) {
  EXPECT_POSENC_ERROR(PositionalEncoding(int64_t{1} << 16, int64_t{1} << 16),
                      "PositionalEncoding: a table of max_len * d_model = 65536 * 65536 elements "
                      "is over posenc's limit of 2^28 elements");
}

TEST_F(PositionalEncodingErrors, ResetWithInvalidOptionsKeepsTable) {
  module->options.d_model(0);
  EXPECT_POSENC_ERROR(module->reset(), "PositionalEncoding: d_model must be >= 1, but got 0");
  module->options.d_model(8);
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, InputRankNotThree) {
  EXPECT_POSENC_ERROR(
      module(torch::randn({16, 8})),
      "PositionalEncoding: expected a 3-D input of shape [B, L, D] (batch_first=true), but got a "
      "2-D tensor of shape [16, 8]; add the missing dimension, e.g. x.unsqueeze(0)");
  EXPECT_POSENC_ERROR(module(torch::randn({1, 2, 16, 8})),
                      "but got a 4-D tensor of shape [1, 2, 16, 8]");
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, InputRankNotThreeSequenceFirst) {
  PositionalEncoding seq_first(PositionalEncodingOptions(8, 16).batch_first(false));
  EXPECT_POSENC_ERROR(seq_first(torch::randn({16, 8})),
                      "expected a 3-D input of shape [L, B, D] (batch_first=false), but got a 2-D "
                      "tensor of shape [16, 8]; add the missing dimension, e.g. x.unsqueeze(1)");
}

TEST_F(PositionalEncodingErrors, LastDimensionNotDModel) {
  EXPECT_POSENC_ERROR(module(torch::randn({2, 4, 6})),
                      "PositionalEncoding: expected the last dimension of the input to be d_model "
                      "= 8, but got 6 (input shape [2, 4, 6])");
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, NonFloatingInput) {
  EXPECT_POSENC_ERROR(module(torch::ones({2, 4, 8}, torch::kLong)),
                      "PositionalEncoding: expected a floating-point input (float16, bfloat16, "
                      "float32 or float64), but got Long; embed integer token ids first");
  EXPECT_POSENC_ERROR(module(torch::ones({2, 4, 8}, torch::kBool)), "but got Bool");
  EXPECT_POSENC_ERROR(module(torch::ones({2, 4, 8}, torch::kComplexFloat)), "but got ComplexFloat");
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, UndefinedInput) {
  EXPECT_POSENC_ERROR(module(torch::Tensor()),
                      "PositionalEncoding: expected an input tensor of shape [B, L, D] "
                      "(batch_first=true), but got an undefined tensor");
}

TEST_F(PositionalEncodingErrors, NegativeOffset) {
  EXPECT_POSENC_ERROR(module(torch::randn({2, 4, 8}), -1),
                      "PositionalEncoding: offset must be >= 0, but got -1");
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, PositionsPastMaxLen) {
  EXPECT_POSENC_ERROR(module(torch::randn({2, 5, 8}), 12),
                      "PositionalEncoding: positions offset .. offset + L - 1 must lie in the "
                      "table, i.e. offset + L <= max_len (16), but got L = 5 and offset = 12 "
                      "(offset + L = 17); build the module with a larger max_len");
  EXPECT_POSENC_ERROR(module(torch::randn({2, 17, 8})),
                      "but got L = 17 and offset = 0 (offset + L = 17)");
  EXPECT_POSENC_ERROR(module(torch::randn({2, 1, 8}), std::numeric_limits<int64_t>::max()),
                      "PositionalEncoding: offset + L must fit in int64, but got offset = "
                      "9223372036854775807 and L = 1");
  expect_unchanged();
}

// The meta device stands in for a second device on machines without a GPU.
TEST_F(PositionalEncodingErrors, InputOnAnotherDevice) {
  EXPECT_POSENC_ERROR(module(torch::empty({2, 4, 8}, torch::Device(torch::kMeta))),
                      "PositionalEncoding: expected the input on the device of the encoding table "
                      "(cpu), but got an input on meta; move the module with module->to(meta)");
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, ToNonFloatingDtype) {
  EXPECT_POSENC_ERROR(module->to(torch::kInt),
                      "PositionalEncoding: the dtype passed to to() must be float16, bfloat16, "
                      "float32 or float64, but got Int");
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, LoadCheckpointWithOtherShape) {
  const std::string path =
      testing::TempDir() + "pe_other_shape_" + std::to_string(::getpid()) + ".pt";
  torch::save(PositionalEncoding(8, 32), path);
  EXPECT_POSENC_ERROR(
      torch::load(module, path),
      "PositionalEncoding: the checkpoint's pe has shape [1, 32, 8], but this module's is [1, 16, "
      "8]; build the module with the options the checkpoint was saved with");
  std::remove(path.c_str());
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, LoadCheckpointWithNonFiniteTable) {
  const std::string path = testing::TempDir() + "pe_nan_" + std::to_string(::getpid()) + ".pt";
  PositionalEncoding corrupted(8, 16);
  corrupted->pe[0][3][2] = kNaN;
  torch::save(corrupted, path);
  EXPECT_POSENC_ERROR(torch::load(module, path),
                      "PositionalEncoding: the checkpoint's pe holds NaN or infinite values");
  std::remove(path.c_str());
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, LoadMissingFile) {
  EXPECT_THROW(torch::load(module, "/nonexistent/pe.pt"), c10::Error);
  expect_unchanged();
}

TEST_F(PositionalEncodingErrors, FunctionalTableOfWrongShape) {
  namespace F = posenc::functional;
  EXPECT_POSENC_ERROR(F::positional_encoding(torch::randn({2, 4, 8}), torch::randn({2, 16, 8})),
                      "positional_encoding: expected the encoding table as [max_len, D] or [1, "
                      "max_len, D], but got shape [2, 16, 8]");
  EXPECT_POSENC_ERROR(F::positional_encoding(torch::randn({2, 4, 8}),
                                             F::sinusoidal_table(16, 8),
                                             F::PositionalEncodingFuncOptions().dropout(2)),
                      "positional_encoding: dropout must be in [0, 1], but got 2");
}

// ---- the options' checks, once for both front ends ---------------------------------------------

// posenc::check_module_options (what posenc.nn's constructors call) and the C++ module's
// constructor raise the same message for the same options: both run ops::check_options.
namespace {
std::string options_error(const std::string& module, const std::string& options) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("posenc::check_module_options", "")
                             .typed<void(c10::string_view, c10::string_view)>();
  return posenc_test::error_message([&] { op.call(module, options); });
}
} // namespace

TEST(ModuleOptions, OperatorAndConstructorsRaiseTheSameMessage) {
  using namespace posenc;
  struct Case {
    const char* module;
    const char* options;
    std::function<void()> construct;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"PositionalEncoding", R"({"d_model": 0, "max_len": 8})", [] { PositionalEncoding(0, 8); },
       "PositionalEncoding: d_model must be >= 1, but got 0"},
      {"PositionalEncoding", R"({"d_model": 4, "max_len": 8, "scale": "inf"})",
       [] { PositionalEncoding(PositionalEncodingOptions(4, 8).scale(kInf)); },
       "PositionalEncoding: scale must be finite, but got inf"},
      {"LearnedPositionalEmbedding", R"({"d_model": 4, "max_len": 4611686018427387904})",
       [] { LearnedPositionalEmbedding(4, int64_t{1} << 62); },
       "LearnedPositionalEmbedding: a table of max_len * d_model = 4611686018427387904 * 4 "
       "elements is over posenc's limit of 2^28 elements"},
      {"LearnedPositionalEmbedding", R"({"d_model": 4, "max_len": 8, "init_std": "nan"})",
       [] { LearnedPositionalEmbedding(LearnedPositionalEmbeddingOptions(4, 8).init_std(kNaN)); },
       "LearnedPositionalEmbedding: init_std must be finite and >= 0, but got nan"},
      {"TokenAndPositionEmbedding", R"({"vocab_size": 10, "d_model": 4, "max_len": 0})",
       [] { TokenAndPositionEmbedding(10, 4, 0); },
       "TokenAndPositionEmbedding: max_len must be >= 1, but got 0"},
      {"TokenAndPositionEmbedding",
       R"({"vocab_size": 4611686018427387904, "d_model": 4, "max_len": 8})",
       [] { TokenAndPositionEmbedding(int64_t{1} << 62, 4, 8); },
       "TokenAndPositionEmbedding: a token table of vocab_size * d_model = 4611686018427387904 * "
       "4 elements"},
      {"TokenAndPositionEmbedding",
       R"({"vocab_size": 10, "d_model": 4, "max_len": 8, "padding_idx": 10})",
       [] {
         TokenAndPositionEmbedding(TokenAndPositionEmbeddingOptions(10, 4, 8).padding_idx(10));
       },
       "TokenAndPositionEmbedding: padding_idx must be in [0, vocab_size) = [0, 10), but got 10"},
      {"Timesteps", R"({"embedding_dim": 1})", [] { Timesteps(1); },
       "Timesteps: embedding_dim must be in [2, 2^28]"},
      {"TimestepEmbedder", R"({"hidden_size": 0})", [] { TimestepEmbedder(0); },
       "TimestepEmbedder: hidden_size must be >= 1, but got 0"},
      {"AxialRotaryEmbedding", R"({"axes_dim": [4, 3]})",
       [] {
         AxialRotaryEmbedding(AxialRotaryEmbeddingOptions({4, 3}));
       },
       "AxialRotaryEmbedding: every axes_dim must be even and >= 2"},
      {"VisionRotaryEmbedding", R"({"dim": 8, "num_prefix_tokens": -1})",
       [] { VisionRotaryEmbedding(VisionRotaryEmbeddingOptions(8).num_prefix_tokens(-1)); },
       "VisionRotaryEmbedding: num_prefix_tokens must be in [0, 2^28]"},
      {"ALiBi", R"({"num_heads": 4, "max_bias": 0.0})",
       [] { ALiBi(ALiBiOptions(4).max_bias(0.0)); }, "ALiBi: max_bias must be in (0, 64]"},
      {"AttentionTemperature", R"({"floor_scale": 0.0})",
       [] { AttentionTemperature(AttentionTemperatureOptions().floor_scale(0.0)); },
       "AttentionTemperature: floor_scale"},
      {"RelativePositionBias", R"({"num_heads": 2, "num_buckets": 2})",
       [] { RelativePositionBias(RelativePositionBiasOptions(2).num_buckets(2)); },
       "RelativePositionBias: num_buckets must be >= 4 when bidirectional"},
      {"RelPositionalEncoding", R"({"d_model": 4, "dropout": 1.5})",
       [] { RelPositionalEncoding(RelPositionalEncodingOptions(4).dropout(1.5)); },
       "RelPositionalEncoding: dropout must be in [0, 1], but got 1.5"},
      {"RelPositionMultiheadAttention", R"({"embed_dim": 6, "num_heads": 4})",
       [] { RelPositionMultiheadAttention(6, 4); },
       "RelPositionMultiheadAttention: embed_dim must be a positive multiple of num_heads >= 1, "
       "but got embed_dim = 6 and num_heads = 4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.module) + " " + c.options);
    const std::string from_op = options_error(c.module, c.options);
    EXPECT_NE(from_op.find(c.message), std::string::npos) << from_op;
    EXPECT_EQ(from_op, posenc_test::error_message(c.construct));
  }
}

// posenc.nn.RotaryEmbedding's options text (rotary_embedding_frequencies, what its constructor
// calls) is read by the same reader as the other modules' and checked by ops::rotary_module_call,
// which the C++ module's reset() calls: a number that is not finite, spelled "nan" / "inf" in the
// text, gets the C++ module's message.
TEST(ModuleOptions, RotaryEmbeddingTextAndConstructorRaiseTheSameMessage) {
  using namespace posenc;
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("posenc::rotary_embedding_frequencies", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(c10::string_view)>();
  const auto text_error = [](const std::string& text) {
    return posenc_test::error_message([&] { op.call(text); });
  };
  const std::string base_error = text_error(R"({"head_dim": 4, "max_len": 8, "base": "nan"})");
  EXPECT_NE(base_error.find("RotaryEmbedding: base must be finite and >= 5.2e-290"),
            std::string::npos)
      << base_error;
  EXPECT_EQ(base_error, posenc_test::error_message(
                            [] { RotaryEmbedding(RotaryEmbeddingOptions(4, 8).base(kNaN)); }));
  const std::string factors_error =
      text_error(R"({"head_dim": 4, "max_len": 8, "freq_factors": [1, "-inf"]})");
  EXPECT_NE(factors_error.find("RotaryEmbedding: freq_factors must hold finite numbers > 0"),
            std::string::npos)
      << factors_error;
  EXPECT_EQ(factors_error, posenc_test::error_message([] {
              RotaryEmbedding(RotaryEmbeddingOptions(4, 8).freq_factors({1.0, -kInf}));
            }));
  // rope parameters: spelled numbers are read where a number is, then checked
  EXPECT_EQ(text_error(R"({"head_dim": 4, "max_len": 8, "rope_parameters": )"
                       R"({"rope_type": "linear", "factor": "inf"}})"),
            "RotaryEmbedding: rope_parameters.factor must be finite, but is inf");
  EXPECT_EQ(text_error(R"({"head_dim": 4, "max_len": 8, "rope_parameters": )"
                       R"({"rope_type": "linear", "factor": 2, "truncate": "nan"}})"),
            "RotaryEmbedding: rope_parameters.truncate must be true or false, but is a string");
  // the reader of the other modules' keyword arguments
  EXPECT_EQ(text_error(R"({"head_dim": 4.5, "max_len": 8})"),
            "RotaryEmbedding: head_dim must be an integer in int64's range, but got 4.5");
  EXPECT_EQ(text_error(R"({"head_dim": 4, "max_len": 8, "base": true})"),
            "RotaryEmbedding: base must be a number, but got true");
  EXPECT_EQ(text_error(R"({"head_dim": 4, "max_len": 8, "pairing": "nan"})"),
            "RotaryEmbedding: pairing must be one of 'half_split', 'interleaved', but got 'nan'");
  EXPECT_EQ(text_error(R"({"head_dim": 4, "max_len": 8, "heads": 2})"),
            "RotaryEmbedding has no option 'heads'; see its keyword arguments "
            "(help(posenc.nn.RotaryEmbedding))");
  EXPECT_EQ(
      text_error(R"({"head_dim": 4, "max_len": 8, "cached_len": null, "freq_factors": )"
                 R"(null, "mrope_section": null, "rope_parameters": {"rope_type": "default"}})"),
      "<no error>");
}

TEST(ModuleOptions, ValidOptionsPassAndMistakesInTheTextAreNamed) {
  EXPECT_EQ(options_error("PositionalEncoding", R"({"d_model": 4, "max_len": 8, "layout": )"
                                                R"("concatenated"})"),
            "<no error>");
  // null (None) is a default only where posenc.nn's default is None
  EXPECT_EQ(options_error("PositionalEncoding", R"({"d_model": 4, "max_len": 8, "layout": null})"),
            "PositionalEncoding: layout must not be None; leave it out for its default");
  EXPECT_EQ(options_error("ALiBi", R"({"num_heads": 4, "heads": null})"), "<no error>");
  EXPECT_EQ(options_error("VisionRotaryEmbedding", R"({"dim": 8, "ref_feat_shape": null})"),
            "<no error>");
  EXPECT_EQ(options_error("TokenAndPositionEmbedding",
                          R"({"vocab_size": 10, "d_model": 4, "max_len": 8, "scale": null})"),
            "<no error>");
  EXPECT_EQ(options_error("PositionalEncoding", R"({"d_model": 4, "max_len": 8, "layout": "x"})"),
            "PositionalEncoding: layout must be one of 'interleaved', 'concatenated', but got 'x'");
  EXPECT_EQ(options_error("PositionalEncoding", R"({"d_model": 4, "max_len": 8, "dmodel": 4})"),
            "PositionalEncoding has no option 'dmodel'; see its keyword arguments "
            "(help(posenc.nn.PositionalEncoding))");
  EXPECT_EQ(options_error("PositionalEncoding", R"({"d_model": 4.5, "max_len": 8})"),
            "PositionalEncoding: d_model must be an integer in int64's range, but got 4.5");
  EXPECT_EQ(
      options_error("PositionalEncoding", R"({"d_model": 4, "max_len": 9223372036854775808})"),
      "PositionalEncoding: max_len must be an integer in int64's range, but got "
      "9223372036854775808");
  EXPECT_EQ(options_error("PositionalEncoding", R"({"d_model": 4, "max_len": 8, "inplace": 1})"),
            "PositionalEncoding: inplace must be True or False, but got 1");
  EXPECT_EQ(options_error("PositionalEncoding", R"({"d_model": 4, "max_len": 8, "base": "x"})"),
            "PositionalEncoding: base must be a number, but got \"x\"");
  EXPECT_EQ(options_error("TokenAndPositionEmbedding",
                          R"({"vocab_size": 10, "d_model": 4, "max_len": 8, )"
                          R"("positions": "learned", "beyond_max_len": "extrapolate"})"),
            "TokenAndPositionEmbedding: learned positions cannot extrapolate past max_len; use "
            "positions='sinusoidal' or beyond_max_len='error'");
  EXPECT_NE(options_error("RotaryEmbedding", "{}")
                .find("posenc::check_module_options: module must name a posenc module with options "
                      "(PositionalEncoding, LearnedPositionalEmbedding"),
            std::string::npos);
  EXPECT_EQ(options_error("ALiBi", "[4]"),
            "posenc::check_module_options: options must be a JSON object of ALiBi's keyword "
            "arguments (e.g. {\"d_model\": 512}), but got '[4]'");
}

// ---- hostile JSON, float32 bounds and Meta kernels (reliability round 4) -----------------------

namespace {
std::string nested(size_t levels, const std::string& inner = "") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

// The message of `fn` run on a thread of its own (a thread's stack: what a text's depth does must
// not depend on the caller's stack size).
template <typename Fn>
std::string error_on_thread(Fn&& fn) {
  std::string message;
  std::thread thread([&] { message = posenc_test::error_message(fn); });
  thread.join();
  return message;
}

template <typename Fn>
std::string result_on_thread(Fn&& fn) {
  std::string result;
  std::thread thread([&] { result = fn(); });
  thread.join();
  return result;
}
} // namespace

// Every JSON text posenc reads is measured before it is parsed: nesting past 64 levels and option
// texts past 1 MiB are refused with a message naming the limit, never a stack overflow (200,000
// levels crashed every reader when the value was copied or printed for a message).
TEST(JsonLimits, DeepOptionTextsAreRefusedBeforeParsing) {
  static const auto frequencies =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("posenc::rotary_embedding_frequencies", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(c10::string_view)>();
  const std::string deep = nested(200000);
  const std::string module_error =
      result_on_thread([&] { return options_error("PositionalEncoding", "{\"d_model\": " + deep + "}"); });
  EXPECT_NE(module_error.find("posenc::check_module_options: options nests deeper than 64 levels "
                              "of objects and arrays (level 65 opens at byte 75)"),
            std::string::npos)
      << module_error.substr(0, 300);
  const std::string rotary_error = error_on_thread(
      [&] { frequencies.call("{\"head_dim\": 8, \"max_len\": 8, \"rope_parameters\": " + deep + "}"); });
  EXPECT_NE(rotary_error.find("posenc::rotary_embedding_frequencies: module nests deeper than 64 levels"),
            std::string::npos)
      << rotary_error.substr(0, 300);
  // 64 levels pass the limit and reach the reader, which names the wrong type.
  const std::string at_limit = options_error("ALiBi", "{\"num_heads\": " + nested(63, "4") + "}");
  EXPECT_EQ(at_limit.find("nests deeper"), std::string::npos) << at_limit;
  EXPECT_NE(at_limit.find("ALiBi"), std::string::npos) << at_limit;
  // (a bracket inside a string is not a level)
  EXPECT_EQ(options_error("ALiBi", "{\"num_heads\": 4, \"x\": \"" + std::string(100, '[') + "\"}")
                .find("nests deeper"),
            std::string::npos);
  const std::string large =
      options_error("ALiBi", "{\"num_heads\": 4, \"pad\": \"" + std::string(size_t{1} << 20, 'x') + "\"}");
  EXPECT_NE(large.find("bytes, more than the 1048576 bytes posenc reads in one JSON text"),
            std::string::npos)
      << large.substr(0, 300);
}

// The rope_parameters text of the rope_frequencies operator (transformers' block) is read with the
// same limits.
TEST(JsonLimits, DeepRopeParametersAreRefused) {
  const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("posenc::rope_frequencies", "");
  const auto call = [&](const std::string& text) {
    std::vector<c10::IValue> stack{c10::IValue(int64_t{8}), c10::IValue(10000.0), c10::IValue(text),
                                   c10::IValue(), c10::IValue(), c10::IValue(), c10::IValue(),
                                   c10::IValue()};
    op.callBoxed(&stack);
  };
  const std::string message = error_on_thread([&] { call("{\"factor\": " + nested(200000) + "}"); });
  EXPECT_NE(message.find("posenc::rope_frequencies: rope_parameters nests deeper than 64 levels"),
            std::string::npos)
      << message.substr(0, 300);
  EXPECT_NO_THROW(call(R"({"rope_type": "linear", "factor": 2.0})"));
}

// The float32 scales of AttentionTemperature stay finite for every option the checks pass: options
// that are finite in float64 but overflow float32 are refused (attn_scale = 1e39 gave inf and NaN,
// floor_scale = 1e-50 a division by float32's zero).
TEST(AttentionTemperatureBounds, OptionsThatOverflowFloat32AreRefused) {
  using posenc::AttentionTemperature;
  using posenc::AttentionTemperatureOptions;
  EXPECT_NE(posenc_test::error_message([] {
              AttentionTemperature(AttentionTemperatureOptions().attn_scale(1e39));
            }).find("AttentionTemperature: attn_scale must lie in [-2.65846e+36, 2.65846e+36]"),
            std::string::npos);
  EXPECT_NE(posenc_test::error_message([] {
              AttentionTemperature(AttentionTemperatureOptions().floor_scale(1e-50));
            }).find("AttentionTemperature: floor_scale must be >= 2^-62"),
            std::string::npos);
  EXPECT_NE(options_error("AttentionTemperature", R"({"attn_scale": -1e39})")
                .find("attn_scale must lie in"),
            std::string::npos);
  // At the bounds, the largest positions give finite scales in both forms.
  const double largest = static_cast<double>(std::numeric_limits<float>::max()) / 128;
  for (const auto form : {posenc::AttentionTemperatureForm::kLlama4,
                          posenc::AttentionTemperatureForm::kMinistral3}) {
    AttentionTemperature temperature(
        AttentionTemperatureOptions().floor_scale(0x1p-62).attn_scale(-largest).form(form));
    const torch::Tensor q = torch::ones({1, 3, 1, 2});
    const torch::Tensor positions =
        torch::tensor({int64_t{0}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()});
    const torch::Tensor scaled = temperature->forward_positions(q, positions);
    EXPECT_TRUE(torch::isfinite(scaled).all().item<bool>()) << scaled;
  }
}

// A Meta kernel refuses what the real kernel refuses: a program traced or exported with fake
// tensors must not accept a call its eager run refuses.
TEST(MetaKernels, RefuseWhatTheRealKernelsRefuse) {
  const auto meta = torch::TensorOptions().device(torch::kMeta);
  // mrope_position_ids: a meta grid among CPU tensors selected the Meta kernel, which returned CPU
  // tensors nobody wrote.
  const torch::Tensor token_types = torch::zeros({1, 4}, torch::kLong);
  const std::string grid_error = posenc_test::error_message([&] {
    posenc::ops::mrope_position_ids(token_types, torch::ones({1, 3}, meta.dtype(torch::kLong)));
  });
  EXPECT_NE(grid_error.find("posenc::mrope_position_ids: expected all tensors of the call on one "
                            "device, but image_grid_thw is on meta and the input on cpu"),
            std::string::npos)
      << grid_error;
  // add_position_table: an input of 32 features against a table of 64 (LearnedPositionalEmbedding
  // (d_model=64) under FakeTensorMode returned a [.., 32] output)
  const std::string width_error = posenc_test::error_message([&] {
    posenc::ops::add_position_table(torch::empty({2, 4, 32}, meta), torch::empty({16, 64}, meta));
  });
  EXPECT_NE(width_error.find("posenc::add_position_table: expected the last dimension of the input "
                             "to be d_model = 64, but got 32"),
            std::string::npos)
      << width_error;
  // apply_rotary: a head narrower than the rotated width
  const std::string rotary_error = posenc_test::error_message([&] {
    posenc::ops::apply_rotary(torch::empty({1, 4, 2, 6}, meta), torch::empty({8, 4}, meta),
                              torch::empty({8, 4}, meta));
  });
  EXPECT_NE(rotary_error.find("the head dimension Dh = 6 is smaller than the rotated width 8"),
            std::string::npos)
      << rotary_error;
  EXPECT_NE(posenc_test::error_message([&] {
              posenc::ops::apply_rotary(torch::empty({1, 4, 2, 8}, meta),
                                        torch::empty({8, 4}, meta), torch::empty({8, 3}, meta));
            }).find("cos and sin must be [max_len, R/2] tables of the same shape"),
            std::string::npos);
  // the offset form past the table (eager refuses it; a fake tensor of concrete sizes too)
  const std::string past_error = posenc_test::error_message([&] {
    posenc::ops::add_position_table(torch::empty({1, 8, 4}, meta), torch::empty({6, 4}, meta),
                                    /*offset=*/1);
  });
  EXPECT_NE(past_error.find("posenc::add_position_table: positions offset .. offset + L - 1 must "
                            "lie in the table, i.e. offset + L <= max_len (6), but got L = 8 and "
                            "offset = 1"),
            std::string::npos)
      << past_error;
#if TORCH_VERSION_MAJOR >= 2
  // (LibTorch 1.13 does not reach the rotary Meta kernel with these meta tensors: the call returns
  // a shape there, not yet understood; LibTorch 2 refuses it as eager does)
  EXPECT_NE(posenc_test::error_message([&] {
              posenc::ops::apply_rotary(torch::empty({1, 5, 2, 8}, meta), torch::empty({4, 4}, meta),
                                        torch::empty({4, 4}, meta));
            }).find("offset + L <= max_len (4), but got L = 5"),
            std::string::npos);
#endif
  // (rows past the caches computed from inv_freq: accepted, as eager)
  EXPECT_EQ(posenc::ops::apply_rotary(torch::empty({1, 5, 2, 8}, meta), torch::empty({4, 4}, meta),
                                      torch::empty({4, 4}, meta), 0, c10::nullopt, false, false,
                                      false, torch::empty({4}, meta.dtype(torch::kDouble)))
                .sizes(),
            torch::IntArrayRef({1, 5, 2, 8}));
  // token_and_position_embedding: a position table narrower than the token table
  const std::string token_error = posenc_test::error_message([&] {
    posenc::ops::token_and_position_embedding(torch::zeros({1, 4}, meta.dtype(torch::kLong)),
                                              torch::empty({10, 8}, meta),
                                              torch::empty({16, 6}, meta));
  });
  EXPECT_NE(token_error.find("the position table must have D = 8 columns on meta, but has 6"),
            std::string::npos)
      << token_error;
}

// A hostile config.json (posenc rope --hf-config, RotaryEmbedding.from_hf_config) is refused by the
// limits before it is parsed; a file without an end is read only to one byte past the size limit.
TEST(JsonLimits, HostileConfigFilesAreRefused) {
  const std::string deep = "{\"rope_scaling\": " + nested(200000) + "}";
  const std::string message =
      error_on_thread([&] { posenc::io::read_hf_rope_config(deep, "deep/config.json"); });
  EXPECT_NE(message.find("deep/config.json nests deeper than 64 levels"), std::string::npos)
      << message.substr(0, 300);
  const std::string endless = posenc_test::error_message(
      [] { posenc::io::read_hf_rope_config_file("/dev/zero"); });
  EXPECT_NE(endless.find("read_hf_rope_config_file: '/dev/zero' has more than 67108864 bytes"),
            std::string::npos)
      << endless.substr(0, 300);
}
