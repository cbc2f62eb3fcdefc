// ALiBi, T5's relative position buckets and bias, the Transformer-XL / Conformer relative
// sinusoidal encoding, rel_shift and relative-position attention: values against independent
// float64 formulations written here, properties attention relies on (the compact ALiBi form is
// the full one up to a constant per row), use as attn_mask of LibTorch's attention, errors.
// (Against transformers' own code: test/python/test_attention_bias.py.)

#include <posenc/export.h>
#include <posenc/posenc.h>

#include "test_util.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/activation.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <limits>
#include <tuple>
#include <vector>

namespace F = posenc::functional;
using posenc_test::any_error;
using posenc_test::printed;

namespace {

class AttentionBias : public posenc_test::SeededTest {};

// ALiBi paper's rule, written as its reference code states it: the geometric sequence starting
// at 2^(-8/n) with that ratio for n a power of two, else the n' = 2^floor(log2 n) sequence
// followed by every other element of the 2n' sequence.
std::vector<double> paper_slopes(int64_t n) {
  const auto power_of_2 = [](int64_t m) {
    std::vector<double> s;
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(m)) - 3)));
    for (int64_t i = 0; i < m; ++i) {
      s.push_back(start * std::pow(start, static_cast<double>(i)));
    }
    return s;
  };
  if ((n & (n - 1)) == 0) {
    return power_of_2(n);
  }
  const int64_t closest = int64_t{1} << static_cast<int>(std::floor(std::log2(n)));
  std::vector<double> s = power_of_2(closest);
  const std::vector<double> extra = power_of_2(2 * closest);
  for (int64_t i = 0; i < n - closest; ++i) {
    s.push_back(extra[static_cast<size_t>(2 * i)]);
  }
  return s;
}

} // namespace

TEST_F(AttentionBias, AlibiSlopesFollowThePaperForEveryHeadCount) {
  for (int64_t heads = 1; heads <= 64; ++heads) {
    const torch::Tensor slopes = posenc::ops::alibi_slopes(heads, 8.0, 0, c10::nullopt,
                                                           torch::kDouble);
    const std::vector<double> expected = paper_slopes(heads);
    ASSERT_EQ(slopes.size(0), heads);
    for (int64_t h = 0; h < heads; ++h) {
      // the paper's repeated products drift by a few ulps from 2^(-8k/n)
      EXPECT_NEAR(slopes[h].item<double>(), expected[static_cast<size_t>(h)],
                  1e-14 * expected[static_cast<size_t>(h)])
          << heads << " heads, head " << h;
    }
  }
  // powers of two are exact: 8 heads -> 2^-1 .. 2^-8
  EXPECT_TRUE(torch::equal(F::alibi_slopes(8), torch::pow(2.0, -torch::arange(1, 9)).to(torch::kFloat)));
  // max_bias scales the exponents
  EXPECT_TRUE(torch::equal(posenc::ops::alibi_slopes(4, 16.0),
                           torch::pow(2.0, -4.0 * torch::arange(1, 5)).to(torch::kFloat)));
}

TEST_F(AttentionBias, AlibiShardsAreSlicesOfTheWholeModel) {
  const torch::Tensor all = F::alibi_slopes(24);
  for (int64_t rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(torch::equal(F::alibi_slopes(24, 8.0, 6 * rank, 6), all.narrow(0, 6 * rank, 6)));
  }
  EXPECT_TRUE(torch::equal(F::alibi_slopes(24, 8.0, 20), all.narrow(0, 20, 4)));
  posenc::ALiBi shard(posenc::ALiBiOptions(24).first_head(12).heads(6));
  EXPECT_TRUE(torch::equal(shard->slopes, all.narrow(0, 12, 6)));
  EXPECT_EQ(printed(*shard), "posenc::ALiBi(num_heads=24, first_head=12, heads=6)");
  EXPECT_EQ(printed(*posenc::ALiBi(8)), "posenc::ALiBi(num_heads=8)");
}

TEST_F(AttentionBias, AlibiFullBiasIsMinusSlopeTimesDistance) {
  const torch::Tensor slopes = F::alibi_slopes(6);
  for (const int64_t queries : {1, 5, 9}) {
    const int64_t keys = 9;
    for (const c10::optional<int64_t> offset : {c10::optional<int64_t>(), c10::optional<int64_t>(2)}) {
      for (const bool causal : {false, true}) {
        const torch::Tensor bias = F::alibi_bias(slopes, queries, keys, offset, causal);
        ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{6, queries, keys}));
        const int64_t start = offset.value_or(keys - queries);
        for (int64_t h = 0; h < 6; ++h) {
          for (int64_t i = 0; i < queries; ++i) {
            for (int64_t j = 0; j < keys; ++j) {
              const double distance = std::abs(static_cast<double>(start + i - j));
              const float expected =
                  causal && j > start + i
                      ? -std::numeric_limits<float>::infinity()
                      : static_cast<float>(-slopes[h].item<double>() * distance);
              ASSERT_EQ(bias[h][i][j].item<float>(), expected)
                  << "h " << h << " i " << i << " j " << j << " causal " << causal;
            }
          }
        }
      }
    }
  }
  // per-batch slopes: one bias per batch element
  const torch::Tensor batched = torch::stack({slopes, slopes * 2});
  const torch::Tensor both = F::alibi_bias(batched, 4, 4);
  ASSERT_EQ(both.sizes(), (std::vector<int64_t>{2, 6, 4, 4}));
  EXPECT_TRUE(torch::equal(both[0], F::alibi_bias(slopes, 4, 4)));
  EXPECT_TRUE(torch::equal(both[1], F::alibi_bias(slopes * 2, 4, 4)));
  // float64 slopes give float64 biases; dtype converts
  EXPECT_EQ(F::alibi_bias(slopes.to(torch::kDouble), 2, 2).scalar_type(), torch::kDouble);
  EXPECT_EQ(posenc::ops::alibi_bias(slopes, 2, 2, c10::nullopt, false, torch::kBFloat16).scalar_type(),
            torch::kBFloat16);
}

