// What posenc's operators guarantee about the calls they accept: every tensor argument on one
// device (whichever kernel runs, Meta included); nothing written that is also read (an in-place
// target or `out` sharing memory with an input is rejected); autograd's in-place rules checked
// before anything is written; `out` resized by PyTorch's rules; options within the range where
// every value is a number.

#include <posenc/posenc.h>

#include "detail/memory_overlap.h"
#include "test_util.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace F = posenc::functional;
using posenc::BeyondMaxLen;

namespace {

class CallSafety : public posenc_test::SeededTest {};

const torch::Device kMeta(torch::kMeta);

// --- devices ---------------------------------------------------------------------------------

TEST_F(CallSafety, ColumnsOnAnotherDeviceAreRejected) {
  const auto table = F::sinusoidal_table(4, 6).unsqueeze(0);
  const auto x = torch::randn({1, 3, 6});
  const auto columns = F::sinusoidal_columns(6).to(kMeta);
  // Rejected even where the columns would not be read (positions inside the table): a meta
  // argument selects the Meta kernel, which must raise rather than return unwritten memory.
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(x, table, 0, true, c10::nullopt, 1.0, columns),
                      "columns is on meta and the input on cpu");
}

TEST_F(CallSafety, InvFreqOnAnotherDeviceIsRejected) {
  const auto caches = F::rotary_tables(8, 4);
  const auto q = torch::randn({1, 3, 2, 4});
  const auto inv_freq = F::rotary_inv_freq(4).to(kMeta);
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary(q, std::get<0>(caches), std::get<1>(caches), 0,
                                                c10::nullopt, false, false, false, inv_freq, 1.0),
                      "inv_freq is on meta and the input on cpu");
}

TEST_F(CallSafety, TokenColumnsOnAnotherDeviceAreRejected) {
  const auto weight = torch::randn({10, 6});
  const auto table = F::sinusoidal_table(4, 6);
  const auto ids = torch::randint(0, 10, {2, 3}, torch::kLong);
  EXPECT_POSENC_ERROR(
      posenc::ops::token_and_position_embedding(ids, weight, table, 0, true, c10::nullopt, 1.0, -1,
                                                0.0, false, F::sinusoidal_columns(6).to(kMeta)),
      "columns is on meta and the input on cpu");
}

// The backward operator of the token embedding with one argument on another device: its Meta kernel must raise, not return gradients nobody computed.
TEST_F(CallSafety, TokenBackwardRejectsAGradientOnAnotherDevice) {
  const auto backward =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("posenc::_token_and_position_embedding_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, int64_t, bool, const c10::optional<at::Tensor>&, double, int64_t,
              double, std::array<bool, 2>)>();
  const auto weight = torch::randn({10, 6});
  const auto table = F::sinusoidal_table(4, 6);
  const auto ids = torch::randint(0, 10, {2, 3}, torch::kLong);
  const auto grad = torch::randn({2, 3, 6}, torch::TensorOptions().device(kMeta));
  const auto mask = torch::empty({0}, torch::kBool);
  // Below autograd, as the forward's backward calls it: the Meta kernel runs (and must raise).
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  EXPECT_POSENC_ERROR(backward.call(grad, mask, ids, weight, table, 0, true, c10::nullopt, 1.0, -1,
                                    0.0, {true, true}),
                      "grad is on meta and the input on cpu");
}

// --- aliasing --------------------------------------------------------------------------------

TEST_F(CallSafety, InPlaceTargetThatIsTheTableIsRejected) {
  const auto table = F::sinusoidal_table(8, 4);
  auto x = table.view({1, 8, 4});
  const auto before = table.clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_(x, table),
                      "x shares memory with the table");
  EXPECT_TRUE(torch::equal(table, before));
}

TEST_F(CallSafety, InPlaceTargetOverlappingPartOfTheTableIsRejected) {
  const auto table = F::sinusoidal_table(8, 4);
  auto x = table.narrow(0, 2, 4).unsqueeze(0); // rows 2..5, written while rows 1..4 are read
  const auto before = table.clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_(x, table, 1),
                      "x shares memory with the table");
  EXPECT_TRUE(torch::equal(table, before));
}

TEST_F(CallSafety, OutSharingTheTableIsRejected) {
  const auto table = F::sinusoidal_table(8, 4);
  const auto x = torch::randn({1, 8, 4});
  auto out = table.view({1, 8, 4});
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_out(out, x, table),
                      "out shares memory with the table");
}

