// Queries and keys rotated in one call (posenc::apply_rotary_qk / apply_rotary_qk_,
// RotaryEmbedding::forward_qk): the same values, bit for bit, as two apply_rotary calls and as the
// composite kernels, for GQA/MQA head counts, both pairings, both layouts, partial rotary, every
// position form, in place on views of a fused qkv tensor; gradients; errors.

#include <posenc/export.h>
#include <posenc/posenc.h>

#include "ops/common/composite_kernels.h"
#include "ops/rotary/composite_kernel.h"
#include "test_util.h"

#include <torch/autograd.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

namespace composite = posenc::ops::composite;
namespace F = posenc::functional;

namespace {

class RotaryQk : public posenc_test::SeededTest {};

const std::vector<torch::Dtype> kDtypes = {torch::kHalf, torch::kBFloat16, torch::kFloat,
                                           torch::kDouble};

c10::optional<torch::Tensor> given(const torch::Tensor& t) {
  return t.defined() ? c10::optional<torch::Tensor>(t) : c10::nullopt;
}

// [B, L, H, Dh] or, heads_first, [B, H, L, Dh].
torch::Tensor heads(int64_t b, int64_t l, int64_t h, int64_t d, bool heads_first,
                    torch::Dtype dtype) {
  return (heads_first ? torch::randn({b, h, l, d}) : torch::randn({b, l, h, d})).to(dtype);
}

} // namespace

TEST_F(RotaryQk, EqualsTwoSingleCallsAndComposite) {
  const auto tables = F::rotary_tables(64, 12); // rotated 12 of 16 channels: partial rotary
  const std::vector<torch::Tensor> position_cases = {
      torch::Tensor(), torch::tensor({3, 0, 63, 7, 8}, torch::kLong),
      torch::tensor({{0, 5, -1, 63, 2}, {1, 1, 1, -1, 1}}, torch::kLong)};
  for (const auto dtype : kDtypes) {
    for (const bool heads_first : {false, true}) {
      for (const bool interleaved : {false, true}) {
        for (const bool inverse : {false, true}) {
          for (const int64_t k_heads : {int64_t{8}, int64_t{2}, int64_t{1}}) { // MHA, GQA, MQA
            for (const auto& positions : position_cases) {
              const auto q = heads(2, 5, 8, 16, heads_first, dtype);
              const auto k = heads(2, 5, k_heads, 16, heads_first, dtype);
              const int64_t offset = positions.defined() ? 0 : 40;
              const auto both =
                  posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, offset,
                                               given(positions), interleaved, heads_first, inverse);
              const auto q_alone =
                  posenc::ops::apply_rotary(q, tables.first, tables.second, offset,
                                            given(positions), interleaved, heads_first, inverse);
              const auto k_alone =
                  posenc::ops::apply_rotary(k, tables.first, tables.second, offset,
                                            given(positions), interleaved, heads_first, inverse);
              EXPECT_TRUE(torch::equal(std::get<0>(both), q_alone))
                  << dtype << heads_first << interleaved << inverse << k_heads;
              EXPECT_TRUE(torch::equal(std::get<1>(both), k_alone))
                  << dtype << heads_first << interleaved << inverse << k_heads;
              const auto reference =
                  composite::apply_rotary_qk(q, k, tables.first, tables.second, offset,
                                             given(positions), interleaved, heads_first, inverse);
              EXPECT_TRUE(torch::equal(std::get<0>(reference), q_alone));
              EXPECT_TRUE(torch::equal(std::get<1>(reference), k_alone));
              auto q_in = q.clone();
              auto k_in = k.clone();
              posenc::ops::apply_rotary_qk_(q_in, k_in, tables.first, tables.second, offset,
                                            given(positions), interleaved, heads_first, inverse);
              EXPECT_TRUE(torch::equal(q_in, q_alone));
              EXPECT_TRUE(torch::equal(k_in, k_alone));
            }
          }
        }
      }
    }
  }
}

TEST_F(RotaryQk, BFloat16RoundingOfSpecialValuesEqualsTheComposite) {
  // The bfloat16 rows of whole-head rotations may be rounded in hardware (AVX512-BF16, whose
  // conversion flushes subnormals: bfloat16_rows.h); NaN, infinities, signed zeros, subnormal
  // inputs and results, results that overflow to infinity and ties must give the composite's bits,
  // in both layouts (one token: the decoding step's pass over the tokens), both directions, in
  // place and not.
  const auto special = torch::tensor({std::nanf(""), -std::nanf(""), INFINITY, -INFINITY, 0.0f,
                                      -0.0f, 1e-39f, -3e-39f, 1.2e-38f, 9.2e-41f, 3.3e38f, -3.3e38f,
                                      1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.0f, 1e-30f});
  for (const int64_t head_dim : {int64_t{32}, int64_t{64}}) { // 16 and 32 pairs
    const auto tables = F::rotary_tables(64, head_dim);
    for (const bool heads_first : {false, true}) {
      for (const bool inverse : {false, true}) {
        for (const int64_t length : {int64_t{1}, int64_t{3}}) {
          auto q = heads(2, length, 4, head_dim, heads_first, torch::kFloat);
          auto k = heads(2, length, 2, head_dim, heads_first, torch::kFloat);
          // special values scattered over both halves of the rows, scaled copies as well
          // (products that land in float32's subnormals)
          q.view(-1).index_put_({torch::randperm(q.numel()).narrow(0, 0, 48)},
                                torch::cat({special, special * 1e-3, special * 0.5}));
          k.view(-1).index_put_({torch::randperm(k.numel()).narrow(0, 0, 16)}, special);
          q = q.to(torch::kBFloat16);
          k = k.to(torch::kBFloat16);
          const int64_t offset = 60 - length;
          const auto reference = composite::apply_rotary_qk(
              q, k, tables.first, tables.second, offset, c10::nullopt, false, heads_first, inverse);
          const auto both = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, offset,
                                                         c10::nullopt, false, heads_first, inverse);
          auto q_in = q.clone();
          auto k_in = k.clone();
          posenc::ops::apply_rotary_qk_(q_in, k_in, tables.first, tables.second, offset,
                                        c10::nullopt, false, heads_first, inverse);
          // the same bits, but for NaN's (ATen's vectorized conversion writes 0xFFFF, c10's
          // scalar one and posenc's kernels 0x7FC0: any NaN is a NaN)
          const auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
            const auto nan = a.isnan();
            return torch::equal(nan, b.isnan()) &&
                   torch::equal(a.view(torch::kShort).masked_fill(nan, 0),
                                b.view(torch::kShort).masked_fill(nan, 0));
          };
          for (const auto& result :
               {std::make_pair(std::get<0>(both), std::get<1>(both)), std::make_pair(q_in, k_in)}) {
            EXPECT_TRUE(same(result.first, std::get<0>(reference)))
                << head_dim << heads_first << inverse << length;
            EXPECT_TRUE(same(result.second, std::get<1>(reference)))
                << head_dim << heads_first << inverse << length;
            EXPECT_GT(result.first.isnan().sum().item<int64_t>(), 0); // (the case is exercised)
          }
        }
      }
    }
  }
}

