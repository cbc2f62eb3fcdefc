// posenc::PositionalEncoding: the buffer, forward in both layouts and four dtypes, autograd,
// dropout, serialization, clone, .to(), Sequential, printing, and the functional twin.

#include <posenc/posenc.h>

#include "reference.h"
#include "test_util.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <sstream>
#include <string>

namespace F = posenc::functional;
using posenc::PositionalEncoding;
using posenc::PositionalEncodingOptions;

namespace {

class PositionalEncodingTest : public posenc_test::SeededTest {};

using posenc_test::printed;

// A file name in the temporary directory, removed when the object goes.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& stem)
      : path(testing::TempDir() + stem + "_" + std::to_string(::getpid()) + ".pt") {}
  ~TempFile() {
    std::remove(path.c_str());
  }
};

// x + table[offset : offset + L] computed independently of the module: the table from the
// functional, broadcast by hand over the batch.
torch::Tensor expected_sum(const torch::Tensor& x,
                           int64_t d_model,
                           int64_t offset,
                           bool batch_first) {
  const int64_t length = x.size(batch_first ? 1 : 0);
  const auto table =
      F::sinusoidal_table(length, d_model, F::SinusoidalTableFuncOptions().offset(offset));
  return batch_first ? x + table.unsqueeze(0) : x + table.unsqueeze(1);
}

} // namespace

TEST_F(PositionalEncodingTest, RegistersTableAsBufferNotParameter) {
  PositionalEncoding pe(16, 100);
  const auto buffers = pe->named_buffers();
  ASSERT_EQ(buffers.size(), 1u);
  ASSERT_TRUE(buffers.contains("pe"));
  EXPECT_TRUE(pe->parameters().empty());
  EXPECT_TRUE(pe->named_parameters().is_empty());
  const torch::Tensor& table = buffers["pe"];
  EXPECT_EQ(table.sizes(), (std::vector<int64_t>{1, 100, 16}));
  EXPECT_EQ(table.scalar_type(), torch::kFloat);
  EXPECT_FALSE(table.requires_grad());
  EXPECT_TRUE(table.is_same(pe->pe));
}

TEST_F(PositionalEncodingTest, TableIsTheFunctionalTable) {
  PositionalEncoding pe(PositionalEncodingOptions(12, 50).base(777.0));
  EXPECT_TRUE(torch::equal(
      pe->pe[0], F::sinusoidal_table(50, 12, F::SinusoidalTableFuncOptions().base(777.0))));
}

TEST_F(PositionalEncodingTest, ForwardBatchFirstAddsLeadingPositions) {
  PositionalEncoding pe(8, 32);
  const auto x = torch::randn({3, 10, 8});
  const auto y = pe(x);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_TRUE(torch::equal(y, expected_sum(x, 8, 0, true)));
}

TEST_F(PositionalEncodingTest, ForwardSequenceFirstAddsPositionsAlongDimZero) {
  PositionalEncoding pe(PositionalEncodingOptions(8, 32).batch_first(false));
  const auto x = torch::randn({10, 3, 8});
  EXPECT_TRUE(torch::equal(pe(x), expected_sum(x, 8, 0, false)));
}

TEST_F(PositionalEncodingTest, ForwardWithOffsetUsesLaterPositions) {
  for (const bool batch_first : {true, false}) {
    PositionalEncoding pe(PositionalEncodingOptions(6, 40).batch_first(batch_first));
    const auto x = batch_first ? torch::randn({2, 5, 6}) : torch::randn({5, 2, 6});
    EXPECT_TRUE(torch::equal(pe(x, 35), expected_sum(x, 6, 35, batch_first))) << batch_first;
    // One decoding step at the last position the table holds.
    const auto step = batch_first ? torch::randn({2, 1, 6}) : torch::randn({1, 2, 6});
    EXPECT_TRUE(torch::equal(pe(step, 39), expected_sum(step, 6, 39, batch_first)));
  }
}