TEST_F(CallSafety, OutSharingThePositionsIsRejected) {
  const auto table = F::sinusoidal_table(8, 2);
  const auto x = torch::randn({1, 2, 2});
  const auto positions = torch::tensor({3, 5}, torch::kLong);
  auto out = positions.view(torch::kFloat).view({1, 2, 2}); // the positions' 16 bytes as floats
  const auto before = positions.clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_out(out, x, table, 0, true, positions),
                      "out shares memory with positions");
  EXPECT_TRUE(torch::equal(positions, before));
}

TEST_F(CallSafety, RotaryInPlaceTargetSharingCosIsRejected) {
  const auto caches = F::rotary_tables(8, 4);
  const auto cos = std::get<0>(caches);
  auto q = cos.view(-1).narrow(0, 0, 8).view({1, 2, 1, 4});
  const auto before = cos.clone();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_(q, cos, std::get<1>(caches)),
                      "x shares memory with cos");
  EXPECT_TRUE(torch::equal(cos, before));
}

// --- overlaps ATen cannot decide (strided views of one buffer) ---------------------------------

// detail::layouts_share against brute force: every byte of both layouts listed, for random small
// strided layouts of one buffer (strides that interleave, repeat or nest; item sizes 1, 2, 4, 8).
TEST_F(CallSafety, ExactOverlapOfStridedLayoutsMatchesBruteForce) {
  using posenc::detail::ByteLayout;
  using posenc::detail::Sharing;
  std::mt19937_64 random(7);
  const auto draw = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(random);
  };
  const auto bytes = [](const ByteLayout& layout) {
    std::set<int64_t> all;
    std::vector<int64_t> index(layout.sizes.size(), 0);
    while (true) {
      int64_t start = layout.offset;
      for (size_t d = 0; d < index.size(); ++d) {
        start += index[d] * layout.strides[d];
      }
      for (int64_t b = 0; b < layout.item_size; ++b) {
        all.insert(start + b);
      }
      size_t d = 0;
      while (d < index.size() && ++index[d] == layout.sizes[d]) {
        index[d++] = 0;
      }
      if (d == index.size()) {
        return all;
      }
    }
  };
  int shared = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    ByteLayout layouts[2];
    for (ByteLayout& layout : layouts) {
      layout.item_size = int64_t{1} << draw(0, 3);
      layout.offset = draw(0, 40);
      const int64_t dims = draw(1, 3);
      for (int64_t d = 0; d < dims; ++d) {
        layout.sizes.push_back(draw(1, 4));
        layout.strides.push_back(draw(0, 24));
      }
    }
    const std::set<int64_t> a = bytes(layouts[0]);
    const std::set<int64_t> b = bytes(layouts[1]);
    const bool brute = std::any_of(a.begin(), a.end(), [&](int64_t x) { return b.count(x) > 0; });
    const Sharing exact = posenc::detail::layouts_share(layouts[0], layouts[1]);
    ASSERT_NE(exact, Sharing::kUnknown) << trial;
    EXPECT_EQ(exact == Sharing::kSome, brute) << trial;
    shared += brute ? 1 : 0;
  }
  EXPECT_GT(shared, 300); // both answers were exercised
  EXPECT_LT(shared, 2700);
}