TEST_F(RotaryQk, HeadsFirstRunsSplitAcrossThreadsEqualTheComposite) {
  // [B, H, L, Dh] is walked in runs of a head's consecutive rows, one row-loop call per run
  // (consecutive cos/sin rows), and a thread's share of the rows starts and ends inside a head's
  // run: q 3 x 5 x 61 rows of 128 channels is cut mid-run by shares of 2 and 4 threads (at
  // grain_rows(128) = 256 rows), k 3 x 3 x 61 by 2. The queries and keys are also views of
  // [B, L, H, Dh] projections transposed, as transformers passes them (a row step of H * Dh).
  // Explicit positions, out-of-place partial rotary and the AVX512-BF16 rows take their own ways:
  // the composite's bits in every case.
  const auto tables = F::rotary_tables(256, 128);
  const auto partial = F::rotary_tables(256, 96);
  const int threads = at::get_num_threads();
  for (const int share : {2, 4}) {
    at::set_num_threads(share);
    if (at::get_num_threads() != share) {
      at::set_num_threads(threads);
      GTEST_SKIP() << "this build's thread pool keeps " << at::get_num_threads() << " threads";
    }
    for (const auto dtype : kDtypes) {
      for (const bool inverse : {false, true}) {
        for (const bool interleaved : {false, true}) {
          for (const bool rotate_part : {false, true}) {
            for (const bool explicit_positions : {false, true}) {
              for (const bool transposed : {false, true}) {
                const auto& cs = rotate_part ? partial : tables;
                const auto q = transposed ? heads(3, 61, 5, 128, false, dtype).transpose(1, 2)
                                          : heads(3, 61, 5, 128, true, dtype);
                const auto k = transposed ? heads(3, 61, 3, 128, false, dtype).transpose(1, 2)
                                          : heads(3, 61, 3, 128, true, dtype);
                const auto positions =
                    explicit_positions ? given(torch::randint(-1, 256, {3, 61}, torch::kLong))
                                       : c10::nullopt;
                const int64_t offset = explicit_positions ? 0 : 190;
                const auto reference = composite::apply_rotary_qk(
                    q, k, cs.first, cs.second, offset, positions, interleaved, true, inverse);
                const auto both = posenc::ops::apply_rotary_qk(
                    q, k, cs.first, cs.second, offset, positions, interleaved, true, inverse);
                auto q_in = q.clone(at::MemoryFormat::Preserve);
                auto k_in = k.clone(at::MemoryFormat::Preserve);
                posenc::ops::apply_rotary_qk_(q_in, k_in, cs.first, cs.second, offset, positions,
                                              interleaved, true, inverse);
                const auto where = ::testing::Message()
                                   << dtype << " threads " << share << " inverse " << inverse
                                   << " interleaved " << interleaved << " partial " << rotate_part
                                   << " positions " << explicit_positions << " transposed "
                                   << transposed;
                EXPECT_EQ(q_in.strides(), q.strides()) << where; // (rotated where it lies)
                EXPECT_TRUE(torch::equal(std::get<0>(both), std::get<0>(reference))) << where;
                EXPECT_TRUE(torch::equal(std::get<1>(both), std::get<1>(reference))) << where;
                EXPECT_TRUE(torch::equal(q_in, std::get<0>(reference))) << where;
                EXPECT_TRUE(torch::equal(k_in, std::get<1>(reference))) << where;
              }
            }
          }
        }
      }
    }
  }
  at::set_num_threads(threads);
}

TEST_F(RotaryQk, KeysMayBeWiderOrNarrowerThanQueries) {
  // DeepSeek-style: the rotated part is shared, the heads' widths differ.
  const auto tables = F::rotary_tables(16, 8);
  const auto q = torch::randn({1, 4, 3, 24});
  const auto k = torch::randn({1, 4, 1, 8});
  const auto both = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, 2);
  EXPECT_TRUE(torch::equal(std::get<0>(both),
                           posenc::ops::apply_rotary(q, tables.first, tables.second, 2)));
  EXPECT_TRUE(torch::equal(std::get<1>(both),
                           posenc::ops::apply_rotary(k, tables.first, tables.second, 2)));
}

TEST_F(RotaryQk, InPlaceOnViewsOfAFusedQkvTensor) {
  // One projection's output [B, L, Hq + 2 Hk, Dh], split into q, k, v views (no copies), as in
  // vLLM and flash-attn's apply_rotary_emb_qkv_: q and k are rotated where they lie, v untouched.
  const auto tables = F::rotary_tables(32, 16);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const bool heads_first : {false, true}) {
      const int64_t hq = 4;
      const int64_t hk = 2;
      auto qkv = heads_first ? torch::randn({2, hq + 2 * hk, 6, 16}).to(dtype)
                             : torch::randn({2, 6, hq + 2 * hk, 16}).to(dtype);
      const int64_t head_dim = heads_first ? 1 : 2;
      const auto original = qkv.clone();
      auto q = qkv.narrow(head_dim, 0, hq);
      auto k = qkv.narrow(head_dim, hq, hk);
      ASSERT_FALSE(q.is_contiguous());
      const auto q_expected = posenc::ops::apply_rotary(q.contiguous(), tables.first, tables.second,
                                                        5, c10::nullopt, false, heads_first);
      const auto k_expected = posenc::ops::apply_rotary(k.contiguous(), tables.first, tables.second,
                                                        5, c10::nullopt, false, heads_first);
      // Out of place from the views: the same values.
      const auto both = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, 5,
                                                     c10::nullopt, false, heads_first);
      EXPECT_TRUE(torch::equal(std::get<0>(both), q_expected));
      EXPECT_TRUE(torch::equal(std::get<1>(both), k_expected));
      EXPECT_TRUE(torch::equal(qkv, original)); // inputs untouched
      const void* data = qkv.data_ptr();
      posenc::ops::apply_rotary_qk_(q, k, tables.first, tables.second, 5, c10::nullopt, false,
                                    heads_first);
      EXPECT_EQ(qkv.data_ptr(), data);
      EXPECT_TRUE(torch::equal(q, q_expected)) << dtype << heads_first;
      EXPECT_TRUE(torch::equal(k, k_expected)) << dtype << heads_first;
      EXPECT_TRUE(
          torch::equal(qkv.narrow(head_dim, hq + hk, hk), original.narrow(head_dim, hq + hk, hk)));
    }
  }
  // Channels not contiguous (a transposed last pair of dimensions): copied in and back, same
  // values.
  auto q = torch::randn({1, 3, 16, 2}).transpose(2, 3); // [1, 3, 2, 16], channel stride 2
  ASSERT_NE(q.stride(3), 1);
  auto k = torch::randn({1, 3, 1, 16});
  const auto q_expected = posenc::ops::apply_rotary(q.contiguous(), tables.first, tables.second);
  const auto k_expected = posenc::ops::apply_rotary(k, tables.first, tables.second);
  posenc::ops::apply_rotary_qk_(q, k, tables.first, tables.second);
  EXPECT_TRUE(torch::equal(q, q_expected));
  EXPECT_TRUE(torch::equal(k, k_expected));
}

