#include "detail/memory_overlap.h"

#include <ATen/MemoryOverlap.h>

#include <algorithm>

namespace posenc {
namespace detail {
namespace {

// One index of the equation sum(coefficient * x) in [low, high]: x in [min, max], coefficient > 0.
struct Term {
  int64_t coefficient;
  int64_t min;
  int64_t max;
};

// floor and ceil of n / d for d > 0
int64_t floor_div(int64_t n, int64_t d) {
  return n >= 0 ? n / d : -((-n + d - 1) / d);
}
int64_t ceil_div(int64_t n, int64_t d) {
  return -floor_div(-n, d);
}

struct Search {
  const std::vector<Term>& terms;
  std::vector<int64_t> rest_low;  // the least sum the terms from k on can make
  std::vector<int64_t> rest_high; // the largest
  int64_t steps_left;

  // Whether terms k.. can make a sum in [low, high]; false with steps_left < 0 when out of budget.
  bool solvable(size_t k, int64_t low, int64_t high) {
    if (--steps_left < 0) {
      return false;
    }
    if (high < rest_low[k] || low > rest_high[k]) {
      return false;
    }
    if (k == terms.size()) {
      return low <= 0 && 0 <= high;
    }
    const Term& term = terms[k];
    // coefficient * x must leave a sum the later terms can make: within [low - rest_high[k + 1],
    // high - rest_low[k + 1]]
    const int64_t first =
        std::max(term.min, ceil_div(low - rest_high[k + 1], term.coefficient));
    const int64_t last =
        std::min(term.max, floor_div(high - rest_low[k + 1], term.coefficient));
    for (int64_t x = first; x <= last; ++x) {
      const int64_t used = term.coefficient * x;
      if (solvable(k + 1, low - used, high - used)) {
        return true;
      }
      if (steps_left < 0) {
        return false;
      }
    }
    return false;
  }
};

void add_terms(std::vector<Term>& terms, const ByteLayout& layout, bool negated) {
  for (size_t d = 0; d < layout.sizes.size(); ++d) {
    if (layout.sizes[d] <= 1 || layout.strides[d] == 0) {
      continue; // one index, or all indices at the same place
    }
    const int64_t span = layout.sizes[d] - 1;
    terms.push_back({layout.strides[d], negated ? -span : 0, negated ? 0 : span});
  }
}

} // namespace

Sharing layouts_share(const ByteLayout& a, const ByteLayout& b, int64_t budget) {
  // Byte ranges [A, A + a.item_size) and [B, B + b.item_size) meet iff
  // A - B in [-(a.item_size - 1), b.item_size - 1], with A - B = a.offset - b.offset +
  // sum(a.strides * i) - sum(b.strides * j).
  std::vector<Term> all;
  add_terms(all, a, /*negated=*/false);
  add_terms(all, b, /*negated=*/true);
  std::sort(all.begin(), all.end(),
            [](const Term& x, const Term& y) { return x.coefficient > y.coefficient; });
  // Terms of one coefficient are one term: c * x1 + c * x2 takes every c * x with x in
  // [min1 + min2, max1 + max2]. (Views of one buffer with the same strides, q and k of a fused qkv
  // tensor, then search one index per dimension, not every index of one view's outer dimensions.)
  std::vector<Term> terms;
  for (const Term& term : all) {
    if (!terms.empty() && terms.back().coefficient == term.coefficient) {
      terms.back().min += term.min;
      terms.back().max += term.max;
    } else {
      terms.push_back(term);
    }
  }
  Search search{terms, std::vector<int64_t>(terms.size() + 1, 0),
                std::vector<int64_t>(terms.size() + 1, 0), budget};
  for (size_t k = terms.size(); k-- > 0;) {
    search.rest_low[k] = search.rest_low[k + 1] + terms[k].coefficient * terms[k].min;
    search.rest_high[k] = search.rest_high[k + 1] + terms[k].coefficient * terms[k].max;
  }
  const int64_t shift = a.offset - b.offset;
  const bool found =
      search.solvable(0, -(a.item_size - 1) - shift, (b.item_size - 1) - shift);
  if (found) {
    return Sharing::kSome;
  }
  return search.steps_left < 0 ? Sharing::kUnknown : Sharing::kNone;
}

Sharing tensors_share(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) {
    return Sharing::kNone;
  }
  switch (at::get_overlap_status(a, b)) {
    case at::MemOverlapStatus::No:
      return Sharing::kNone;
    case at::MemOverlapStatus::Full:
    case at::MemOverlapStatus::Partial:
      return Sharing::kSome;
    case at::MemOverlapStatus::TooHard:
      break;
  }
  // (TooHard: on one storage, at least one of them not dense; or a layout ATen does not inspect)
  if (!a.has_storage() || !b.has_storage() || !a.storage().is_alias_of(b.storage())) {
    return Sharing::kNone;
  }
  // (item_size 0 marks a layout that cannot be described in int64 bytes: undecided)
  const auto layout = [](const at::Tensor& t) {
    ByteLayout result;
    result.item_size = static_cast<int64_t>(t.element_size());
    if (__builtin_mul_overflow(t.storage_offset(), result.item_size, &result.offset)) {
      return ByteLayout{0, 0, {}, {}};
    }
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.size(d) <= 1) {
        continue; // one index: its stride never counts
      }
      int64_t stride = 0;
      if (t.stride(d) < 0 || __builtin_mul_overflow(t.stride(d), result.item_size, &stride)) {
        return ByteLayout{0, 0, {}, {}}; // (PyTorch has no negative strides)
      }
      result.sizes.push_back(t.size(d));
      result.strides.push_back(stride);
    }
    return result;
  };
  const ByteLayout la = layout(a);
  const ByteLayout lb = layout(b);
  if (la.item_size == 0 || lb.item_size == 0) {
    return Sharing::kUnknown;
  }
  return layouts_share(la, lb);
}

} // namespace detail
} // namespace posenc
