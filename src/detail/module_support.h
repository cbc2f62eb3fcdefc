#pragma once

// Pieces shared by the modules' implementations.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>

#include <string>
#include <vector>

namespace posenc {
namespace detail {

/// The dtype a derived table (sinusoidal `pe`, rotary `cos`/`sin`) takes when the module is cast
/// to `requested`: float64 stays float64, everything else float32, so a table is never stored in
/// 16 bits. Checks that `requested` is one of the four float dtypes.
c10::ScalarType derived_table_dtype(const char* who,
                                    c10::optional<c10::ScalarType> requested,
                                    c10::ScalarType current);

/// Registers `value` as the buffer `name` of `module`, or, when the buffer exists (a second
/// reset()), replaces its data so that the member and named_buffers() stay one tensor.
void set_buffer(torch::nn::Module& module,
                const std::string& name,
                at::Tensor& member,
                at::Tensor value);

/// Reads the tensor `name` from `archive` and checks it against `expected` sizes, a floating
/// dtype and finite values, so that a bad checkpoint raises before anything is changed.
at::Tensor read_checked(const char* who,
                        torch::serialize::InputArchive& archive,
                        const std::string& name,
                        const std::vector<int64_t>& expected,
                        bool is_buffer);

/// Appends ", name=value" to a pretty_print when a double option differs from its default.
std::string non_default(const char* name, double value, double fallback);

} // namespace detail
} // namespace posenc
