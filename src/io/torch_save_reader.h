#pragma once

// A reader for the files Python's torch.save writes (the zip format, the default since PyTorch
// 1.6): the pickle in data.pkl and the tensor storages in data/<key>.
//
// LibTorch's own torch::pickle_load cannot read a state dict: its unpickler turns
// collections.OrderedDict into None (on purpose: it is meant for TorchScript archives), and the
// 1.13 one also lacks the SETITEM/APPEND opcodes Python emits for one-element containers. This
// reader interprets the pickle opcodes of protocols 2 to 5 that torch.save produces, rebuilds
// tensors from their storages, and treats every other object as opaque. Every read is bounds
// checked: a truncated or corrupted file gives a c10::Error, never a crash.

#include <ATen/core/Tensor.h>

#include <istream>
#include <string>
#include <utility>
#include <vector>

namespace posenc {
namespace detail {

/// The (name, tensor) entries of a state dict saved with torch.save, in file order. `what`
/// names the source in error messages. Tensors are loaded onto the CPU.
std::vector<std::pair<std::string, at::Tensor>> read_torch_save_state_dict(std::istream& in,
                                                                           const std::string& what);

/// The same for a file on disk.
std::vector<std::pair<std::string, at::Tensor>> read_torch_save_state_dict(const std::string& path);

} // namespace detail
} // namespace posenc
