#pragma once

// The all-or-nothing assignment of a dict of tensors to a module's parameters and buffers, shared
// by posenc::load_state_dict (Python pickles) and posenc::load_safetensors.

#include <posenc/io/state_dict.h>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <map>
#include <string>

namespace posenc {
namespace detail {

/// Writes `entries` (file key -> tensor) into `module`'s parameters and buffers (names as in
/// `named_parameters()` / `named_buffers()`, prefixed by `options.prefix()`). Every entry is
/// checked before anything is written: shapes must equal the module's; a floating tensor of the
/// module takes any floating dtype (converted) holding finite values, any other tensor its own
/// dtype; with `options.strict()` no key of the module may be missing and no key under the prefix
/// unknown. A violation throws a `c10::Error` that starts with the caller's name (its
/// CallerScope's) and names `source` (the file) and the key, and leaves the module unchanged.
void assign_state_dict(torch::nn::Module& module, const std::map<std::string, at::Tensor>& entries,
                       const LoadStateDictOptions& options, const std::string& source);

} // namespace detail
} // namespace posenc