TEST_F(RotaryQk, PositionsPastTheCachesFromInvFreq) {
  const auto frequencies = F::rotary_inv_freq(8);
  const auto tables = F::rotary_tables(16, 8);
  const auto long_tables = F::rotary_tables(128, 8);
  const auto q = torch::randn({2, 3, 4, 8});
  const auto k = torch::randn({2, 3, 2, 8});
  const auto positions = torch::tensor({{100, 3, 127}, {-1, 15, 16}}, torch::kLong);
  const auto both = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, 0, positions,
                                                 false, false, false, frequencies, 1.0);
  const auto expected =
      posenc::ops::apply_rotary_qk(q, k, long_tables.first, long_tables.second, 0, positions);
  EXPECT_TRUE(torch::equal(std::get<0>(both), std::get<0>(expected)));
  EXPECT_TRUE(torch::equal(std::get<1>(both), std::get<1>(expected)));
}

TEST_F(RotaryQk, Gradients) {
  const auto tables = F::rotary_tables(16, 6, F::RotaryTablesFuncOptions().dtype(torch::kDouble));
  const auto q = torch::randn({2, 4, 4, 8}, torch::dtype(torch::kDouble).requires_grad(true));
  const auto k = torch::randn({2, 4, 2, 8}, torch::dtype(torch::kDouble).requires_grad(true));
  const auto positions = torch::tensor({{0, 5, -1, 15}, {1, 1, 2, 3}}, torch::kLong);
  for (const bool interleaved : {false, true}) {
    // The map is linear, so its gradient is its adjoint: <g, R v> = <R^T g, v> for any v, g
    // (an adjoint test, independent of how backward computes R^T).
    const auto out =
        posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, 0, positions, interleaved);
    const auto gq = torch::randn_like(std::get<0>(out));
    const auto gk = torch::randn_like(std::get<1>(out));
    const auto grads =
        torch::autograd::grad({std::get<0>(out), std::get<1>(out)}, {q, k}, {gq, gk});
    const auto vq = torch::randn_like(q);
    const auto vk = torch::randn_like(k);
    const auto rotated = posenc::ops::apply_rotary_qk(vq, vk, tables.first, tables.second, 0,
                                                      positions, interleaved);
    EXPECT_NEAR((gq * std::get<0>(rotated)).sum().item<double>(),
                (grads[0] * vq).sum().item<double>(), 1e-10);
    EXPECT_NEAR((gk * std::get<1>(rotated)).sum().item<double>(),
                (grads[1] * vk).sum().item<double>(), 1e-10);
  }
  // Only one of the outputs used: the other gets no gradient, the used one its inverse rotation.
  const auto out = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, 3);
  const auto upstream = torch::randn_like(std::get<1>(out));
  std::get<1>(out).backward(upstream);
  EXPECT_FALSE(q.grad().defined());
  EXPECT_TRUE(torch::allclose(
      k.grad(), posenc::ops::apply_rotary(upstream, tables.first, tables.second, 3, c10::nullopt,
                                          false, false, /*inverse=*/true)));
  // In place on non-leaf tensors.
  const auto q2 = q.detach().clone().requires_grad_();
  const auto k2 = k.detach().clone().requires_grad_();
  auto q_work = q2 * 1.0;
  auto k_work = k2 * 1.0;
  posenc::ops::apply_rotary_qk_(q_work, k_work, tables.first, tables.second, 3);
  (q_work.sum() + (k_work * upstream).sum()).backward();
  EXPECT_TRUE(torch::allclose(k2.grad(), k.grad()));
  EXPECT_TRUE(torch::allclose(
      q2.grad(), posenc::ops::apply_rotary(torch::ones_like(q), tables.first, tables.second, 3,
                                           c10::nullopt, false, false, /*inverse=*/true)));
}

TEST_F(RotaryQk, Errors) {
  const auto tables = F::rotary_tables(16, 8);
  const auto q = torch::randn({2, 4, 4, 8});
  EXPECT_POSENC_ERROR(
      posenc::ops::apply_rotary_qk(q, torch::randn({2, 3, 2, 8}), tables.first, tables.second),
      "k must hold the keys of q's tokens");
  EXPECT_POSENC_ERROR(
      posenc::ops::apply_rotary_qk(q, torch::randn({1, 4, 2, 8}), tables.first, tables.second),
      "k must hold the keys of q's tokens");
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_qk(q, torch::randn({2, 4, 2, 8}).to(torch::kHalf),
                                                   tables.first, tables.second),
                      "q and k must share a dtype");
  EXPECT_POSENC_ERROR(
      posenc::ops::apply_rotary_qk(q, torch::randn({2, 4, 2, 6}), tables.first, tables.second),
      "is smaller than the rotated width 8");
  EXPECT_POSENC_ERROR(
      posenc::ops::apply_rotary_qk(q, torch::randn({2, 4, 8}), tables.first, tables.second),
      "expected a 4-D query or key tensor");
  // In place: q and k the same memory, or overlapping the caches.
  auto same = q.clone();
  auto alias = same;
  const auto before = same.clone();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_qk_(same, alias, tables.first, tables.second),
                      "q shares memory with k");
  EXPECT_TRUE(torch::equal(same, before));
  auto caches = torch::randn({16, 4});
  auto k_over = caches.view({2, 4, 1, 8});
  auto q2 = q.clone();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_qk_(q2, k_over, caches, caches.clone()),
                      "k shares memory with cos");
  // The module: keys whose width contradicts head_dim.
  posenc::RotaryEmbedding rope(8, 16);
  EXPECT_POSENC_ERROR(rope->forward_qk(q, torch::randn({2, 4, 2, 12})),
                      "RotaryEmbedding: expected heads of width head_dim = 8");
  EXPECT_POSENC_ERROR(rope->forward_qk(q, torch::randn({2, 4, 2, 8}), 14),
                      "RotaryEmbedding: positions offset .. offset + L - 1 must lie in the table");
  // A leaf that requires grad cannot be written in place, and nothing is written.
  auto leaf = torch::randn({2, 4, 2, 8}, torch::requires_grad());
  auto q3 = q.clone();
  const auto q3_before = q3.clone();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_qk_(q3, leaf, tables.first, tables.second),
                      "leaf Variable that requires grad");
  EXPECT_TRUE(torch::equal(q3, q3_before));
}

