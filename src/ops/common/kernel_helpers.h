#pragma once

// Device-neutral pieces of the hand-written kernels, included by the CPU and the CUDA ones: the
// compute types, exact loads and stores of 16-bit types, and the mapping from an input row to its
// position.

#include "detail/row_loop.h"

#include "ops/common/arguments.h"

#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace posenc {
namespace ops {

/// Calls `f(data)` with `data` the `const float*` or `const double*` of a kernel table (see
/// TableCall::kernel_table), so that one loop body serves both table dtypes.
template <typename F>
void with_table_data(const at::Tensor& table, F&& f) {
  if (table.scalar_type() == at::kFloat) {
    f(table.data_ptr<float>());
  } else {
    f(table.data_ptr<double>());
  }
}

/// The type a kernel computes in: float for float16/bfloat16/float32 operands, double as soon as
/// either operand is double (the same promotion ATen applies).
template <typename A, typename B>
using acc_type_t =
    std::conditional_t<std::is_same<A, double>::value || std::is_same<B, double>::value, double,
                       float>;

/// Loads a value into the compute type. bfloat16 is widened with integer operations (a 16-bit
/// shift), which compilers vectorize; c10::BFloat16's own conversion is the same value.
template <typename acc_t, typename T>
C10_HOST_DEVICE C10_ALWAYS_INLINE acc_t load(T value) {
  return static_cast<acc_t>(value);
}
template <typename acc_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE acc_t load(c10::BFloat16 value) {
  const uint32_t bits = static_cast<uint32_t>(value.x) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return static_cast<acc_t>(result);
}

/// Rounds a computed value to the stored type, once. For bfloat16: round to nearest, ties to
/// even, NaN kept as the canonical quiet NaN, exactly as c10::BFloat16(float), written without
/// branches so that compilers vectorize it.
template <typename T, typename acc_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE T store(acc_t value) {
  return static_cast<T>(value);
}
template <>
C10_HOST_DEVICE C10_ALWAYS_INLINE c10::BFloat16 store<c10::BFloat16, float>(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint16_t result = value != value ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
  return c10::BFloat16(result, c10::BFloat16::from_bits());
}

/// A value that a kernel reads from device memory and the host did not check (positions and
/// token ids on a GPU are checked where the kernel reads them, so that no call waits for the
/// device): on a GPU, the thread prints `message` and the value and stops with a device-side
/// assertion (the next synchronisation raises "device-side assert triggered", as PyTorch's own
/// index kernels do); in host code (the CPU kernels' callers check every value before, so only
/// the emulated grid of the tests gets here), a c10::Error with the same text.
[[noreturn]] inline void kernel_check_failed(const char* message, int64_t value) {
  TORCH_CHECK(false, message, " (got ", value, ")");
}
#if defined(__CUDA_ARCH__)
#define POSENC_KERNEL_FAIL(message, value)                                           \
  do {                                                                               \
    printf("%s (got %lld)\n", message, static_cast<long long>(value));               \
    __assert_fail(message, __FILE__, static_cast<unsigned int>(__LINE__), __func__); \
  } while (0)
#else
#define POSENC_KERNEL_FAIL(message, value) ::posenc::ops::kernel_check_failed(message, value)
#endif

/// Messages of the checks in the kernel bodies.
#define POSENC_POSITION_MESSAGE                                                              \
  "posenc: a position lies outside the table (positions must be >= -1, -1 marking padding, " \
  "and < the table's rows: build the module with a larger max_len or pass the definition)"
#define POSENC_TOKEN_MESSAGE \
  "posenc::token_and_position_embedding: token ids must lie in [0, vocab_size)"

/// Position `p` of a row, checked against a table of `rows` rows: -1 (padding) or a row.
C10_HOST_DEVICE C10_ALWAYS_INLINE int64_t checked_position(int64_t p, int64_t rows) {
  if (C10_UNLIKELY(p < -1 || p >= rows)) {
    POSENC_KERNEL_FAIL(POSENC_POSITION_MESSAGE, p);
  }
  return p;
}

/// The largest element offset of `t`'s view + 1 (0 when it is empty): how far from its data
/// pointer a kernel indexes it (host code).
inline int64_t element_extent(const at::Tensor& t) {
  if (t.numel() == 0) {
    return 0;
  }
  int64_t extent = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    extent += (t.size(d) - 1) * t.stride(d);
  }
  return extent;
}

/// N values of T moved together: one 16-byte access when sizeof(T) * N is 16, several when wider
/// (the pointer aligned to sizeof(T) * N), one value when N = 1.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T value[N];
};

/// The position of row `i` of a `[B, L, D]` (batch_first) or `[L, B, D]` input viewed as B*L rows
/// of D: offset + l, positions[l] (shared) or positions[i] (one per sequence element).
struct SequenceRows {
  int64_t batch;
  int64_t length;
  bool batch_first;
  int64_t offset;
  const int64_t* positions; // null: offset form
  bool per_sequence;        // positions shaped like the input's first two dimensions

  /// The rows of a checked table call (host code).
  static SequenceRows of(const TableCall& call) {
    return {call.batch,  call.length,          call.batch_first,
            call.offset, call.position_data(), call.per_sequence()};
  }

  /// index_t: the index type of the caller's arithmetic (a grid's may be 32-bit).
  template <typename index_t>
  C10_HOST_DEVICE int64_t position(index_t i) const {
    if (per_sequence) {
      return positions[i];
    }
    const index_t l =
        batch_first ? i % static_cast<index_t>(length) : i / static_cast<index_t>(batch);
    return positions != nullptr ? positions[l] : offset + l;
  }
};

} // namespace ops
} // namespace posenc