TEST_F(AttentionBias, CompactCausalFormGivesTheSameAttentionAsTheFullOne) {
  // softmax(s + slope * j) == softmax(s - slope * (i - j)) under a causal mask: the two differ by
  // slope * i, constant along each row. With left padding, positions count from each sequence's
  // first token, and the padded keys are masked.
  const int64_t heads = 5;
  const int64_t length = 7;
  const torch::Tensor slopes = F::alibi_slopes(heads).to(torch::kDouble);
  const torch::Tensor scores = torch::randn({2, heads, length, length}, torch::kDouble);
  const torch::Tensor mask = torch::tensor({{0, 0, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1}});
  const torch::Tensor compact = F::alibi_causal_bias(slopes, length, mask);
  ASSERT_EQ(compact.sizes(), (std::vector<int64_t>{2, heads, 1, length}));
  const torch::Tensor causal = torch::ones({length, length}, torch::kBool).tril();
  const torch::Tensor allowed = causal.unsqueeze(0) & mask.to(torch::kBool).view({2, 1, length});
  const auto attend = [&](const torch::Tensor& bias) {
    return torch::softmax(
        (scores + bias).masked_fill(allowed.unsqueeze(1).logical_not(), -INFINITY), -1);
  };
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t pad = b == 0 ? 2 : 0;
    // the full bias of the unpadded part: queries and keys at positions (index - pad)
    const torch::Tensor full = F::alibi_bias(slopes, length, length, 0, false);
    const torch::Tensor rows = pad == 0 ? attend(compact)[b] : attend(compact)[b].narrow(1, pad, length - pad);
    const torch::Tensor expected = pad == 0 ? attend(full.unsqueeze(0))[b]
                                            : attend(full.unsqueeze(0))[b].narrow(1, pad, length - pad);
    EXPECT_TRUE(torch::allclose(rows, expected, 1e-12, 1e-14)) << "batch element " << b;
  }
  // without a mask: slope * j
  const torch::Tensor plain = F::alibi_causal_bias(F::alibi_slopes(4), 6);
  EXPECT_TRUE(torch::equal(plain, (F::alibi_slopes(4).view({4, 1, 1}) * torch::arange(6).to(torch::kFloat))));
  // the module
  posenc::ALiBi alibi(heads);
  EXPECT_TRUE(torch::equal(alibi->forward_causal(length, mask), F::alibi_causal_bias(F::alibi_slopes(heads), length, mask)));
}

TEST_F(AttentionBias, AlibiBiasIsAnAttentionMaskForScaledDotProductAttention) {
  // The full causal bias is a complete float attn_mask: scaled_dot_product_attention with it
  // equals attention computed by hand with the bias added to the scores. (LibTorch's C++
  // torch::nn::MultiheadAttention adds a 2-D attn_mask to every head, so per-head biases go
  // through scaled_dot_product_attention; Python's nn.MultiheadAttention takes the bias as a
  // [B * H, Lq, Lk] mask: test_attention_bias.py.)
  const int64_t heads = 4;
  const int64_t length = 6;
  posenc::ALiBi alibi(heads);
  const torch::Tensor bias = alibi(length, length, c10::nullopt, /*causal=*/true);
  const torch::Tensor q = torch::randn({2, heads, length, 8});
  const torch::Tensor k = torch::randn({2, heads, length, 8});
  const torch::Tensor v = torch::randn({2, heads, length, 8});
  const torch::Tensor expected =
      torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0) + bias, -1), v);
  // the causal mask is in the bias: the first query sees only the first key
  EXPECT_TRUE(torch::allclose(expected.select(2, 0), v.select(2, 0)));
#if TORCH_VERSION_MAJOR >= 2
  const torch::Tensor out = at::scaled_dot_product_attention(q, k, v, bias);
  EXPECT_TRUE(torch::allclose(out, expected, 1e-5, 1e-6));
#else
  GTEST_SKIP() << "at::scaled_dot_product_attention needs LibTorch 2.0";
#endif
}