TEST_F(RotaryQk, ModuleForwardQkEqualsForwardOnEach) {
  // Default, and dynamic NTK past its switch length (the call's own frequencies) with positions
  // past max_len extrapolated.
  auto dynamic = posenc::RotaryEmbeddingOptions(16, 32)
                     .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)
                     .scaling(posenc::RopeScalingOptions(posenc::RopeType::kDynamic)
                                  .factor(2.0)
                                  .max_position_embeddings(8));
  const auto plain =
      posenc::RotaryEmbeddingOptions(16, 32).beyond_max_len(posenc::BeyondMaxLen::kExtrapolate);
  for (const auto& options : {plain, dynamic}) {
    for (const bool heads_first : {false, true}) {
      auto opts = options;
      opts.heads_first(heads_first);
      posenc::RotaryEmbedding rope(opts);
      const auto q = heads(2, 6, 4, 16, heads_first, torch::kFloat);
      const auto k = heads(2, 6, 1, 16, heads_first, torch::kFloat);
      for (const int64_t offset : {int64_t{0}, int64_t{20}, int64_t{30}}) {
        const auto both = rope->forward_qk(q, k, offset);
        EXPECT_TRUE(torch::equal(std::get<0>(both), rope->forward(q, offset)));
        EXPECT_TRUE(torch::equal(std::get<1>(both), rope->forward(k, offset)));
      }
      const auto positions = torch::tensor({{0, 1, 2, 3, 4, 5}, {20, 21, 22, -1, 40, 41}});
      const auto both = rope->forward_qk_positions(q, k, positions);
      EXPECT_TRUE(torch::equal(std::get<0>(both), rope->forward_positions(q, positions)));
      EXPECT_TRUE(torch::equal(std::get<1>(both), rope->forward_positions(k, positions)));
      auto q_in = q.clone();
      auto k_in = k.clone();
      rope->forward_qk_(q_in, k_in, 0, positions);
      EXPECT_TRUE(torch::equal(q_in, std::get<0>(both)));
      EXPECT_TRUE(torch::equal(k_in, std::get<1>(both)));
      // Functional twin, on the module's caches.
      if (!opts.scaling().factor()) {
        const auto functional = F::rotary_embedding_qk(
            q, k, rope->cos, rope->sin,
            F::RotaryEmbeddingFuncOptions().offset(3).heads_first(heads_first));
        EXPECT_TRUE(torch::equal(std::get<0>(functional), rope->forward(q, 3)));
        EXPECT_TRUE(torch::equal(std::get<1>(functional), rope->forward(k, 3)));
      }
    }
  }
}

TEST_F(RotaryQk, MetaShapes) {
  const auto tables = F::rotary_tables(16, 8);
  const auto q = torch::empty({2, 4, 4, 8}, torch::kMeta);
  const auto k = torch::empty({2, 4, 2, 8}, torch::kMeta);
  const auto out = posenc::ops::apply_rotary_qk(q, k, tables.first.to(torch::kMeta),
                                                tables.second.to(torch::kMeta));
  EXPECT_EQ(std::get<0>(out).sizes(), q.sizes());
  EXPECT_EQ(std::get<1>(out).sizes(), k.sizes());
  EXPECT_TRUE(std::get<1>(out).is_meta());
}

TEST_F(RotaryQk, OnGpuMatchesCpu_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const auto tables = F::rotary_tables(64, 12);
  const auto positions = torch::tensor({{0, 5, -1, 63, 2}, {1, 1, 1, 1, 1}}, torch::kLong);
  for (const auto dtype : kDtypes) {
    for (const bool interleaved : {false, true}) {
      for (const bool heads_first : {false, true}) {
        const auto q = heads(2, 5, 8, 16, heads_first, dtype);
        const auto k = heads(2, 5, 2, 14, heads_first, dtype); // narrower keys: tails differ
        const auto cpu = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second, 0,
                                                      positions, interleaved, heads_first);
        const auto gpu = posenc::ops::apply_rotary_qk(q.cuda(), k.cuda(), tables.first.cuda(),
                                                      tables.second.cuda(), 0, positions.cuda(),
                                                      interleaved, heads_first);
        EXPECT_TRUE(torch::equal(std::get<0>(gpu).cpu(), std::get<0>(cpu)));
        EXPECT_TRUE(torch::equal(std::get<1>(gpu).cpu(), std::get<1>(cpu)));
        auto q_gpu = q.cuda();
        auto k_gpu = k.cuda();
        posenc::ops::apply_rotary_qk_(q_gpu, k_gpu, tables.first.cuda(), tables.second.cuda(), 0,
                                      positions.cuda(), interleaved, heads_first);
        EXPECT_TRUE(torch::equal(q_gpu.cpu(), std::get<0>(cpu)));
        EXPECT_TRUE(torch::equal(k_gpu.cpu(), std::get<1>(cpu)));
      }
    }
  }
  // Views of one fused qkv tensor on the GPU, rotated where they lie.
  auto qkv = torch::randn({2, 5, 12, 16}).cuda();
  const auto original = qkv.clone();
  auto q = qkv.narrow(2, 0, 8);
  auto k = qkv.narrow(2, 8, 2);
  posenc::ops::apply_rotary_qk_(q, k, tables.first.cuda(), tables.second.cuda(), 3);
  const auto expected = posenc::ops::apply_rotary_qk(original.narrow(2, 0, 8).cpu().contiguous(),
                                                     original.narrow(2, 8, 2).cpu().contiguous(),
                                                     tables.first, tables.second, 3);
  EXPECT_TRUE(torch::equal(q.cpu(), std::get<0>(expected)));
  EXPECT_TRUE(torch::equal(k.cpu(), std::get<1>(expected)));
  EXPECT_TRUE(torch::equal(qkv.narrow(2, 10, 2).cpu(), original.narrow(2, 10, 2).cpu()));
}

// --- Multimodal RoPE (Qwen2-VL M-RoPE, Qwen3-VL interleaved) ----------------------------------

namespace {

// The axis of each of `half` frequencies, written out independently of detail::mrope_axes.
std::vector<int64_t> expected_axes(const std::vector<int64_t>& section, bool interleaved,
                                   int64_t half) {
  std::vector<int64_t> axes;
  if (!interleaved) {
    for (int64_t a = 0; a < 3; ++a) {
      axes.insert(axes.end(), static_cast<size_t>(section[static_cast<size_t>(a)]), a);
    }
    return axes;
  }
  axes.assign(static_cast<size_t>(half), 0); // Qwen3-VL: T everywhere, then H and W slots
  for (int64_t a = 1; a < 3; ++a) {
    for (int64_t i = a; i < 3 * section[static_cast<size_t>(a)]; i += 3) {
      axes[static_cast<size_t>(i)] = a;
    }
  }
  return axes;
}

} // namespace