// In place q+k on views of one fused qkv projection: q and k interleave in memory (ATen: "too
// hard") but share no element, so they are rotated where they lie; views that do share elements
// (overlapping head ranges, a transposed alias, every other head of the same heads) are refused
// before anything is written, where they used to be rotated twice.
TEST_F(CallSafety, InPlaceQkOnViewsOfOneBufferIsExact) {
  const auto caches = F::rotary_tables(16, 8);
  const torch::Tensor& cos = std::get<0>(caches);
  const torch::Tensor& sin = std::get<1>(caches);
  torch::Tensor qkv = torch::randn({2, 5, 4 + 2 + 2, 8});
  const torch::Tensor before = qkv.clone();
  torch::Tensor q = qkv.narrow(2, 0, 4);
  torch::Tensor k = qkv.narrow(2, 4, 2);
  posenc::ops::apply_rotary_qk_(q, k, cos, sin, 3);
  const auto expected = posenc::ops::apply_rotary_qk(before.narrow(2, 0, 4), before.narrow(2, 4, 2),
                                                     cos, sin, 3);
  EXPECT_TRUE(torch::equal(q, std::get<0>(expected)));
  EXPECT_TRUE(torch::equal(k, std::get<1>(expected)));
  EXPECT_TRUE(torch::equal(qkv.narrow(2, 6, 2), before.narrow(2, 6, 2))); // v untouched

  torch::Tensor buffer = torch::randn({2, 5, 8, 8});
  const torch::Tensor kept = buffer.clone();
  const auto refused = [&](torch::Tensor q_view, torch::Tensor k_view, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_qk_(q_view, k_view, cos, sin, 0),
                        "q shares memory with k");
    EXPECT_TRUE(torch::equal(buffer, kept)) << what;
  };
  refused(buffer.narrow(2, 0, 4), buffer.narrow(2, 3, 2), "overlapping head ranges");
  refused(buffer.narrow(2, 0, 4), buffer.narrow(2, 0, 4).transpose(0, 1).transpose(0, 1).narrow(2, 1, 2),
          "a sub-range of q's heads");
  refused(buffer.slice(2, 0, 8, 2), buffer.slice(2, 2, 8, 4), "every other head against every fourth");
  // every other head against the heads between them: interleaved, never the same element
  torch::Tensor even = buffer.slice(2, 0, 8, 2);
  torch::Tensor odd = buffer.slice(2, 1, 8, 2);
  posenc::ops::apply_rotary_qk_(even, odd, cos, sin, 0);
  const auto both = posenc::ops::apply_rotary_qk(kept.slice(2, 0, 8, 2), kept.slice(2, 1, 8, 2),
                                                 cos, sin, 0);
  EXPECT_TRUE(torch::equal(even, std::get<0>(both)));
  EXPECT_TRUE(torch::equal(odd, std::get<1>(both)));
}

// The sizes of today's models: q and k of a fused qkv projection [B, L, Hq + 2 Hk, D] with B * L
// past 2^17 (64 x 2048), and GPT-NeoX's [B, L, H, 3 D] layout, are decided at once (the search
// merges the dimensions both views share: one index each), without allocating them.
TEST_F(CallSafety, ExactOverlapDecidesModelSizedViewsAtOnce) {
  using posenc::detail::ByteLayout;
  using posenc::detail::Sharing;
  const int64_t batch = 64, length = 2048, heads = 32, groups = 8, dim = 128, bytes = 2;
  const int64_t row = (heads + 2 * groups) * dim * bytes; // one token of the fused tensor
  const ByteLayout q{0, bytes, {batch, length, heads, dim}, {length * row, row, dim * bytes, bytes}};
  const ByteLayout k{heads * dim * bytes, bytes, {batch, length, groups, dim},
                     {length * row, row, dim * bytes, bytes}};
  EXPECT_EQ(posenc::detail::layouts_share(q, k, /*budget=*/64), Sharing::kNone);
  const ByteLayout k_overlapping{(heads - 1) * dim * bytes, bytes, {batch, length, groups, dim},
                                 {length * row, row, dim * bytes, bytes}};
  EXPECT_EQ(posenc::detail::layouts_share(q, k_overlapping, 64), Sharing::kSome);
  // GPT-NeoX: [B, L, H, 3 * D], q = [..., :D], k = [..., D:2D]
  const int64_t neox_head = 3 * dim * bytes;
  const ByteLayout neox_q{0, bytes, {batch, length, heads, dim},
                          {length * heads * neox_head, heads * neox_head, neox_head, bytes}};
  ByteLayout neox_k = neox_q;
  neox_k.offset = dim * bytes;
  EXPECT_EQ(posenc::detail::layouts_share(neox_q, neox_k, 64), Sharing::kNone);
  // and through the operator, on real (small-headed) tensors of 2^17 tokens
  torch::Tensor qkv = torch::randn({64, 2048, 3, 2});
  torch::Tensor q_view = qkv.narrow(2, 0, 1);
  torch::Tensor k_view = qkv.narrow(2, 1, 1);
  const auto caches = F::rotary_tables(2048, 2);
  posenc::ops::apply_rotary_qk_(q_view, k_view, std::get<0>(caches), std::get<1>(caches));
}

