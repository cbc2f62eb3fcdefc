#pragma once

/// Reading and writing the safetensors format (https://github.com/huggingface/safetensors): an
/// 8-byte little-endian header length N, N bytes of JSON (`{"name": {"dtype": "F32", "shape":
/// [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}}`), then the
/// tensors' bytes, little-endian and contiguous.
///
/// Part of the `posenc::io` library, not of `posenc::posenc`, and not included by
/// `<posenc/posenc.h>`: link `posenc::io` and include this header to use it.
///
/// Example:
/// ```
/// posenc::LearnedPositionalEmbedding pe(64, 512);
/// posenc::save_safetensors(*pe, "pe.safetensors");       // safetensors.torch.load_file reads it
/// posenc::load_safetensors(*pe, "pe.safetensors");       // all or nothing
/// posenc::SafetensorsFile file = posenc::read_safetensors("model.safetensors");
/// torch::Tensor weight = file.tensors["weight"];
/// ```

#include <posenc/io/state_dict.h>

#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <ATen/core/Tensor.h>

#include <iosfwd>
#include <map>
#include <string>

namespace posenc {

/// The contents of a safetensors file.
struct SafetensorsFile {
  /// The tensors (CPU, contiguous), in the order of their bytes in the file.
  torch::OrderedDict<std::string, at::Tensor> tensors;
  /// The `__metadata__` map (empty when the file has none).
  std::map<std::string, std::string> metadata;
};

/// Reads a safetensors file. Everything is checked before a tensor is allocated: the header length
/// (at most 100 MB, within the file), the header (a JSON object without duplicate keys; each entry
/// exactly `dtype`, `shape`, `data_offsets`; `__metadata__` a map of strings), every dtype (one
/// LibTorch has: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL C64, and U64 U32 U16 F8_E5M2 F8_E4M3
/// where LibTorch has them), every size (element count, strides and bytes without overflow; the
/// bytes equal to `end - begin`), and the offsets (sorted by `begin`, they tile the data exactly:
/// no overlap, no hole, no trailing byte). BOOL bytes must be 0 or 1. Any violation throws a
/// `c10::Error` naming the file and the tensor.
SafetensorsFile read_safetensors(const std::string& path);

/// Reads safetensors bytes from `stream` (which must be seekable, for its size); `name` stands for
/// the file in messages.
SafetensorsFile read_safetensors(std::istream& stream, const std::string& name = "<stream>");

/// Writes `tensors` (and `metadata` as `__metadata__`, if not empty) as a safetensors file, laid
/// out as Python's `safetensors.torch.save_file` lays them out: data sorted by dtype (widest first)
/// and then by name, header entries in that order after `__metadata__`, compact JSON padded with
/// spaces to a multiple of 8 bytes. Tensors are written as contiguous CPU copies of any device. A
/// tensor must be defined, dense, of a dtype listed at `read_safetensors`, and not be named
/// `__metadata__`; the file is written only when all are.
void write_safetensors(const std::string& path,
                       const torch::OrderedDict<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Writes safetensors bytes to `stream`; `name` stands for the file in messages.
void write_safetensors(std::ostream& stream,
                       const torch::OrderedDict<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::string& name = "<stream>");

/// The state dict of `module`: its parameters, then its buffers, recursively, under the names of
/// `named_parameters()` / `named_buffers()` (the keys `torch::save` and `load_state_dict` use, and
/// Python's `state_dict()` for the same module).
torch::OrderedDict<std::string, at::Tensor> state_dict(const torch::nn::Module& module);

/// Writes `module`'s state dict (see `state_dict`) as a safetensors file, with `metadata` (by
/// default `{"format": "pt"}`, which Hugging Face's loaders expect).
void save_safetensors(const torch::nn::Module& module, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

/// Loads a safetensors file into `module`'s parameters and buffers, all or nothing: the file is
/// read and checked (see `read_safetensors`), then every entry is checked against the module as
/// `load_state_dict` checks it (shapes equal, a floating tensor takes any floating dtype with
/// finite values, other tensors their own dtype; with `options.strict()`, the default, no key
/// missing and none unknown under `options.prefix()`), and only then written. Any violation
/// throws a `c10::Error` and leaves the module unchanged.
void load_safetensors(torch::nn::Module& module, const std::string& path,
                      const LoadStateDictOptions& options = {});

/// Loads safetensors bytes from `stream` into `module`, as the overload taking a path does.
void load_safetensors(torch::nn::Module& module, std::istream& stream,
                      const LoadStateDictOptions& options = {},
                      const std::string& name = "<stream>");

} // namespace posenc