TEST_F(RotaryQk, MultimodalTablesTakeEachFrequencyFromItsAxis) {
  const auto tables = F::rotary_tables(64, 24, F::RotaryTablesFuncOptions().base(1e6));
  const auto positions = torch::randint(0, 64, {3, 2, 5}, torch::kLong);
  for (const bool interleaved : {false, true}) {
    const std::vector<int64_t> section = {4, 4, 4};
    const auto rows =
        F::multimodal_rotary_tables(tables.first, tables.second, positions, section, interleaved);
    ASSERT_EQ(rows.first.sizes(), (std::vector<int64_t>{2, 5, 12}));
    const auto axes = expected_axes(section, interleaved, 12);
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t l = 0; l < 5; ++l) {
        for (int64_t i = 0; i < 12; ++i) {
          const int64_t p = positions[axes[static_cast<size_t>(i)]][b][l].item<int64_t>();
          EXPECT_EQ(rows.first[b][l][i].item<float>(), tables.first[p][i].item<float>());
          EXPECT_EQ(rows.second[b][l][i].item<float>(), tables.second[p][i].item<float>());
        }
      }
    }
    // Equal positions on the three axes: plain RoPE's rows.
    const auto same = torch::arange(5).view({1, 1, 5}).expand({3, 2, 5});
    const auto plain =
        F::multimodal_rotary_tables(tables.first, tables.second, same, section, interleaved);
    EXPECT_TRUE(torch::equal(plain.first[1], tables.first.narrow(0, 0, 5)));
  }
  // [3, L] positions: [L, R/2] rows.
  const auto shared =
      F::multimodal_rotary_tables(tables.first, tables.second, positions.select(1, 0), {6, 3, 3});
  EXPECT_EQ(shared.first.sizes(), (std::vector<int64_t>{5, 12}));
}

TEST_F(RotaryQk, MultimodalModule) {
  // Qwen2-VL-like: head 16, R/2 = 8 = 2 + 3 + 3.
  for (const bool interleaved : {false, true}) {
    for (const bool heads_first : {false, true}) {
      const auto options = posenc::RotaryEmbeddingOptions(16, 64)
                               .base(1e6)
                               .heads_first(heads_first)
                               .mrope_section({2, 3, 3})
                               .mrope_interleaved(interleaved)
                               .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate);
      posenc::RotaryEmbedding rope(options);
      const auto q = heads(2, 6, 4, 16, heads_first, torch::kFloat);
      const auto k = heads(2, 6, 2, 16, heads_first, torch::kFloat);
      auto positions = torch::randint(0, 64, {3, 2, 6}, torch::kLong);
      positions[1][1][5] = 90; // past the caches: computed from the frequencies
      const auto both = rope->forward_qk_positions(q, k, positions);
      // Reference: per-token rows gathered per frequency, then one rotation per token.
      const auto big = F::rotary_tables(128, 16, F::RotaryTablesFuncOptions().base(1e6));
      const auto rows =
          F::multimodal_rotary_tables(big.first, big.second, positions, {2, 3, 3}, interleaved);
      const auto index = torch::arange(12).view({2, 6});
      const auto q_expected = posenc::ops::apply_rotary(
          q, rows.first.view({12, 8}), rows.second.view({12, 8}), 0, index, false, heads_first);
      const auto k_expected = posenc::ops::apply_rotary(
          k, rows.first.view({12, 8}), rows.second.view({12, 8}), 0, index, false, heads_first);
      EXPECT_TRUE(torch::equal(std::get<0>(both), q_expected)) << interleaved << heads_first;
      EXPECT_TRUE(torch::equal(std::get<1>(both), k_expected)) << interleaved << heads_first;
      EXPECT_TRUE(torch::equal(rope->forward_positions(q, positions), q_expected));
      // Text tokens ([B, L] positions, or all three axes equal): plain RoPE.
      const auto text = torch::arange(6).view({1, 6}).expand({2, 6});
      EXPECT_TRUE(torch::equal(rope->forward_positions(q, text), rope->forward(q)));
      EXPECT_TRUE(torch::equal(rope->forward_positions(q, text.unsqueeze(0).expand({3, 2, 6})),
                               rope->forward(q)));
      EXPECT_NE(posenc_test::printed(*rope).find("mrope_section=[2, 3, 3]"), std::string::npos);
    }
  }
}

// mrope_hw_alternating (ERNIE 4.5-VL): sections {t, h, w} = {2, 3, 3} of R/2 = 8 frequencies give
// frequencies 0..5 to height, width, height, width, height, width and 6, 7 to time; each token's
// row of frequency i is the cache's row at the position of i's axis (rows past the caches computed,
// as the other assignments'); text positions are plain RoPE; the TorchScript export turns alike.
TEST_F(RotaryQk, MultimodalHeightWidthAlternating) {
  const std::vector<int64_t> axes = {1, 2, 1, 2, 1, 2, 0, 0};
  for (const bool heads_first : {false, true}) {
    posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(16, 64)
                                     .base(1e4)
                                     .heads_first(heads_first)
                                     .pairing(posenc::RotaryPairing::kInterleaved)
                                     .mrope_section({2, 3, 3})
                                     .mrope_hw_alternating(true)
                                     .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate));
    EXPECT_NE(posenc_test::printed(*rope).find("mrope_hw_alternating=true"), std::string::npos);
    const auto q = heads(2, 6, 4, 16, heads_first, torch::kFloat);
    const auto k = heads(2, 6, 2, 16, heads_first, torch::kFloat);
    auto positions = torch::randint(0, 64, {3, 2, 6}, torch::kLong);
    positions[2][1][5] = 90; // past the caches: computed from the frequencies
    const auto big = F::rotary_tables(128, 16, F::RotaryTablesFuncOptions().base(1e4));
    auto cos_rows = torch::empty({12, 8});
    auto sin_rows = torch::empty({12, 8});
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t l = 0; l < 6; ++l) {
        for (int64_t i = 0; i < 8; ++i) {
          const int64_t p = positions[axes[static_cast<size_t>(i)]][b][l].item<int64_t>();
          cos_rows[b * 6 + l][i] = big.first[p][i];
          sin_rows[b * 6 + l][i] = big.second[p][i];
        }
      }
    }
    const auto index = torch::arange(12).view({2, 6});
    const auto q_expected =
        posenc::ops::apply_rotary(q, cos_rows, sin_rows, 0, index, true, heads_first);
    const auto k_expected =
        posenc::ops::apply_rotary(k, cos_rows, sin_rows, 0, index, true, heads_first);
    const auto both = rope->forward_qk_positions(q, k, positions);
    EXPECT_TRUE(torch::equal(std::get<0>(both), q_expected)) << heads_first;
    EXPECT_TRUE(torch::equal(std::get<1>(both), k_expected)) << heads_first;
    EXPECT_TRUE(torch::equal(rope->forward_positions(q, positions), q_expected));
    // not Qwen2-VL's contiguous blocks
    posenc::RotaryEmbedding blocks(posenc::RotaryEmbeddingOptions(rope->options)
                                       .mrope_hw_alternating(false));
    EXPECT_FALSE(torch::equal(blocks->forward_positions(q, positions), q_expected));
    const auto text = torch::arange(6).view({1, 1, 6}).expand({3, 2, 6});
    EXPECT_TRUE(torch::equal(rope->forward_positions(q, text), rope->forward(q)));
    auto exported = posenc::to_torchscript(rope);
    const auto scripted = exported.get_method("forward_positions")({q, positions}).toTensor();
    EXPECT_LE((scripted - q_expected).abs().max().item<double>(), 1e-6);
  }
  EXPECT_POSENC_ERROR(posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(16, 64)
                                                  .mrope_section({2, 4, 2})
                                                  .mrope_hw_alternating(true)),
                      "mrope_section's height and width sizes must be equal, but got [2, 4, 2]");
  EXPECT_POSENC_ERROR(posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(16, 64)
                                                  .mrope_section({2, 3, 3})
                                                  .mrope_interleaved(true)
                                                  .mrope_hw_alternating(true)),
                      "excludes mrope_interleaved (Qwen3-VL's), but mrope_interleaved is set too");
  EXPECT_POSENC_ERROR(
      posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(16, 64).mrope_hw_alternating(true)),
      "needs mrope_section and excludes mrope_interleaved (Qwen3-VL's), but mrope_section is "
      "empty");
}