// The other in-place and out= targets: a strided view of the caches that the rotation reads is
// refused (ATen: "too hard"); one of a different buffer is not.
TEST_F(CallSafety, StridedInPlaceTargetsSharingAnInputAreRefused) {
  torch::Tensor storage = torch::randn({64, 8});
  const torch::Tensor cos = storage.narrow(0, 0, 16).slice(1, 0, 8, 2); // [16, 4], strided
  const torch::Tensor sin = storage.narrow(0, 16, 16).slice(1, 0, 8, 2);
  const torch::Tensor before = storage.clone();
  torch::Tensor x = storage.narrow(0, 0, 8).view({1, 2, 4, 8});
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_(x, cos, sin), "x shares memory with cos");
  EXPECT_TRUE(torch::equal(storage, before));
  torch::Tensor disjoint = storage.narrow(0, 48, 16).view({1, 4, 4, 8});
  posenc::ops::apply_rotary_(disjoint, cos, sin); // shares the buffer, not an element
  EXPECT_TRUE(torch::equal(storage.narrow(0, 0, 48), before.narrow(0, 0, 48)));
  EXPECT_FALSE(torch::equal(storage.narrow(0, 48, 16), before.narrow(0, 48, 16)));
}

TEST_F(CallSafety, OutThatIsTheInputIsAllowed) {
  const auto table = F::sinusoidal_table(8, 4);
  auto x = torch::randn({2, 8, 4});
  const auto expected = x + table;
  posenc::ops::add_position_table_out(x, x, table);
  EXPECT_TRUE(torch::allclose(x, expected));
}

// --- autograd's in-place rules, checked before writing -----------------------------------------

TEST_F(CallSafety, InPlaceOnALeafThatRequiresGradRaisesBeforeWriting) {
  auto x = torch::randn({2, 3, 4}).requires_grad_(true);
  const auto before = x.detach().clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_(x, F::sinusoidal_table(8, 4)),
                      "a leaf Variable that requires grad is being used in an in-place operation");
  EXPECT_TRUE(torch::equal(x.detach(), before));
}

TEST_F(CallSafety, InPlaceOnAViewOfSuchALeafRaisesBeforeWriting) {
  auto leaf = torch::randn({2, 3, 4}).requires_grad_(true);
  auto x = leaf.view({2, 3, 4});
  const auto before = leaf.detach().clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_(x, F::sinusoidal_table(8, 4)),
                      "a view of a leaf Variable that requires grad");
  EXPECT_TRUE(torch::equal(leaf.detach(), before));
}

TEST_F(CallSafety, RotaryInPlaceOnALeafThatRequiresGradRaisesBeforeWriting) {
  const auto caches = F::rotary_tables(8, 4);
  auto q = torch::randn({1, 3, 2, 4}).requires_grad_(true);
  const auto before = q.detach().clone();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_(q, std::get<0>(caches), std::get<1>(caches)),
                      "a leaf Variable that requires grad is being used in an in-place operation");
  EXPECT_TRUE(torch::equal(q.detach(), before));
}

TEST_F(CallSafety, InPlaceOnOneOfSeveralViewsRaisesBeforeWriting) {
  const auto leaf = torch::randn({2, 2, 3, 4}).requires_grad_(true);
  const auto base = leaf * 2;
  auto x = base.unbind(0)[0]; // a view autograd cannot rebase in place
  const auto before = base.detach().clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_(x, F::sinusoidal_table(8, 4)),
                      "is a view and is being modified inplace");
  EXPECT_TRUE(torch::equal(base.detach(), before));
}

TEST_F(CallSafety, InPlaceOnAnInferenceTensorOutsideInferenceModeRaisesBeforeWriting) {
  torch::Tensor x;
  {
    c10::InferenceMode guard;
    x = torch::randn({2, 3, 4});
  }
  const auto before = x.clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_(x, F::sinusoidal_table(8, 4)),
                      "Inplace update to inference tensor outside InferenceMode");
  EXPECT_TRUE(torch::equal(x, before));
}

TEST_F(CallSafety, InPlaceIntoAPlainTensorWithATableThatRequiresGradJoinsTheGraph) {
  const auto table = F::sinusoidal_table(8, 4).requires_grad_(true);
  auto x = torch::zeros({2, 3, 4});
  posenc::ops::add_position_table_(x, table);
  ASSERT_TRUE(x.requires_grad());
  x.sum().backward();
  // Rows 0..2 were added once per sequence of the batch.
  const auto expected = torch::cat({torch::full({3, 4}, 2.0), torch::zeros({5, 4})});
  EXPECT_TRUE(torch::equal(table.grad(), expected));
}

