// The dispatcher operators, the TorchScript export and loading state dicts, from C++.

#include <posenc/export.h>
#include <posenc/io/state_dict.h>
#include <posenc/posenc.h>

#include "test_util.h"

#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <string>

namespace F = posenc::functional;
using posenc::PositionalEncoding;
using posenc::PositionalEncodingOptions;

namespace {

class Interop : public posenc_test::SeededTest {};

std::string temp_path(const std::string& stem) {
  return testing::TempDir() + stem + "_" + std::to_string(::getpid()) + ".pt";
}

// Writes `entries` as a state dict file in the format of Python's torch.save.
void write_state_dict(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& entries) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& entry : entries) {
    dict.insert(entry.first, entry.second);
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

} // namespace

TEST_F(Interop, OperatorsAreRegisteredWithTheirSchemas) {
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const char* name : {"posenc::sinusoidal_table",
                           "posenc::add_positional_encoding",
                           "posenc::add_position_table",
                           "posenc::_add_position_table_backward",
                           "posenc::apply_rotary"}) {
    EXPECT_TRUE(dispatcher.findSchema({name, ""}).has_value()) << name;
  }
  const auto op = dispatcher.findSchemaOrThrow("posenc::add_position_table", "");
  std::ostringstream schema;
  schema << op.schema();
  EXPECT_EQ(schema.str(),
            "posenc::add_position_table(Tensor x, Tensor table, int offset=0, bool "
            "batch_first=True, Tensor? positions=None, float scale=1., Tensor? columns=None) -> "
            "Tensor");
}

TEST_F(Interop, DispatcherCallEqualsDirectCallAndModule) {
  PositionalEncoding pe(PositionalEncodingOptions(16, 64).batch_first(false));
  const auto x = torch::randn({10, 3, 16});
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("posenc::add_position_table", "")
                      .typed<at::Tensor(const at::Tensor&,
                                        const at::Tensor&,
                                        int64_t,
                                        bool,
                                        const c10::optional<at::Tensor>&,
                                        double,
                                        const c10::optional<at::Tensor>&)>();
  const auto through_handle = op.call(x, pe->pe, 5, false, c10::nullopt, 1.0, c10::nullopt);
  EXPECT_TRUE(torch::equal(through_handle, posenc::ops::add_position_table(x, pe->pe, 5, false)));
  EXPECT_TRUE(torch::equal(through_handle, pe(x, 5)));
  EXPECT_TRUE(torch::equal(posenc::ops::sinusoidal_table(64, 16), pe->pe[0]));
}

TEST_F(Interop, AddPositionalEncodingComputesTheTableItself) {
  const auto x = torch::randn({2, 7, 9});
  const auto expected =
      x + F::sinusoidal_table(7, 9, F::SinusoidalTableFuncOptions().offset(30).base(500.0))
              .unsqueeze(0);
  EXPECT_TRUE(torch::equal(posenc::ops::add_positional_encoding(x, 30, 500.0, true), expected));
  const auto x64 = x.to(torch::kDouble);
  const auto expected64 =
      x64 + F::sinusoidal_table(
                7, 9, F::SinusoidalTableFuncOptions().offset(30).base(500.0).dtype(torch::kDouble))
                .unsqueeze(0);
  EXPECT_TRUE(torch::equal(posenc::ops::add_positional_encoding(x64, 30, 500.0, true), expected64));
}

TEST_F(Interop, AutogradThroughOperatorReachesInputAndTable) {
  const auto x = torch::randn({4, 3, 5}, torch::requires_grad());
  const auto table = torch::zeros({1, 10, 5}, torch::requires_grad());
  const auto upstream = torch::randn({4, 3, 5});
  posenc::ops::add_position_table(x, table, 6, true).backward(upstream);
  EXPECT_TRUE(torch::equal(x.grad(), upstream));
  auto expected = torch::zeros({1, 10, 5});
  expected[0].narrow(0, 6, 3).copy_(upstream.sum(0));
  EXPECT_TRUE(torch::allclose(table.grad(), expected));
}

TEST_F(Interop, MetaTensorsGiveShapesOnly) {
  const auto x = torch::empty({2, 11, 8}, torch::Device(torch::kMeta));
  const auto table = torch::empty({1, 32, 8}, torch::Device(torch::kMeta));
  const auto y = posenc::ops::add_position_table(x, table, 3, true);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), x.sizes());
  const auto t = posenc::ops::sinusoidal_table(
      32, 8, 10000.0, 0, "interleaved", "paper", torch::kDouble, torch::Device(torch::kMeta));
  EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(t.scalar_type(), torch::kDouble);
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(
                          torch::empty({2, 8}, torch::Device(torch::kMeta)), table, 0, true),
                      "expected a 3-D input");
}