TEST_F(RotaryQk, MultimodalErrors) {
  const auto tables = F::rotary_tables(16, 8);
  const auto positions = torch::zeros({3, 1, 4}, torch::kLong);
  EXPECT_POSENC_ERROR(F::multimodal_rotary_tables(tables.first, tables.second, positions, {1, 1}),
                      "mrope_section must hold three non-negative numbers");
  EXPECT_POSENC_ERROR(
      F::multimodal_rotary_tables(tables.first, tables.second, positions, {2, 2, 2}),
      "that sum to rotary_dim / 2 = 4, but got [2, 2, 2]");
  // Interleaved sections need not cover the frequencies (Qwen3-VL's recomposition; Qwen4-Exp's
  // [11, 11, 10] of 128): the rest follow the temporal axis. Contiguous blocks must cover them.
  EXPECT_POSENC_ERROR(
      F::multimodal_rotary_tables(tables.first, tables.second, positions, {1, 1, 1}),
      "that sum to rotary_dim / 2 = 4, but got [1, 1, 1]");
  const auto axes =
      torch::stack({torch::zeros({1, 4}, torch::kLong), torch::full({1, 4}, 5, torch::kLong),
                    torch::full({1, 4}, 9, torch::kLong)});
  const auto fewer =
      F::multimodal_rotary_tables(tables.first, tables.second, axes, {1, 1, 1}, true).first;
  // frequency 0: temporal (position 0), 1: height (5), 2: width (9), 3: temporal again
  EXPECT_TRUE(torch::equal(fewer.reshape({4, 4})[0],
                           torch::stack({tables.first[0][0], tables.first[5][1], tables.first[9][2],
                                         tables.first[0][3]})));
  EXPECT_POSENC_ERROR(
      F::multimodal_rotary_tables(tables.first, tables.second, positions[0], {2, 1, 1}),
      "multimodal positions must be [3, B, L] or [3, L]");
  EXPECT_POSENC_ERROR(
      F::multimodal_rotary_tables(tables.first, tables.second,
                                  torch::full({3, 1, 4}, 16, torch::kLong), {2, 1, 1}),
      "16");
  EXPECT_POSENC_ERROR(
      F::multimodal_rotary_tables(tables.first, tables.second,
                                  torch::full({3, 1, 4}, -1, torch::kLong), {2, 1, 1}),
      "multimodal positions must be >= 0");
  EXPECT_POSENC_ERROR(
      posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(8, 16).mrope_section({1, 1, 1})),
      "RotaryEmbedding: mrope_section must hold");
  posenc::RotaryEmbedding rope(8, 16);
  EXPECT_POSENC_ERROR(rope->forward_positions(torch::randn({1, 4, 2, 8}), positions),
                      "the module has no mrope_section");
}

// The positions of multimodal batches (posenc::mrope_position_ids), written out by hand from
// transformers' get_rope_index rules; test_rope_qk_mrope.py compares them with transformers' own.
TEST_F(RotaryQk, MultimodalPositionIds) {
  const auto longs = [](std::vector<int64_t> values) { return torch::tensor(values); };
  // text, text, an image of 1 x 4 x 4 patches (2 x 2 tokens after the merge), text
  const auto types = torch::tensor({{0, 0, 1, 1, 1, 1, 0}});
  const auto images = torch::tensor({{1, 4, 4}});
  auto [positions, deltas] =
      F::mrope_position_ids(types, F::MRopePositionIdsFuncOptions().image_grid_thw(images));
  EXPECT_TRUE(torch::equal(positions,
                           torch::stack({longs({0, 1, 2, 2, 2, 2, 4}), longs({0, 1, 2, 2, 3, 3, 4}),
                                         longs({0, 1, 2, 3, 2, 3, 4})})
                               .reshape({3, 1, 7})));
  EXPECT_TRUE(torch::equal(deltas, torch::tensor({{-2}})));
  // A video of 3 frames of 2 x 2 patches (one token each), 0.5 positions apart (floored), after
  // a left-padded token and a text token; the padding gets 0 and is not counted.
  const auto video_types = torch::tensor({{0, 0, 2, 2, 2, 0}});
  const auto mask = torch::tensor({{0, 1, 1, 1, 1, 1}});
  const auto videos = torch::tensor({{3, 2, 2}});
  std::tie(positions, deltas) =
      F::mrope_position_ids(video_types, F::MRopePositionIdsFuncOptions()
                                             .video_grid_thw(videos)
                                             .attention_mask(mask)
                                             .video_time_intervals(std::vector<double>{0.5}));
  EXPECT_TRUE(
      torch::equal(positions, torch::stack({longs({0, 0, 1, 1, 2, 2}), longs({0, 0, 1, 1, 1, 2}),
                                            longs({0, 0, 1, 1, 1, 2})})
                                  .reshape({3, 1, 6})));
  EXPECT_TRUE(torch::equal(deltas, torch::tensor({{2 + 1 - 5}})));
  // Frames apart (Qwen3-VL): each frame a grid of its own, the next one max(h, w) / m further.
  std::tie(positions, deltas) = F::mrope_position_ids(
      video_types,
      F::MRopePositionIdsFuncOptions().video_grid_thw(videos).attention_mask(mask).frames_apart(
          true));
  EXPECT_TRUE(torch::equal(positions[0], torch::tensor({{0, 0, 1, 2, 3, 4}})));
  EXPECT_TRUE(torch::equal(deltas, torch::tensor({{4 + 1 - 5}})));
  // The positions drive a multimodal RotaryEmbedding.
  posenc::RotaryEmbedding rope(
      posenc::RotaryEmbeddingOptions(8, 16).mrope_section(std::vector<int64_t>{2, 1, 1}));
  const auto x = torch::randn({1, 6, 2, 8});
  EXPECT_EQ(rope->forward_positions(x, positions).sizes(), x.sizes());
  // The shapes on the meta device (torch.compile's fake tensors).
  std::tie(positions, deltas) = F::mrope_position_ids(
      torch::zeros({2, 5}, torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta)));
  EXPECT_EQ(positions.sizes(), (std::vector<int64_t>{3, 2, 5}));
  EXPECT_EQ(deltas.sizes(), (std::vector<int64_t>{2, 1}));
}

