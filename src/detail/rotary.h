#pragma once

// Rotary position embedding (RoPE): the cos/sin caches and the rotation.

#include "detail/positional_encoding.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace posenc {
namespace detail {

/// Checks the arguments that define rotary caches.
void check_rotary_arguments(const char* who, int64_t max_len, int64_t rotary_dim, double base);

/// cos and sin of `position * base^(-2i / rotary_dim)`, i < rotary_dim / 2, for the int64
/// `positions` (flattened; -1 gives cos 1, sin 0: no rotation): two `[N, rotary_dim / 2]` tensors
/// in `dtype` on the device of `positions`, computed in double precision and rounded once.
std::pair<at::Tensor, at::Tensor> rotary_rows(const at::Tensor& positions,
                                              int64_t rotary_dim,
                                              double base,
                                              c10::ScalarType dtype);

/// Checks an input of apply_rotary: 4-D, floating, on `device`, at least `rotary_dim` channels.
void check_rotary_input(const char* who,
                        const at::Tensor& x,
                        int64_t rotary_dim,
                        bool heads_first,
                        const c10::Device& device);

/// Rotates the first `2 * cos.size(-1)` channels of `x` by the angles of the broadcastable
/// `cos`/`sin` (`[.., R/2]`), pairs (i, i + R/2) or, `interleaved`, (2i, 2i + 1); `inverse` uses
/// -angle. Computed in at least float32, returned in the dtype of `x`.
at::Tensor rotate(const at::Tensor& x,
                  const at::Tensor& cos,
                  const at::Tensor& sin,
                  bool interleaved,
                  bool inverse);

/// Rows `[batch * length, R/2]` (batch 1: shared by the whole batch) shaped to broadcast against
/// `x` (`[B, L, H, R/2]`, or `[B, H, L, R/2]` with `heads_first`).
at::Tensor rotary_broadcast(const at::Tensor& rows,
                            int64_t batch,
                            int64_t length,
                            bool heads_first);

/// The whole rotary forward of a module: checks (prefixed by `who`), then the posenc::apply_rotary
/// operator, or, for positions past the caches with `extrapolate`, the rotation with cos/sin
/// computed on the fly.
at::Tensor rotary_forward(const char* who,
                          const at::Tensor& x,
                          const at::Tensor& cos,
                          const at::Tensor& sin,
                          int64_t offset,
                          const at::Tensor& positions,
                          bool interleaved,
                          bool heads_first,
                          double base,
                          bool extrapolate);

} // namespace detail
} // namespace posenc