TEST_F(AttentionBias, BucketsMatchT5sDefinition) {
  // T5 (32 buckets, 128 max distance, bidirectional): 16 per direction, 0..7 exact, then
  // logarithmic: 8 + floor(log(n / 8) / log(16) * 8), at most 15; keys after the query + 16.
  const torch::Tensor relative = torch::arange(-300, 301);
  const torch::Tensor buckets = F::relative_position_bucket(relative);
  EXPECT_EQ(buckets.scalar_type(), torch::kLong);
  for (int64_t r = -300; r <= 300; ++r) {
    const int64_t n = std::abs(r);
    int64_t expected = n < 8 ? n : std::min<int64_t>(15, 8 + static_cast<int64_t>(std::floor(std::log(n / 8.0) / std::log(16.0) * 8)));
    expected += r > 0 ? 16 : 0;
    ASSERT_EQ(buckets[r + 300].item<int64_t>(), expected) << "relative position " << r;
  }
  // causal: keys after the query all share bucket 0; 0..15 exact, 16..31 logarithmic
  const torch::Tensor causal = F::relative_position_bucket(relative, false);
  for (int64_t r = -300; r <= 300; ++r) {
    const int64_t n = r > 0 ? 0 : -r;
    const int64_t expected = n < 16 ? n : std::min<int64_t>(31, 16 + static_cast<int64_t>(std::floor(std::log(n / 16.0) / std::log(8.0) * 16)));
    ASSERT_EQ(causal[r + 300].item<int64_t>(), expected) << "relative position " << r;
  }
  // int32 input, any shape; extremes of int64 land in the last buckets
  EXPECT_TRUE(torch::equal(F::relative_position_bucket(relative.to(torch::kInt).view({601, 1})), buckets.view({601, 1})));
  const torch::Tensor extremes = torch::tensor({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()});
  EXPECT_TRUE(torch::equal(F::relative_position_bucket(extremes), torch::tensor({15, 31})));
}

TEST_F(AttentionBias, T5BiasLooksUpTheBucketOfEachDistance) {
  posenc::RelativePositionBias t5(posenc::RelativePositionBiasOptions(3).num_buckets(8).max_distance(20));
  EXPECT_EQ(printed(*t5), "posenc::RelativePositionBias(num_heads=3, num_buckets=8, max_distance=20, bidirectional=true)");
  const torch::Tensor weight = t5->relative_attention_bias->weight;
  ASSERT_EQ(weight.sizes(), (std::vector<int64_t>{8, 3}));
  EXPECT_TRUE(t5->named_parameters().contains("relative_attention_bias.weight"));
  for (const int64_t offset : {0, 4, 30}) {
    const int64_t queries = offset == 0 ? 6 : 2;
    const int64_t keys = offset + queries;
    const torch::Tensor bias = t5(queries, keys, offset);
    ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{1, 3, queries, keys}));
    const torch::Tensor relative = torch::arange(keys).view({1, keys}) - (torch::arange(queries) + offset).view({queries, 1});
    const torch::Tensor expected = weight.index({F::relative_position_bucket(relative, true, 8, 20)}).permute({2, 0, 1}).unsqueeze(0);
    EXPECT_TRUE(torch::equal(bias, expected)) << "offset " << offset;
  }
  // decoding one token at a time gives the rows of the whole sequence's bias
  const torch::Tensor whole = t5(7, 7);
  for (int64_t step = 0; step < 7; ++step) {
    EXPECT_TRUE(torch::equal(t5(1, step + 1, step), whole.narrow(2, step, 1).narrow(3, 0, step + 1)));
  }
  // the gradient reaches the table: d(sum of the bias)/d(weight[b, h]) = uses of bucket b
  t5(5, 5).sum().backward();
  EXPECT_DOUBLE_EQ(weight.grad().sum().item<double>(), 3 * 25.0);
}

TEST_F(AttentionBias, RelativeTableHoldsQueryMinusKeyPositions) {
  const int64_t length = 5;
  const int64_t width = 8;
  const torch::Tensor table = posenc::ops::relative_sinusoidal_table(length, width, 10000.0, c10::nullopt, torch::kDouble);
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{2 * length - 1, width}));
  for (int64_t r = 0; r < 2 * length - 1; ++r) {
    const double p = static_cast<double>(length - 1 - r);
    for (int64_t c = 0; c < width; c += 2) {
      const double frequency = std::exp(-std::log(10000.0) * static_cast<double>(c) / width);
      EXPECT_NEAR(table[r][c].item<double>(), std::sin(p * frequency), 1e-15);
      EXPECT_NEAR(table[r][c + 1].item<double>(), std::cos(p * frequency), 1e-15);
    }
  }
  // rows for p >= 0 are the absolute sinusoidal table's; key_length widens the positive side
  const torch::Tensor absolute = posenc::ops::sinusoidal_table(length, width, 10000.0, 0, "interleaved", "paper", torch::kDouble);
  EXPECT_TRUE(torch::equal(table.narrow(0, 0, length).flip({0}), absolute));
  const torch::Tensor wide = posenc::ops::relative_sinusoidal_table(2, width, 10000.0, 6, torch::kDouble);
  EXPECT_TRUE(torch::equal(
      wide, posenc::ops::relative_sinusoidal_table(6, width, 10000.0, 6, torch::kDouble).narrow(0, 0, 7)));
}