TEST_F(PositionalEncodingTest, MatchesLongDoubleFormula) {
  PositionalEncoding pe(512, 4096);
  const auto x = torch::zeros({1, 4096, 512});
  const auto y = pe(x).to(torch::kDouble);
  const double* data = y.data_ptr<double>();
  double worst = 0;
  for (const int64_t p : {0, 1, 2, 100, 4095}) {
    for (int64_t c = 0; c < 512; ++c) {
      worst = std::max(
          worst,
          static_cast<double>(std::fabs(data[p * 512 + c] - posenc_test::reference_pe(p, c, 512))));
    }
  }
  EXPECT_LE(worst, posenc_test::kFloat32TableTolerance);
}

// Output dtype = input dtype; float16/bfloat16 sums are formed in float32 and rounded once.
TEST_F(PositionalEncodingTest, PreservesAllFourFloatDtypes) {
  PositionalEncoding pe(16, 64);
  const auto x32 = torch::randn({2, 20, 16});
  const auto table32 = F::sinusoidal_table(20, 16).unsqueeze(0);
  for (const auto dtype : {torch::kHalf, torch::kBFloat16}) {
    const auto x = x32.to(dtype);
    const auto y = pe(x);
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(y, (x.to(torch::kFloat) + table32).to(dtype))) << dtype;
  }
  EXPECT_EQ(pe(x32).scalar_type(), torch::kFloat);
  const auto x64 = x32.to(torch::kDouble);
  const auto y64 = pe(x64);
  EXPECT_EQ(y64.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(y64, x64 + table32.to(torch::kDouble)));
}

TEST_F(PositionalEncodingTest, GradientWithRespectToInputIsIdentity) {
  for (const bool batch_first : {true, false}) {
    PositionalEncoding pe(PositionalEncodingOptions(8, 16).batch_first(batch_first));
    const auto x = torch::randn({4, 3, 8}, torch::requires_grad());
    const auto upstream = torch::randn({4, 3, 8});
    pe(x, 2).backward(upstream);
    EXPECT_TRUE(torch::equal(x.grad(), upstream));
    EXPECT_FALSE(pe->pe.requires_grad());
    EXPECT_FALSE(pe->pe.grad().defined());
  }
}

TEST_F(PositionalEncodingTest, EvalModeIsDeterministicEvenWithDropout) {
  PositionalEncoding pe(PositionalEncodingOptions(8, 16).dropout(0.5));
  pe->eval();
  const auto x = torch::randn({2, 16, 8});
  const auto first = pe(x);
  EXPECT_TRUE(torch::equal(first, pe(x)));
  EXPECT_TRUE(torch::equal(first, expected_sum(x, 8, 0, true)));
}

TEST_F(PositionalEncodingTest, TrainModeAppliesInvertedDropout) {
  PositionalEncoding pe(PositionalEncodingOptions(64, 128).dropout(0.5));
  pe->train();
  const auto x = torch::randn({4, 128, 64});
  const auto y = pe(x);
  const auto full = expected_sum(x, 64, 0, true);
  const auto kept = y != 0;
  const double kept_fraction = kept.to(torch::kDouble).mean().item<double>();
  // 32768 Bernoulli(0.5) draws: the kept fraction is 0.5 +- 0.003 (1 sigma).
  EXPECT_NEAR(kept_fraction, 0.5, 0.02);
  EXPECT_TRUE(torch::allclose(y.masked_select(kept), 2 * full.masked_select(kept), 1e-6, 1e-6));
  EXPECT_FALSE(torch::equal(y, pe(x)));
}

TEST_F(PositionalEncodingTest, SaveAndLoadIntoFreshModule) {
  PositionalEncoding saved(PositionalEncodingOptions(10, 30).base(1000.0));
  TempFile file("pe_roundtrip");
  torch::save(saved, file.path);
  PositionalEncoding fresh(PositionalEncodingOptions(10, 30).base(1000.0));
  fresh->pe.zero_(); // prove the values come from the file
  torch::load(fresh, file.path);
  EXPECT_TRUE(torch::equal(fresh->pe, saved->pe));
  EXPECT_TRUE(fresh->named_buffers().contains("pe"));
  EXPECT_TRUE(fresh->pe.is_same(fresh->named_buffers()["pe"]));
  const auto x = torch::randn({2, 30, 10});
  EXPECT_TRUE(torch::equal(fresh(x), saved(x)));
}