TEST_F(CallSafety, RotaryInPlaceWithCachesThatRequireGradIsRejected) {
  const auto caches = F::rotary_tables(8, 4);
  const auto cos = std::get<0>(caches).clone().requires_grad_(true);
  auto q = torch::randn({1, 3, 2, 4});
  const auto before = q.clone();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_(q, cos, std::get<1>(caches)),
                      "posenc::apply_rotary_: ");
  EXPECT_TRUE(torch::equal(q, before));
}

// --- out= resizing -----------------------------------------------------------------------------

TEST_F(CallSafety, EmptyOutIsResizedToTheResult) {
  const auto table = F::sinusoidal_table(8, 4);
  const auto x = torch::randn({2, 3, 4});
  auto out = torch::empty({0});
  posenc::ops::add_position_table_out(out, x, table);
  EXPECT_EQ(out.sizes(), x.sizes());
  EXPECT_TRUE(torch::allclose(out, x + table.narrow(0, 0, 3)));
}

TEST_F(CallSafety, EmptyOutIsResizedForAnEmptyInput) {
  auto out = torch::empty({0});
  posenc::ops::add_position_table_out(out, torch::randn({2, 0, 4}), F::sinusoidal_table(8, 4));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 0, 4}));
}

// (with PyTorch's deprecation warning, which test_call_safety.py checks: the C++ warning-handler
// API differs between LibTorch 1.13 and 2.x)
TEST_F(CallSafety, OutOfAnotherShapeIsResized) {
  auto out = torch::empty({5});
  const auto x = torch::randn({2, 3, 4});
  posenc::ops::add_position_table_out(out, x, F::sinusoidal_table(8, 4));
  EXPECT_EQ(out.sizes(), x.sizes());
  EXPECT_TRUE(torch::allclose(out, x + F::sinusoidal_table(3, 4)));
}

TEST_F(CallSafety, MetaOutIsResizedToo) {
  auto out = torch::empty({0}, torch::TensorOptions().device(kMeta));
  posenc::ops::add_position_table_out(out, torch::empty({2, 3, 4}, torch::TensorOptions().device(kMeta)),
                                      F::sinusoidal_table(8, 4).to(kMeta));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 4}));
}

// --- offsets at the end of int64 ----------------------------------------------------------------

TEST_F(CallSafety, TokenPositionsFromPaddingRejectAnOffsetThatOverflows) {
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(30, 8, 16).padding_idx(0).beyond_max_len(
          BeyondMaxLen::kExtrapolate));
  const auto ids = torch::tensor({{0, 3, 4, 5}}, torch::kLong);
  EXPECT_POSENC_ERROR(embed(ids, std::numeric_limits<int64_t>::max() - 2),
                      "TokenAndPositionEmbedding: offset + L must fit in int64, but got offset = "
                      "9223372036854775805 and L = 4");
}

TEST_F(CallSafety, ModulesRejectAnOffsetThatOverflows) {
  const int64_t offset = std::numeric_limits<int64_t>::max() - 4; // offset + 5 wraps around
  posenc::PositionalEncoding pe(
      posenc::PositionalEncodingOptions(8, 16).beyond_max_len(BeyondMaxLen::kExtrapolate));
  EXPECT_POSENC_ERROR(pe(torch::zeros({1, 5, 8}), offset),
                      "PositionalEncoding: offset + L must fit in int64");
  posenc::RotaryEmbedding rope(
      posenc::RotaryEmbeddingOptions(8, 16).beyond_max_len(BeyondMaxLen::kExtrapolate));
  EXPECT_POSENC_ERROR(rope(torch::zeros({1, 5, 2, 8}), offset),
                      "RotaryEmbedding: offset + L must fit in int64");
}

// --- extreme options ---------------------------------------------------------------------------

TEST_F(CallSafety, BasesBelowTheRangeOfFiniteAnglesAreRejected) {
  for (const double base : {4.9e-324, 1e-300}) {
    EXPECT_POSENC_ERROR(posenc::PositionalEncoding(posenc::PositionalEncodingOptions(8, 16).base(base)),
                        "base must be finite and >= 5.2e-290");
    EXPECT_POSENC_ERROR(posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(8, 16).base(base)),
                        "base must be finite and >= 5.2e-290");
  }
}