TEST_F(AttentionBias, RelShiftEqualsTheZeroPadFormulation) {
  // Transformer-XL's trick: pad a zero column, view as [L + P... ], drop the first row.
  for (const int64_t queries : {1, 2, 5}) {
    for (const int64_t keys : {queries, queries + 3}) {
      const torch::Tensor x = torch::randn({2, 3, queries, queries + keys - 1});
      const torch::Tensor shifted = F::rel_shift(x);
      ASSERT_EQ(shifted.sizes(), (std::vector<int64_t>{2, 3, queries, keys}));
      for (int64_t i = 0; i < queries; ++i) {
        for (int64_t j = 0; j < keys; ++j) {
          ASSERT_TRUE(torch::equal(shifted.select(2, i).select(2, j), x.select(2, i).select(2, queries - 1 - i + j)));
        }
      }
      if (queries == keys) {
        const torch::Tensor padded = torch::cat({torch::zeros({2, 3, queries, 1}), x}, -1).view({2, 3, 2 * queries, queries});
        const torch::Tensor espnet = padded.narrow(2, 1, 2 * queries - 1).reshape(x.sizes()).narrow(-1, 0, queries);
        EXPECT_TRUE(torch::equal(shifted, espnet));
      }
    }
  }
  // differentiable, and works on non-contiguous scores
  const torch::Tensor x = torch::randn({4, 7}, torch::requires_grad());
  F::rel_shift(x.t().t()).sum().backward();
  EXPECT_EQ(x.grad().sum().item<float>(), 16.0f);
}

TEST_F(AttentionBias, RelPositionalEncodingStreamsChunks) {
  posenc::RelPositionalEncoding pos(posenc::RelPositionalEncodingOptions(8).max_len(20));
  EXPECT_EQ(printed(*pos), "posenc::RelPositionalEncoding(d_model=8, max_len=20)");
  const torch::Tensor x = torch::randn({2, 6, 8});
  auto [scaled, pos_emb] = pos->forward(x);
  EXPECT_TRUE(torch::allclose(scaled, x * std::sqrt(8.0)));
  EXPECT_TRUE(torch::equal(pos_emb[0], posenc::ops::relative_sinusoidal_table(6, 8)));
  // a chunk of 2 after 4 cached frames: relative positions 5 .. -1 against its 6 keys
  auto chunk = pos->forward(x.narrow(1, 4, 2), 4);
  EXPECT_TRUE(torch::equal(std::get<1>(chunk)[0], posenc::ops::relative_sinusoidal_table(2, 8, 10000.0, 6)));
  // legacy: absolute positions offset ..
  posenc::RelPositionalEncoding legacy(posenc::RelPositionalEncodingOptions(8).max_len(20).legacy(true).scale_input(false));
  auto legacy_chunk = legacy->forward(x.narrow(1, 4, 2), 4);
  EXPECT_TRUE(torch::equal(std::get<0>(legacy_chunk), x.narrow(1, 4, 2)));
  EXPECT_TRUE(torch::equal(std::get<1>(legacy_chunk)[0], posenc::ops::sinusoidal_table(2, 8, 10000.0, 4)));
  // past the table: an error, and nothing changes
  const torch::Tensor before = pos->pe.clone();
  EXPECT_POSENC_ERROR(pos->forward(x, 15), "must fit in the table's max_len = 20");
  EXPECT_POSENC_ERROR(legacy->forward(torch::randn({1, 21, 8})), "max_len = 20");
  EXPECT_POSENC_ERROR(pos->forward(torch::randn({1, 3, 4})), "RelPositionalEncoding");
  EXPECT_TRUE(torch::equal(pos->pe, before));
  // no frames (an empty chunk): no relative positions, as ESPnet's empty slice
  for (const int64_t offset : {0, 7}) {
    EXPECT_EQ(std::get<1>(pos->forward(torch::randn({2, 0, 8}), offset)).sizes(),
              torch::IntArrayRef({1, 0, 8}));
    EXPECT_EQ(std::get<1>(legacy->forward(torch::randn({2, 0, 8}), offset)).sizes(),
              torch::IntArrayRef({1, 0, 8}));
  }
}