TEST_F(PositionalEncodingTest, CloneIsDeep) {
  PositionalEncoding original(PositionalEncodingOptions(6, 20).dropout(0.25).batch_first(false));
  auto copy = std::dynamic_pointer_cast<posenc::PositionalEncodingImpl>(original->clone());
  ASSERT_TRUE(copy);
  EXPECT_EQ(printed(*copy), printed(*original));
  EXPECT_TRUE(torch::equal(copy->pe, original->pe));
  EXPECT_NE(copy->pe.data_ptr(), original->pe.data_ptr());
  copy->pe.zero_();
  EXPECT_FALSE(torch::equal(copy->pe, original->pe));
  EXPECT_TRUE(torch::equal(original->pe[0], F::sinusoidal_table(20, 6)));
}

TEST_F(PositionalEncodingTest, ToDoubleRecomputesTableInFloat64) {
  PositionalEncoding pe(32, 256);
  pe->to(torch::kDouble);
  EXPECT_EQ(pe->pe.scalar_type(), torch::kDouble);
  EXPECT_TRUE(pe->pe.is_same(pe->named_buffers()["pe"]));
  const auto table = pe->pe[0];
  double worst = 0;
  for (int64_t p = 0; p < 256; p += 17) {
    for (int64_t c = 0; c < 32; ++c) {
      worst = std::max(worst,
                       static_cast<double>(std::fabs(table[p][c].item<double>() -
                                                     posenc_test::reference_pe(p, c, 32))));
    }
  }
  EXPECT_LE(worst, 1e-14);
  const auto x = torch::randn({2, 7, 32}, torch::kDouble);
  const auto y = pe(x, 3);
  EXPECT_EQ(y.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::allclose(
      y - x,
      F::sinusoidal_table(7, 32, F::SinusoidalTableFuncOptions().offset(3).dtype(torch::kDouble)),
      0,
      1e-15));
}

TEST_F(PositionalEncodingTest, ToBFloat16KeepsTableInFloat32AndOutputsCorrect) {
  PositionalEncoding pe(16, 64);
  pe->to(torch::kBFloat16);
  EXPECT_EQ(pe->pe.scalar_type(), torch::kFloat);
  const auto x = torch::randn({2, 9, 16}).to(torch::kBFloat16);
  const auto y = pe(x);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(
      y, (x.to(torch::kFloat) + F::sinusoidal_table(9, 16).unsqueeze(0)).to(torch::kBFloat16)));
  pe->to(torch::kHalf);
  EXPECT_EQ(pe->pe.scalar_type(), torch::kFloat);
  EXPECT_EQ(pe(x.to(torch::kHalf)).scalar_type(), torch::kHalf);
}

TEST_F(PositionalEncodingTest, ResetKeepsDtypeAndRebuildsForNewOptions) {
  PositionalEncoding pe(4, 10);
  pe->to(torch::kDouble);
  pe->options.max_len(20);
  pe->reset();
  EXPECT_EQ(pe->pe.sizes(), (std::vector<int64_t>{1, 20, 4}));
  EXPECT_EQ(pe->pe.scalar_type(), torch::kDouble);
  EXPECT_TRUE(pe->pe.is_same(pe->named_buffers()["pe"]));
}

TEST_F(PositionalEncodingTest, WorksInsideSequential) {
  torch::nn::Sequential model(torch::nn::Linear(5, 8),
                              PositionalEncoding(PositionalEncodingOptions(8, 16)),
                              torch::nn::Linear(8, 2));
  const auto y = model->forward(torch::randn({3, 16, 5}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 16, 2}));
  model->to(torch::kDouble);
  EXPECT_EQ(model->forward(torch::randn({3, 4, 5}, torch::kDouble)).scalar_type(), torch::kDouble);
}