TEST_F(Interop, ExportEqualsModuleForBothLayoutsAndAllDtypes) {
  for (const bool batch_first : {true, false}) {
    PositionalEncoding pe(PositionalEncodingOptions(12, 40).batch_first(batch_first).dropout(0.3));
    pe->eval();
    auto exported = posenc::to_torchscript(pe);
    const auto base = batch_first ? torch::randn({3, 8, 12}) : torch::randn({8, 3, 12});
    for (const auto dtype : {torch::kHalf, torch::kBFloat16, torch::kFloat, torch::kDouble}) {
      const auto x = base.to(dtype);
      const auto y = exported.forward({x, int64_t{4}}).toTensor();
      EXPECT_EQ(y.scalar_type(), dtype);
      EXPECT_TRUE(torch::equal(y, pe(x, 4))) << dtype << " batch_first=" << batch_first;
    }
    EXPECT_TRUE(torch::equal(exported.forward({base}).toTensor(), pe(base)));
  }
}

TEST_F(Interop, ExportedFileLoadsInCpp) {
  PositionalEncoding pe(PositionalEncodingOptions(8, 20).base(100.0));
  const std::string path = temp_path("exported");
  posenc::to_torchscript(pe).save(path);
  auto loaded = torch::jit::load(path);
  std::remove(path.c_str());
  const auto x = torch::randn({2, 5, 8});
  EXPECT_TRUE(torch::equal(loaded.forward({x, int64_t{15}}).toTensor(), pe(x, 15)));
  EXPECT_TRUE(torch::equal(loaded.attr("pe").toTensor(), pe->pe));
}

TEST_F(Interop, ExportRaisesTheModulesErrors) {
  auto exported = posenc::to_torchscript(PositionalEncoding(8, 20));
  EXPECT_THROW(exported.forward({torch::randn({2, 5, 8}), int64_t{16}}), std::exception);
  try {
    exported.forward({torch::randn({2, 5, 6})});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("PositionalEncoding: expected the last dimension of the "
                                         "input to be d_model = 8, but got 6"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Interop, ExportIsACopy) {
  PositionalEncoding pe(4, 6);
  auto exported = posenc::to_torchscript(pe);
  pe->pe.zero_();
  EXPECT_FALSE(torch::equal(exported.attr("pe").toTensor(), pe->pe));
}

TEST_F(Interop, LoadStateDictFromPickledDict) {
  const std::string path = temp_path("state");
  const auto table = torch::randn({1, 6, 4});
  write_state_dict(path, {{"encoder.pe", table}, {"other.weight", torch::zeros({2})}});
  PositionalEncoding pe(4, 6);
  posenc::load_state_dict(*pe, path, posenc::LoadStateDictOptions().prefix("encoder."));
  std::remove(path.c_str());
  EXPECT_TRUE(torch::equal(pe->pe, table));
}

TEST_F(Interop, LoadStateDictFailsWithoutChanges) {
  const std::string path = temp_path("bad_state");
  PositionalEncoding pe(4, 6);
  const auto before = pe->pe.clone();
  write_state_dict(path, {{"pe", torch::randn({1, 7, 4})}});
  EXPECT_POSENC_ERROR(posenc::load_state_dict(*pe, path),
                      "load_state_dict: size mismatch for 'pe': the file has shape [1, 7, 4], the "
                      "module has [1, 6, 4]");
  write_state_dict(path, {{"pe", torch::randn({1, 6, 4})}, {"bias", torch::zeros({1})}});
  EXPECT_POSENC_ERROR(posenc::load_state_dict(*pe, path),
                      "has entries the module does not: 'bias'");
  write_state_dict(path, {{"weight", torch::randn({1, 6, 4})}});
  EXPECT_POSENC_ERROR(posenc::load_state_dict(*pe, path),
                      "lacks 'pe'; check LoadStateDictOptions::prefix");
  std::remove(path.c_str());
  EXPECT_POSENC_ERROR(posenc::load_state_dict(*pe, "/nonexistent/state.pt"),
                      "load_state_dict: cannot open '/nonexistent/state.pt'");
  EXPECT_TRUE(torch::equal(pe->pe, before));
}