TEST_F(AttentionBias, RelPositionAttentionStreamsLikeTheWholeSequence) {
  // Streaming: the last 2 queries attending to all 6 keys with the chunk's relative positions
  // equal the last 2 rows of the whole sequence's attention.
  posenc::RelPositionalEncoding pos(posenc::RelPositionalEncodingOptions(16).max_len(32));
  posenc::RelPositionMultiheadAttention attn(16, 4);
  EXPECT_EQ(printed(*attn), "posenc::RelPositionMultiheadAttention(embed_dim=16, num_heads=4, dropout=0)");
  for (const char* name : {"linear_q.weight", "linear_pos.weight", "pos_bias_u", "pos_bias_v", "linear_out.bias"}) {
    EXPECT_TRUE(attn->named_parameters().contains(name)) << name;
  }
  EXPECT_FALSE(attn->named_parameters().contains("linear_pos.bias"));
  const torch::Tensor x = torch::randn({2, 6, 16});
  torch::Tensor scaled, pos_emb; // not structured bindings: the error checks' lambdas use them
  std::tie(scaled, pos_emb) = pos->forward(x);
  const torch::Tensor whole = attn(scaled, scaled, scaled, pos_emb);
  auto chunk = pos->forward(x.narrow(1, 4, 2), 4);
  const torch::Tensor last = attn(std::get<0>(chunk), scaled, scaled, std::get<1>(chunk));
  EXPECT_TRUE(torch::allclose(last, whole.narrow(1, 4, 2), 1e-5, 1e-6));
  // a padding mask [B, 1, 1, Lk]: masked keys get no weight
  const torch::Tensor keep = torch::tensor({{1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1}}).to(torch::kBool).view({2, 1, 1, 6});
  const torch::Tensor masked = attn(scaled, scaled, scaled, pos_emb, keep);
  const torch::Tensor changed = x.clone();
  changed.narrow(1, 4, 2)[0].normal_();
  auto [scaled2, pos_emb2] = pos->forward(changed);
  EXPECT_TRUE(torch::allclose(attn(scaled2, scaled2, scaled2, pos_emb2, keep)[0].narrow(0, 0, 4), masked[0].narrow(0, 0, 4), 1e-5, 1e-6));
  EXPECT_POSENC_ERROR(attn(scaled, scaled, scaled, pos_emb.narrow(1, 0, 10)), "Lq + Lk - 1");
  EXPECT_POSENC_ERROR(attn(scaled, scaled, scaled, torch::randn({1, 11, 8})), "embed_dim = 16");
}

TEST_F(AttentionBias, BadInputsAreClearErrors) {
  EXPECT_POSENC_ERROR(F::alibi_slopes(0), "num_heads must be in [1, 2^28] (posenc's limit of heads), but got 0");
  EXPECT_POSENC_ERROR(F::alibi_slopes(8, 0.0), "max_bias must be in (0, 64]");
  EXPECT_POSENC_ERROR(F::alibi_slopes(8, 1e300), "max_bias must be in (0, 64]");
  EXPECT_POSENC_ERROR(posenc::ops::alibi_slopes(8, 64.0, 0, c10::nullopt, torch::kHalf), "rounds to zero in Half");
  EXPECT_POSENC_ERROR(F::alibi_slopes(8, 8.0, 6, 4), "must lie in the model's 8 heads");
  EXPECT_POSENC_ERROR(F::alibi_slopes(8, 8.0, 8), "first_head must be in [0, num_heads)");
  EXPECT_POSENC_ERROR(posenc::ALiBi(-1), "ALiBi: num_heads must be in [1, 2^28]");
  const torch::Tensor slopes = F::alibi_slopes(4);
  EXPECT_POSENC_ERROR(F::alibi_bias(slopes, 0, 4), "query_length must be >= 1");
  EXPECT_POSENC_ERROR(F::alibi_bias(slopes, 5, 4), "pass offset");
  EXPECT_POSENC_ERROR(F::alibi_bias(slopes, 2, 4, -1), "offset (the position of the first query) must be >= 0");
  EXPECT_POSENC_ERROR(F::alibi_bias(slopes.view({1, 1, 4}), 2, 4), "slopes must be [num_heads] or [batch, num_heads]");
  EXPECT_POSENC_ERROR(F::alibi_bias(torch::ones({4}, torch::kLong), 2, 4), "slopes' dtype");
  EXPECT_POSENC_ERROR(F::alibi_causal_bias(slopes, 4, torch::ones({2, 5})), "attention_mask must be [batch, key_length] = [batch, 4]");
  EXPECT_POSENC_ERROR(F::alibi_causal_bias(slopes, 4, torch::ones({2, 4})), "attention_mask must be bool or integer");
  EXPECT_POSENC_ERROR(F::alibi_causal_bias(torch::ones({3, 4}), 4, torch::ones({2, 4}, torch::kLong)), "must agree on the batch size");
  EXPECT_POSENC_ERROR(F::relative_position_bucket(torch::zeros({3})), "relative_position must be an integer tensor");
  EXPECT_POSENC_ERROR(F::relative_position_bucket(torch::zeros({3}, torch::kLong), true, 32, 16), "max_distance must be >= num_buckets");
  EXPECT_POSENC_ERROR(F::relative_position_bucket(torch::zeros({3}, torch::kLong), true, 2, 16), "num_buckets must be >= 4 when bidirectional");
  EXPECT_POSENC_ERROR(posenc::RelativePositionBias(posenc::RelativePositionBiasOptions(0)), "num_heads must be >= 1");
  EXPECT_POSENC_ERROR(posenc::RelativePositionBias(posenc::RelativePositionBiasOptions(4).max_distance(8)), "max_distance must be >= num_buckets");
  posenc::RelativePositionBias t5(4);
  EXPECT_POSENC_ERROR(t5(2, 2, -1), "RelativePositionBias: offset");
  EXPECT_POSENC_ERROR(t5(0, 2), "query_length must be >= 1");
  EXPECT_POSENC_ERROR(F::relative_sinusoidal_table(0, 8), "length must be >= 1");
  EXPECT_POSENC_ERROR(F::relative_sinusoidal_table(4, 0), "d_model must be >= 1");
  EXPECT_POSENC_ERROR(F::rel_shift(torch::randn({3, 2})), "must be >= Lq >= 1");
  EXPECT_POSENC_ERROR(posenc::RelPositionMultiheadAttention(10, 4), "positive multiple of num_heads");
}

