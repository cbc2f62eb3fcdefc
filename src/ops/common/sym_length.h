#pragma once

// Lengths that torch.export keeps symbolic. An operator whose output size is an integer argument
// (sinusoidal_table's max_len, alibi_bias's query and key lengths, ...) declares it `SymInt`
// (POSENC_SYMINT in its schema), so that a length taken from an input's size stays a symbol under
// torch.export, torch.compile, AOTInductor and ONNX export instead of being fixed to the example's
// value. Kernels that only ever see concrete values (CPU, CUDA) keep int64_t: the dispatcher
// hands them the value. The kernels that run on fake tensors (Meta, and composite kernels that
// also serve the meta device or decompose under export) take `SymLength` and check a length only
// where it is concrete (a symbolic one is checked when the exported program runs, by the kernel
// that then receives its value). LibTorch 1.13 declares them `int`.

#include "detail/sym_size.h"

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>
#include <torch/version.h>

#include <cstdint>
#include <vector>

#include <ATen/ops/empty.h>

// POSENC_SYM(at::upsample_bicubic2d) names the ATen function (or method) that takes lengths:
// its _symint variant, where there are symbolic ones.
#if TORCH_VERSION_MAJOR >= 2
#define POSENC_SYMINT "SymInt"
#define POSENC_SYMBOLIC_LENGTHS 1
#define POSENC_SYM(function) function##_symint
#else
#define POSENC_SYMINT "int"
#define POSENC_SYMBOLIC_LENGTHS 0
#define POSENC_SYM(function) function
#endif

namespace posenc {
namespace ops {

#if POSENC_SYMBOLIC_LENGTHS
/// A length argument as the fake-tensor kernels take it: concrete or symbolic.
using SymLength = c10::SymInt;
/// A list of lengths (a grid's sizes), each concrete or symbolic.
using SymLengths = c10::SymIntArrayRef;

/// The value of a concrete length; nullopt for a symbolic one.
inline c10::optional<int64_t> concrete(const SymLength& length) {
  const auto value = length.maybe_as_int();
  return value ? c10::optional<int64_t>(*value) : c10::nullopt;
}

/// The value of a length that must be concrete here (a kernel that computes values): a
/// symbolic one is specialized (guarded) to its hint.
inline int64_t value_of(const SymLength& length) {
  return length.guard_int(__FILE__, __LINE__);
}

/// The values of lengths that are all concrete; nullopt where one is symbolic.
inline c10::optional<std::vector<int64_t>> concrete(SymLengths lengths) {
  std::vector<int64_t> values;
  for (const SymLength& length : lengths) {
    const c10::optional<int64_t> value = concrete(length);
    if (!value) {
      return c10::nullopt;
    }
    values.push_back(*value);
  }
  return values;
}

/// Concrete lengths as lengths (a view: no copy).
inline SymLengths as_lengths(c10::IntArrayRef lengths) {
  return c10::fromIntArrayRefSlow(lengths);
}

/// A tensor's sizes as lengths (symbolic under torch.export).
inline std::vector<SymLength> lengths_of(const at::Tensor& tensor) {
  return tensor.sym_sizes().vec();
}

/// An empty tensor whose sizes may be symbolic.
inline at::Tensor empty_with_lengths(c10::ArrayRef<SymLength> sizes,
                                     const at::TensorOptions& options) {
  return at::empty_symint(sizes, options);
}
#else
using SymLength = int64_t;
using SymLengths = c10::IntArrayRef;

inline c10::optional<std::vector<int64_t>> concrete(c10::IntArrayRef lengths) {
  return lengths.vec();
}

inline SymLengths as_lengths(c10::IntArrayRef lengths) {
  return lengths;
}

inline c10::optional<int64_t> concrete(int64_t length) {
  return length;
}

inline int64_t value_of(int64_t length) {
  return length;
}

inline std::vector<int64_t> lengths_of(const at::Tensor& tensor) {
  return tensor.sizes().vec();
}

inline at::Tensor empty_with_lengths(c10::ArrayRef<int64_t> sizes,
                                     const at::TensorOptions& options) {
  return at::empty(sizes, options);
}
#endif

// A tensor's sizes and one of them, symbolic under torch.export and torch.compile (a call compares
// and prints them without fixing them; value_of specializes one where a number is needed).
using detail::shape_of;
using detail::size_of;

/// An optional length's concrete value: nullopt when it is absent or symbolic (`known` tells
/// which).
inline c10::optional<int64_t> concrete(const c10::optional<SymLength>& length, bool* known) {
  if (!length.has_value()) {
    *known = true;
    return c10::nullopt;
  }
  const c10::optional<int64_t> value = concrete(*length);
  *known = value.has_value();
  return value;
}

} // namespace ops
} // namespace posenc