TEST_F(RotaryQk, MultimodalPositionIdsErrors) {
  const auto types = torch::tensor({{0, 0, 1, 1, 1, 1, 0}});
  const auto images = torch::tensor({{1, 4, 4}});
  const auto with = [&](const torch::Tensor& grids) {
    return F::MRopePositionIdsFuncOptions().image_grid_thw(grids);
  };
  EXPECT_POSENC_ERROR(
      F::mrope_position_ids(types, with(images).spatial_merge_size(1)),
      "mrope_position_ids: row 0's run of 4 image tokens at columns 2..5 does not match "
      "its grids in image_grid_thw, which hold 16 tokens (t * h/1 * w/1 each)");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types),
                      "row 0 has more image tokens than image_grid_thw has grids for (0 grids)");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types, with(torch::cat({images, images}))),
                      "image_grid_thw has 2 grids, but the tokens use 1");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types * 3, with(images)),
                      "token_types must hold 0 (text), 1 (image) or 2 (video), but row 0 holds 3");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types, with(torch::tensor({{1, 3, 4}}))),
                      "each grid of image_grid_thw must have t >= 1 and h, w multiples of "
                      "spatial_merge_size = 2, but grid 0 is [1, 3, 4]");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types, with(torch::tensor({{1 << 20, 1 << 10, 2}}))),
                      "holds more than 2^28 tokens");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types, with(images.to(torch::kFloat))),
                      "image_grid_thw must be [N, 3] (t, h, w) integers, but got Float");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types.to(torch::kFloat), with(images)),
                      "token_types must be [B, L] integers");
  EXPECT_POSENC_ERROR(
      F::mrope_position_ids(types, with(images).attention_mask(torch::ones({1, 6}))),
      "attention_mask must have token_types' shape [1, 7], but got [1, 6]");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(types, with(images).spatial_merge_size(0)),
                      "spatial_merge_size must be >= 1, but got 0");
  const auto video = F::MRopePositionIdsFuncOptions().video_grid_thw(torch::tensor({{2, 2, 2}}));
  const auto video_types = torch::tensor({{2, 2}});
  EXPECT_POSENC_ERROR(
      F::mrope_position_ids(video_types, F::MRopePositionIdsFuncOptions(video).video_time_intervals(
                                             std::vector<double>{1.0, 2.0})),
      "video_time_intervals must give one interval per video (1), but gives 2");
  for (const double bad : {-1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    EXPECT_POSENC_ERROR(F::mrope_position_ids(
                            video_types, F::MRopePositionIdsFuncOptions(video).video_time_intervals(
                                             std::vector<double>{bad})),
                        "video_time_intervals must be finite and >= 0");
  }
  EXPECT_POSENC_ERROR(
      F::mrope_position_ids(video_types, F::MRopePositionIdsFuncOptions(video).video_time_intervals(
                                             std::vector<double>{1e30})),
      "video_time_intervals must keep each video's interval and temporal positions below 2^62, "
      "but video 0 of 2 frames has 1e+30");
  // (one frame: its temporal position is 0 * interval, but the interval is refused all the same)
  EXPECT_POSENC_ERROR(F::mrope_position_ids(torch::tensor({{2}}),
                                            F::MRopePositionIdsFuncOptions()
                                                .video_grid_thw(torch::tensor({{1, 2, 2}}))
                                                .video_time_intervals(std::vector<double>{1e39})),
                      "but video 0 of 1 frames has 1e+39");
  // frames_apart counts frames, one at a time (a grid of 2^28 frames is not expanded)
  EXPECT_POSENC_ERROR(
      F::mrope_position_ids(torch::tensor({{2}}),
                            F::MRopePositionIdsFuncOptions()
                                .video_grid_thw(torch::tensor({{1 << 28, 2, 2}}))
                                .frames_apart(true)),
      "video_grid_thw has 268435456 frames (frames_apart: each frame is a grid), but the tokens "
      "use 1");
  EXPECT_POSENC_ERROR(F::mrope_position_ids(torch::Tensor()), "mrope_position_ids: token_types");
}

// --- RoPE variants through the operators --------------------------------------------------------

TEST_F(RotaryQk, RopeFrequenciesOperatorIsTheModulesDefinition) {
  const auto llama3 = posenc::RopeScalingOptions(posenc::RopeType::kLlama3)
                          .factor(8.0)
                          .original_max_position_embeddings(512)
                          .max_position_embeddings(4096);
  const auto yarn = posenc::RopeScalingOptions(posenc::RopeType::kYarn)
                        .factor(4.0)
                        .original_max_position_embeddings(512)
                        .max_position_embeddings(2048);
  for (const auto& scaling : {llama3, yarn}) {
    posenc::ops::RopeFrequenciesArguments arguments;
    arguments.rotary_dim = 64;
    arguments.base = 500000.0;
    arguments.scaling = scaling;
    const auto frequencies = posenc::ops::rope_frequencies(arguments);
    posenc::RotaryEmbedding rope(
        posenc::RotaryEmbeddingOptions(64, 2048).base(500000.0).scaling(scaling));
    EXPECT_TRUE(torch::equal(std::get<0>(frequencies), rope->inv_freq()));
    EXPECT_EQ(std::get<1>(frequencies).item<double>(), rope->attention_factor());
    // The caches from them: the module's, bit for bit.
    const auto tables = posenc::ops::rotary_tables(2048, std::get<0>(frequencies),
                                                   std::get<1>(frequencies).item<double>());
    EXPECT_TRUE(torch::equal(std::get<0>(tables), rope->cos));
    EXPECT_TRUE(torch::equal(std::get<1>(tables), rope->sin));
  }
  posenc::ops::RopeFrequenciesArguments dynamic;
  dynamic.rotary_dim = 16;
  dynamic.scaling = posenc::RopeScalingOptions(posenc::RopeType::kDynamic).factor(2.0);
  EXPECT_POSENC_ERROR(posenc::ops::rope_frequencies(dynamic),
                      "reads the model's context length; set scaling.max_position_embeddings");
  dynamic.scaling.max_position_embeddings(32);
  dynamic.seq_len = 100;
  EXPECT_TRUE(torch::equal(
      std::get<0>(posenc::ops::rope_frequencies(dynamic)),
      F::rotary_inv_freq(16, F::RotaryTablesFuncOptions().scaling(dynamic.scaling).seq_len(100))));
  EXPECT_POSENC_ERROR(posenc::ops::rotary_tables(8, torch::ones({4}, torch::kFloat)),
                      "inv_freq must be a float64 [R/2] = [4] tensor");
}