// posenc::to_torchscript of the four modules: the exported methods give the modules' results
// exactly (the same ATen operations in the same order) and raise their error messages; the
// exported file loads back with torch::jit::load.
TEST_F(AttentionBias, ExportedModulesComputeWhatTheModulesDo) {
  posenc::ALiBi alibi(posenc::ALiBiOptions(12).first_head(4).heads(6));
  auto exported_alibi = posenc::to_torchscript(alibi);
  for (const bool causal : {false, true}) {
    EXPECT_TRUE(torch::equal(exported_alibi.forward({int64_t{3}, int64_t{7}, c10::IValue(), causal})
                                 .toTensor(),
                             alibi(3, 7, c10::nullopt, causal)));
    EXPECT_TRUE(torch::equal(
        exported_alibi.forward({int64_t{4}, int64_t{9}, int64_t{2}, causal}).toTensor(),
        alibi(4, 9, 2, causal)));
  }
  const torch::Tensor mask = torch::tensor({{0, 0, 1, 1, 1}, {1, 1, 1, 1, 1}}, torch::kLong);
  EXPECT_TRUE(torch::equal(exported_alibi.run_method("forward_causal", int64_t{5}).toTensor(),
                           alibi->forward_causal(5)));
  EXPECT_TRUE(
      torch::equal(exported_alibi.run_method("forward_causal", int64_t{5}, mask).toTensor(),
                   alibi->forward_causal(5, mask)));

  posenc::RelativePositionBias t5(posenc::RelativePositionBiasOptions(3).num_buckets(8).max_distance(20));
  posenc::RelativePositionBias causal_t5(
      posenc::RelativePositionBiasOptions(3).bidirectional(false).num_buckets(8).max_distance(20));
  for (auto* module : {&t5, &causal_t5}) {
    auto exported = posenc::to_torchscript(*module);
    // key = relative_attention_bias.weight, as in T5 checkpoints
    EXPECT_TRUE(torch::equal(exported.attr("relative_attention_bias").toModule().attr("weight").toTensor(),
                             (*module)->relative_attention_bias->weight));
    for (const int64_t offset : {int64_t{0}, int64_t{5}, int64_t{100}}) {
      EXPECT_TRUE(torch::equal(exported.forward({int64_t{6}, int64_t{40}, offset}).toTensor(),
                               (*module)(6, 40, offset)));
    }
  }

  for (const bool legacy : {false, true}) {
    posenc::RelPositionalEncoding encoding(posenc::RelPositionalEncodingOptions(16).max_len(30).legacy(legacy));
    encoding->eval();
    auto exported = posenc::to_torchscript(encoding);
    const torch::Tensor x = torch::randn({2, 7, 16});
    for (const int64_t offset : {int64_t{0}, int64_t{12}}) {
      const auto ours = exported.forward({x, offset}).toTuple();
      const auto expected = encoding->forward(x, offset);
      EXPECT_TRUE(torch::equal(ours->elements()[0].toTensor(), std::get<0>(expected)));
      EXPECT_TRUE(torch::equal(ours->elements()[1].toTensor(), std::get<1>(expected)));
    }
  }

  posenc::RelPositionalEncoding encoding(posenc::RelPositionalEncodingOptions(16).max_len(30));
  posenc::RelPositionMultiheadAttention attention(16, 4);
  encoding->eval();
  attention->eval();
  auto exported_attention = posenc::to_torchscript(attention);
  torch::Tensor x, pos_emb;
  std::tie(x, pos_emb) = encoding->forward(torch::randn({2, 6, 16}));
  const torch::Tensor keep = torch::tensor({1, 1, 1, 1, 0, 0}, torch::kBool).view({1, 1, 1, 6});
  EXPECT_TRUE(torch::equal(exported_attention.forward({x, x, x, pos_emb}).toTensor(),
                           attention(x, x, x, pos_emb)));
  EXPECT_TRUE(torch::equal(exported_attention.forward({x, x, x, pos_emb, keep}).toTensor(),
                           attention(x, x, x, pos_emb, keep)));
  const torch::Tensor additive = torch::randn({2, 1, 6, 6});
  EXPECT_TRUE(torch::equal(exported_attention.forward({x, x, x, pos_emb, additive}).toTensor(),
                           attention(x, x, x, pos_emb, additive)));

  // Saved and loaded back: the same results.
  const std::string path = testing::TempDir() + "attention_" + std::to_string(::getpid()) + ".pt";
  exported_attention.save(path);
  auto loaded = torch::jit::load(path);
  std::remove(path.c_str());
  EXPECT_TRUE(torch::equal(loaded.forward({x, x, x, pos_emb}).toTensor(), attention(x, x, x, pos_emb)));

  // The modules' error messages.
  const auto same_error = [](const std::string& module_error, const std::string& exported_error) {
    EXPECT_NE(module_error, "<no error>");
    EXPECT_NE(exported_error.find(module_error), std::string::npos)
        << "the module raised\n  " << module_error << "\nthe export\n  " << exported_error;
  };
  same_error(any_error([&] { alibi(5, 4); }),
             any_error([&] { exported_alibi.forward({int64_t{5}, int64_t{4}}); }));
  same_error(any_error([&] { alibi(2, 4, -1); }),
             any_error([&] { exported_alibi.forward({int64_t{2}, int64_t{4}, int64_t{-1}}); }));
  same_error(any_error([&] { alibi->forward_causal(4, torch::ones({2, 5}, torch::kLong)); }),
             any_error([&] {
               exported_alibi.run_method("forward_causal", int64_t{4},
                                         torch::ones({2, 5}, torch::kLong));
             }));
  same_error(any_error([&] { alibi->forward_causal(4, torch::ones({2, 4})); }),
             any_error([&] {
               exported_alibi.run_method("forward_causal", int64_t{4}, torch::ones({2, 4}));
             }));
  auto exported_t5 = posenc::to_torchscript(t5);
  same_error(any_error([&] { t5(2, 2, -1); }),
             any_error([&] { exported_t5.forward({int64_t{2}, int64_t{2}, int64_t{-1}}); }));
  same_error(any_error([&] { t5(0, 2); }),
             any_error([&] { exported_t5.forward({int64_t{0}, int64_t{2}}); }));
  auto exported_encoding = posenc::to_torchscript(encoding);
  same_error(any_error([&] { encoding->forward(torch::randn({1, 20, 16}), 11); }),
             any_error([&] { exported_encoding.forward({torch::randn({1, 20, 16}), int64_t{11}}); }));
  same_error(any_error([&] { encoding->forward(torch::randn({1, 20, 16}), -1); }),
             any_error([&] { exported_encoding.forward({torch::randn({1, 20, 16}), int64_t{-1}}); }));
  same_error(any_error([&] { encoding->forward(torch::randn({1, 20, 8})); }),
             any_error([&] { exported_encoding.forward({torch::randn({1, 20, 8})}); }));
  same_error(any_error([&] { attention(x, x, x, pos_emb.narrow(1, 0, 10)); }),
             any_error([&] { exported_attention.forward({x, x, x, pos_emb.narrow(1, 0, 10)}); }));
  same_error(any_error([&] { attention(x, x.narrow(2, 0, 8), x, pos_emb); }),
             any_error([&] { exported_attention.forward({x, x.narrow(2, 0, 8), x, pos_emb}); }));
}

