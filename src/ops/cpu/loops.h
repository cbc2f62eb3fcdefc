#pragma once

// Row mappings and accumulation types shared by the CPU (and, where marked, CUDA) kernels.

#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

namespace posenc {
namespace ops {

/// The type a kernel computes in: float for float16/bfloat16/float32 operands, double as soon as
/// either operand is double (the same promotion ATen applies).
template <typename A, typename B>
using acc_type_t = std::conditional_t<std::is_same<A, double>::value || std::is_same<B, double>::value, double, float>;

/// The position of row `i` of a `[B, L, D]` (batch_first) or `[L, B, D]` input viewed as B*L rows
/// of D: offset + l, positions[l] (shared) or positions[i] (one per sequence element).
struct SequenceRows {
  int64_t batch;
  int64_t length;
  bool batch_first;
  int64_t offset;
  const int64_t* positions;  // null: offset form
  bool per_sequence;          // positions shaped like the input's first two dimensions

  C10_HOST_DEVICE int64_t position(int64_t i) const {
    if (per_sequence) {
      return positions[i];
    }
    const int64_t l = batch_first ? i % length : i / batch;
    return positions != nullptr ? positions[l] : offset + l;
  }
};

/// The position of row `i` of a rotary input `[B, L, H, Dh]` (or `[B, H, L, Dh]` with
/// heads_first) viewed as B*L*H rows of Dh; positions are `[L]` or `[B, L]`.
struct RotaryRows {
  int64_t length;
  int64_t heads;
  bool heads_first;
  int64_t offset;
  const int64_t* positions;
  bool per_sequence;

  C10_HOST_DEVICE int64_t position(int64_t i) const {
    int64_t b;
    int64_t l;
    if (heads_first) {
      l = i % length;
      b = i / (length * heads);
    } else {
      l = (i / heads) % length;
      b = i / (heads * length);
    }
    if (positions == nullptr) {
      return offset + l;
    }
    return per_sequence ? positions[b * length + l] : positions[l];
  }
};

} // namespace ops
} // namespace posenc