// --- the fused KV-cache write -------------------------------------------------------------------

// RotaryEmbedding::forward_kv_cache_ is forward_qk_ at the slots' positions followed by the copy of
// the keys and values into each sequence's cache at its length, bit for bit, for the rope types
// whose rows are the caches' (llama3) and those computed per call (dynamic past its switch).
TEST(RotaryKvCache, ModuleWriteEqualsRotationThenCopy) {
  torch::manual_seed(21);
  for (const bool dynamic : {false, true}) {
    auto options = posenc::RotaryEmbeddingOptions(16, 64).rotary_dim(8);
    if (dynamic) {
      options.scaling(posenc::RopeScalingOptions(posenc::RopeType::kDynamic)
                          .factor(2.0)
                          .max_position_embeddings(16));
    } else {
      options.scaling(posenc::RopeScalingOptions(posenc::RopeType::kLlama3)
                          .factor(8.0)
                          .original_max_position_embeddings(16));
    }
    posenc::RotaryEmbedding rope(options);
    const auto q = torch::randn({2, 3, 4, 16});
    const auto k = torch::randn({2, 3, 2, 16});
    const auto v = torch::randn({2, 3, 2, 12});
    const auto seqlens = torch::tensor({1, 20}, torch::kInt);
    const auto positions = seqlens.to(torch::kLong).unsqueeze(1) + torch::arange(3);
    const auto [q_rot, k_rot] = rope->forward_qk_positions(q, k, positions);
    torch::Tensor q_run = q.clone();
    torch::Tensor k_cache = torch::zeros({2, 32, 2, 16});
    torch::Tensor v_cache = torch::zeros({2, 32, 2, 12});
    rope->forward_kv_cache_(q_run, k, v, k_cache, v_cache, seqlens);
    EXPECT_TRUE(torch::equal(q_run, q_rot)) << dynamic;
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t start = seqlens[b].item<int64_t>();
      EXPECT_TRUE(torch::equal(k_cache[b].narrow(0, start, 3), k_rot[b])) << dynamic;
      EXPECT_TRUE(torch::equal(v_cache[b].narrow(0, start, 3), v[b])) << dynamic;
      EXPECT_EQ(k_cache[b].narrow(0, 0, start).count_nonzero().item<int64_t>(), 0);
    }
    // The same tokens packed into a paged cache (blocks of 8, sequence b's slots from 32 b).
    torch::Tensor q_paged = q.clone().reshape({6, 4, 16});
    torch::Tensor k_pages = torch::zeros({8, 8, 2, 16});
    torch::Tensor v_pages = torch::zeros({8, 8, 2, 12});
    const auto slots = (positions + torch::tensor({0, 32}).unsqueeze(1)).reshape({-1});
    rope->forward_paged_kv_cache_(q_paged, k.reshape({6, 2, 16}), v.reshape({6, 2, 12}), k_pages,
                                  v_pages, positions.reshape({-1}), slots);
    if (!dynamic) { // (dynamic: one packed call takes the frequencies of its largest position)
      EXPECT_TRUE(torch::equal(q_paged.view({2, 3, 4, 16}), q_rot));
      EXPECT_TRUE(torch::equal(k_pages.view({64, 2, 16}).index_select(0, slots),
                               k_rot.reshape({6, 2, 16})));
    }
    EXPECT_TRUE(torch::equal(v_pages.view({64, 2, 12}).index_select(0, slots), v.reshape({6, 2, 12})));
  }
}

// The functional forms pass their options through: interleaved pairs, heads-first caches,
// explicit positions; the out-of-place form leaves q as it was.
TEST(RotaryKvCache, FunctionalForms) {
  torch::manual_seed(22);
  posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(8, 32));
  const auto q = torch::randn({1, 2, 2, 8});
  const auto k = torch::randn({1, 2, 1, 8});
  const auto v = torch::randn({1, 2, 1, 8});
  const auto positions = torch::tensor({{7, 8}});
  torch::Tensor k_cache = torch::zeros({1, 1, 4, 8});
  torch::Tensor v_cache = torch::zeros({1, 1, 4, 8});
  const auto options = F::KvCacheFuncOptions()
                           .positions(positions)
                           .pairing(posenc::RotaryPairing::kInterleaved)
                           .cache_heads_first(true);
  const auto q_out = F::rotary_kv_cache(q, k, v, k_cache, v_cache, rope->cos, rope->sin,
                                        torch::tensor({2}), options);
  const auto [q_rot, k_rot] = F::rotary_embedding_qk(
      q, k, rope->cos, rope->sin,
      F::RotaryEmbeddingFuncOptions().positions(positions).pairing(
          posenc::RotaryPairing::kInterleaved));
  EXPECT_TRUE(torch::equal(q_out, q_rot));
  EXPECT_TRUE(torch::equal(k_cache[0][0].narrow(0, 2, 2), k_rot[0].select(1, 0)));
  EXPECT_EQ(k_cache[0][0].narrow(0, 0, 2).count_nonzero().item<int64_t>(), 0);
  torch::Tensor q_in = q.clone().view({2, 2, 8});
  torch::Tensor pages = torch::zeros({2, 2, 1, 8});
  torch::Tensor v_pages = torch::zeros({2, 2, 1, 8});
  F::rotary_paged_kv_cache_(q_in, k.view({2, 1, 8}), v.view({2, 1, 8}), pages, v_pages, rope->cos,
                            rope->sin, positions.view({2}), torch::tensor({3, -1}),
                            F::KvCacheFuncOptions().pairing(posenc::RotaryPairing::kInterleaved));
  EXPECT_TRUE(torch::equal(q_in.view({1, 2, 2, 8}), q_rot));
  EXPECT_TRUE(torch::equal(pages[1][1], k_rot[0][0]));
  EXPECT_EQ(pages.count_nonzero().item<int64_t>(), k_rot[0][0].count_nonzero().item<int64_t>());
  // Inference only: a key that requires grad is refused, and nothing is written.
  torch::Tensor k_grad = k.view({2, 1, 8}).clone().requires_grad_();
  torch::Tensor fresh = torch::zeros({2, 2, 1, 8});
  EXPECT_THROW(F::rotary_paged_kv_cache_(q_in, k_grad, v.view({2, 1, 8}), fresh, v_pages,
                                         rope->cos, rope->sin, positions.view({2}),
                                         torch::tensor({0, 1})),
               c10::Error);
  EXPECT_EQ(fresh.count_nonzero().item<int64_t>(), 0);
}