TEST_F(PositionalEncodingTest, PrettyPrint) {
  EXPECT_EQ(printed(*PositionalEncoding(PositionalEncodingOptions(512, 5000).dropout(0.1))),
            "posenc::PositionalEncoding(d_model=512, max_len=5000, dropout=0.1, batch_first=true)");
  EXPECT_EQ(
      printed(*PositionalEncoding(PositionalEncodingOptions(6, 8).base(500000).batch_first(false))),
      "posenc::PositionalEncoding(d_model=6, max_len=8, base=500000, dropout=0, "
      "batch_first=false)");
}

TEST_F(PositionalEncodingTest, FunctionalMatchesModule) {
  PositionalEncoding pe(PositionalEncodingOptions(8, 32).batch_first(false));
  const auto x = torch::randn({6, 2, 8});
  const auto table = F::sinusoidal_table(32, 8);
  const auto options = F::PositionalEncodingFuncOptions().offset(4).batch_first(false);
  EXPECT_TRUE(torch::equal(F::positional_encoding(x, table, options), pe(x, 4)));
  EXPECT_TRUE(torch::equal(F::positional_encoding(x, table.unsqueeze(0), options), pe(x, 4)));
}

TEST_F(PositionalEncodingTest, FunctionalDropoutFollowsTrainingFlag) {
  const auto x = torch::randn({2, 8, 4});
  const auto table = F::sinusoidal_table(8, 4);
  const auto eval =
      F::positional_encoding(x, table, F::PositionalEncodingFuncOptions().dropout(0.9));
  EXPECT_TRUE(torch::equal(eval, expected_sum(x, 4, 0, true)));
  const auto train = F::positional_encoding(
      x, table, F::PositionalEncodingFuncOptions().dropout(1.0).training(true));
  EXPECT_TRUE(torch::equal(train, torch::zeros_like(x)));
}

TEST_F(PositionalEncodingTest, EmptyBatchAndEmptySequence) {
  PositionalEncoding pe(4, 8);
  EXPECT_EQ(pe(torch::randn({0, 3, 4})).sizes(), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(pe(torch::randn({2, 0, 4}), 8).sizes(), (std::vector<int64_t>{2, 0, 4}));
}

TEST_F(PositionalEncodingTest, NonContiguousInput) {
  PositionalEncoding pe(PositionalEncodingOptions(8, 16).batch_first(false));
  const auto batch_first = torch::randn({3, 10, 8});
  const auto x = batch_first.transpose(0, 1); // [L, B, D] view, not contiguous
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(torch::equal(pe(x), expected_sum(x.contiguous(), 8, 0, false)));
}

TEST_F(PositionalEncodingTest, ForwardOnGpuMatchesCpu_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  for (const bool batch_first : {true, false}) {
    PositionalEncoding cpu(PositionalEncodingOptions(64, 512).batch_first(batch_first));
    PositionalEncoding gpu(PositionalEncodingOptions(64, 512).batch_first(batch_first));
    gpu->to(torch::kCUDA);
    ASSERT_TRUE(gpu->pe.is_cuda());
    for (const auto dtype : {torch::kHalf, torch::kBFloat16, torch::kFloat, torch::kDouble}) {
      const auto x = torch::randn({4, 100, 64}).to(dtype);
      const auto y = gpu(x.to(torch::kCUDA), 7);
      EXPECT_TRUE(y.is_cuda());
      EXPECT_EQ(y.scalar_type(), dtype);
      // Both devices round the same exact float32 (or float64) sum once: identical bits.
      EXPECT_TRUE(torch::equal(y.cpu(), cpu(x, 7))) << dtype << " batch_first=" << batch_first;
    }
  }
}

TEST_F(PositionalEncodingTest, ToCudaDoubleRecomputesOnDevice_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  PositionalEncoding pe(16, 64);
  pe->to(torch::Device(torch::kCUDA), torch::kDouble);
  EXPECT_TRUE(pe->pe.is_cuda());
  EXPECT_EQ(pe->pe.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(
      pe->pe[0].cpu(),
      F::sinusoidal_table(64, 16, F::SinusoidalTableFuncOptions().dtype(torch::kDouble))));
}