TEST_F(CallSafety, TheSmallestAcceptedBaseGivesNumbersAndSinZeroCosZeroAtPositionZero) {
  posenc::PositionalEncoding pe(posenc::PositionalEncodingOptions(8, 16)
                                    .base(5.2e-290)
                                    .beyond_max_len(BeyondMaxLen::kExtrapolate));
  EXPECT_TRUE(pe->pe.isfinite().all().item<bool>());
  const auto row0 = pe->pe[0][0];
  EXPECT_TRUE(torch::equal(row0, torch::tensor({0.f, 1.f, 0.f, 1.f, 0.f, 1.f, 0.f, 1.f})));
  // Far past the table, at the largest offset that fits: still numbers.
  const auto y = pe(torch::zeros({1, 2, 8}), std::numeric_limits<int64_t>::max() - 2);
  EXPECT_TRUE(y.isfinite().all().item<bool>());
  posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(8, 16).base(5.2e-290));
  EXPECT_TRUE(rope->cos.isfinite().all().item<bool>());
  EXPECT_TRUE(torch::equal(rope->cos[0], torch::ones({4})));
}

TEST_F(CallSafety, ScalesBeyondFloat32AreRejectedForFloat32Inputs) {
  const auto table = F::sinusoidal_table(8, 4);
  EXPECT_POSENC_ERROR(
      posenc::ops::add_position_table(torch::zeros({1, 3, 4}), table, 0, true, c10::nullopt, 1e300),
      "scale must lie in [-3.4028e38, 3.4028e38] for Float inputs");
  // float64 inputs are computed in float64: 0 * 1e300 + pe is pe.
  const auto y = posenc::ops::add_position_table(torch::zeros({1, 3, 4}, torch::kDouble),
                                                 table.to(torch::kDouble), 0, true, c10::nullopt,
                                                 1e300);
  EXPECT_TRUE(torch::equal(y[0], table.to(torch::kDouble).narrow(0, 0, 3)));
  posenc::PositionalEncoding pe(posenc::PositionalEncodingOptions(4, 8).scale(1e300));
  EXPECT_POSENC_ERROR(pe(torch::zeros({1, 3, 4})), "PositionalEncoding: scale must lie in");
}

TEST_F(CallSafety, TokenScalesBeyondFloat32AreRejectedForFloat32Weights) {
  EXPECT_POSENC_ERROR(
      posenc::ops::token_and_position_embedding(torch::zeros({1, 2}, torch::kLong),
                                                torch::zeros({3, 4}), F::sinusoidal_table(8, 4), 0,
                                                true, c10::nullopt, -1e39),
      "scale must lie in [-3.4028e38, 3.4028e38] for Float inputs");
}

TEST_F(CallSafety, AttentionFactorsTheCachesCannotHoldAreRejected) {
  const auto caches = F::rotary_tables(8, 4);
  const auto q = torch::randn({1, 9, 1, 4}); // positions past the caches: rows from inv_freq
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary(q, std::get<0>(caches), std::get<1>(caches), 0,
                                                c10::nullopt, false, false, false,
                                                F::rotary_inv_freq(4), 1e300),
                      "attention_factor must be > 0 and at most 3.40282e+38");
}

TEST_F(CallSafety, FrequenciesThatOverflowAnglesAreRejected) {
  auto columns = F::sinusoidal_columns(4);
  columns[0][0] = 1e300;
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(torch::zeros({1, 9, 4}),
                                                      F::sinusoidal_table(8, 4), 0, true,
                                                      c10::nullopt, 1.0, columns),
                      "columns must hold frequencies in [-1.9e289, 1.9e289]");
  auto inv_freq = F::rotary_inv_freq(4);
  inv_freq[1] = 1e300;
  const auto caches = F::rotary_tables(8, 4);
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary(torch::zeros({1, 9, 1, 4}), std::get<0>(caches),
                                                std::get<1>(caches), 0, c10::nullopt, false,
                                                false, false, inv_freq, 1.0),
                      "inv_freq must hold frequencies in [-1.9e289, 1.9e289]");
}

} // namespace