// The query temperatures of Llama 4 and Ministral 3 / Mistral 4: the module, its functional twin
// and its TorchScript export against the formulas in float64 (each scale within a float32 ulp of
// the exact one, since transformers forms it in float32: 2^-23 relative at scales in [1, 2]) and
// against one another bit for bit; padding; the layouts; errors. (Against transformers' own
// attention code: test/python/test_attention_temperature.py.)
TEST_F(AttentionBias, AttentionTemperatureScalesQueriesByPosition) {
  const torch::Tensor q = torch::randn({2, 6, 3, 8}, torch::kDouble);
  const std::vector<int64_t> steps = {0, 7, 8, 15, 16, 10000000};
  const torch::Tensor positions = torch::tensor(steps, torch::kLong);
  for (const auto form :
       {posenc::AttentionTemperatureForm::kLlama4, posenc::AttentionTemperatureForm::kMinistral3}) {
    posenc::AttentionTemperature temperature(
        posenc::AttentionTemperatureOptions().floor_scale(8).attn_scale(0.25).form(form));
    const torch::Tensor got = temperature->forward_positions(q, positions);
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto p = static_cast<double>(steps[i]);
      const double exact = form == posenc::AttentionTemperatureForm::kLlama4
                               ? std::log1p(std::floor((p + 1.0) / 8.0)) * 0.25 + 1.0
                               : 1.0 + 0.25 * std::log(1.0 + std::floor(p / 8.0));
      const torch::Tensor scale =
          got.select(1, static_cast<int64_t>(i)) / q.select(1, static_cast<int64_t>(i));
      EXPECT_LE((scale - exact).abs().max().item<double>(), exact * std::ldexp(1.0, -22))
          << posenc::attention_temperature_form_name(form) << " at position " << steps[i];
    }
    // offsets are positions offset .. offset + L - 1; [B, L] positions per sequence; the
    // functional twin; heads first
    const torch::Tensor x = torch::randn({2, 5, 3, 8});
    const torch::Tensor run = torch::arange(9, 14, torch::kLong);
    EXPECT_TRUE(torch::equal(temperature(x, 9), temperature->forward_positions(x, run)));
    EXPECT_TRUE(
        torch::equal(temperature(x, 9), F::attention_temperature(x, {}, 9, 8, 0.25, false, form)));
    const torch::Tensor each = torch::stack({run, run + 20});
    const torch::Tensor both = temperature->forward_positions(x, each);
    EXPECT_TRUE(
        torch::equal(both.select(0, 1), temperature->forward_positions(x, run + 20).select(0, 1)));
    posenc::AttentionTemperature first(posenc::AttentionTemperatureOptions()
                                           .floor_scale(8)
                                           .attn_scale(0.25)
                                           .form(form)
                                           .heads_first(true));
    EXPECT_TRUE(torch::equal(first(x.transpose(1, 2), 9), temperature(x, 9).transpose(1, 2)));
    // padding (-1, or any negative position) is not scaled; [1, L] positions serve the batch;
    // the dtype is the query's
    const torch::Tensor padded = torch::tensor({-1, 20, -5, 22, 23}, torch::kLong);
    const torch::Tensor scaled_padded = temperature->forward_positions(x, padded);
    EXPECT_TRUE(torch::equal(scaled_padded.select(1, 0), x.select(1, 0)));
    EXPECT_TRUE(torch::equal(scaled_padded.select(1, 2), x.select(1, 2)));
    EXPECT_TRUE(
        torch::equal(temperature->forward_positions(x, run.unsqueeze(0)), temperature(x, 9)));
    EXPECT_EQ(temperature(x.to(torch::kBFloat16), 9).scalar_type(), torch::kBFloat16);
    // the export computes what the module does, and raises its messages
    auto exported = posenc::to_torchscript(temperature);
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
      const torch::Tensor xd = x.to(dtype);
      EXPECT_TRUE(
          torch::equal(exported.forward({xd, int64_t{16380}}).toTensor(), temperature(xd, 16380)));
      EXPECT_TRUE(torch::equal(exported.run_method("forward_positions", xd, each).toTensor(),
                               temperature->forward_positions(xd, each)));
      EXPECT_TRUE(torch::equal(exported.run_method("forward_positions", xd, padded).toTensor(),
                               temperature->forward_positions(xd, padded)));
    }
    const auto same_error = [](const std::string& module_error, const std::string& exported_error) {
      EXPECT_NE(module_error, "<no error>");
      EXPECT_NE(exported_error.find(module_error), std::string::npos)
          << "the module raised\n  " << module_error << "\nthe export\n  " << exported_error;
    };
    same_error(any_error([&] { temperature(x, -1); }), any_error([&] {
                 exported.forward({x, int64_t{-1}});
               }));
    same_error(any_error([&] { temperature(x.select(0, 0)); }),
               any_error([&] { exported.forward({x.select(0, 0)}); }));
    same_error(
        any_error([&] { temperature->forward_positions(x, run.narrow(0, 0, 3)); }),
        any_error([&] { exported.run_method("forward_positions", x, run.narrow(0, 0, 3)); }));
  }
  EXPECT_EQ(printed(*posenc::AttentionTemperature(posenc::AttentionTemperatureOptions{})),
            "posenc::AttentionTemperature(form=llama4, floor_scale=8192, attn_scale=0.1, "
            "heads_first=false)");
  EXPECT_POSENC_ERROR(
      posenc::AttentionTemperature(posenc::AttentionTemperatureOptions().floor_scale(0)),
      "AttentionTemperature: floor_scale must be finite and > 0");
  EXPECT_POSENC_ERROR(
      posenc::AttentionTemperature(posenc::AttentionTemperatureOptions().attn_scale(std::nan(""))),
      "attn_scale must be finite");
  posenc::AttentionTemperature temperature(posenc::AttentionTemperatureOptions{});
  EXPECT_POSENC_ERROR(
      temperature(torch::randn({2, 5, 8})),
      "AttentionTemperature: query must be a floating-point [B, L, H, head_dim] tensor");
  EXPECT_POSENC_ERROR(temperature(torch::ones({1, 2, 3, 4}, torch::kLong)), "but got Long");
  EXPECT_POSENC_ERROR(temperature->forward_positions(torch::randn({2, 5, 3, 8}),
                                                     torch::zeros({3, 5}, torch::kLong)),
                      "positions must have shape [L] = [5] or [B, L] = [2, 5]");
  EXPECT_POSENC_ERROR(temperature->forward_positions(torch::randn({2, 5, 3, 8}), torch::Tensor()),
                      "forward_positions needs positions");
  EXPECT_POSENC_ERROR(posenc::ops::attention_temperature(torch::randn({1, 2, 3, 4}), c10::nullopt,
                                                         0, 8192, 0.1, false, "llama3"),
                      "form must be \"llama4\"");
  EXPECT_POSENC_ERROR(posenc::ops::attention_temperature(torch::randn({1, 2, 3, 4}),
                                                         torch::zeros({2}, torch::kLong), 3),
                      "pass either an offset or explicit positions, not both");
}
