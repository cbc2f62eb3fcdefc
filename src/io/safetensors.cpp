#include <posenc/io/safetensors.h>

#include "detail/checks.h"
#include "detail/json_text.h"
#include "io/assign_state_dict.h"
#include "io/file_output.h"

#include <c10/util/Exception.h>
#include <torch/version.h>

#include <ATen/ops/empty.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace posenc {

namespace {

using json = nlohmann::json;

constexpr const char* kRead = "read_safetensors";
constexpr const char* kWrite = "write_safetensors";
constexpr const char* kMetadataKey = "__metadata__";
// The limit of the reference implementation (safetensors' MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100000000;
// A header nests at most three levels: the root object, an entry, its shape or offsets.
constexpr int kMaxHeaderDepth = 3;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error \
    "posenc's safetensors reader and writer copy tensor bytes as they are: little-endian hosts only"
#endif

struct Dtype {
  const char* name; // the safetensors name
  at::ScalarType type;
  uint64_t itemsize;
};

// The safetensors dtypes this LibTorch has, in the order Python's safetensors writes them (its
// Dtype enum, widest first; ties in enum order).
const std::vector<Dtype>& dtypes() {
  static const std::vector<Dtype> table = {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    {"U64", at::ScalarType::UInt64, 8},
#endif
    {"I64", at::ScalarType::Long, 8},
    {"F64", at::ScalarType::Double, 8},
    {"C64", at::ScalarType::ComplexFloat, 8},
    {"F32", at::ScalarType::Float, 4},
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    {"U32", at::ScalarType::UInt32, 4},
#endif
    {"I32", at::ScalarType::Int, 4},
    {"BF16", at::ScalarType::BFloat16, 2},
    {"F16", at::ScalarType::Half, 2},
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    {"U16", at::ScalarType::UInt16, 2},
#endif
    {"I16", at::ScalarType::Short, 2},
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    {"F8_E4M3", at::ScalarType::Float8_e4m3fn, 1},
    {"F8_E5M2", at::ScalarType::Float8_e5m2, 1},
#endif
    {"I8", at::ScalarType::Char, 1},
    {"U8", at::ScalarType::Byte, 1},
    {"BOOL", at::ScalarType::Bool, 1},
  };
  return table;
}

std::string dtype_names() {
  std::string names;
  for (const Dtype& dtype : dtypes()) {
    names += names.empty() ? "" : " ";
    names += dtype.name;
  }
  return names;
}

const Dtype* dtype_by_name(const std::string& name) {
  for (const Dtype& dtype : dtypes()) {
    if (name == dtype.name) {
      return &dtype;
    }
  }
  return nullptr;
}

// The position of `type` in dtypes() (the write order), or -1.
int dtype_index(at::ScalarType type) {
  const auto& table = dtypes();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].type == type) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// --- reading -----------------------------------------------------------------------------------

struct Entry {
  std::string name;
  const Dtype* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Rejects headers nested deeper than a safetensors header can be, before nlohmann-json builds a
// tree of them (a 100 MB header of '[' would otherwise become 50 million nested arrays).
void check_depth(const std::string& header, const std::string& name) {
  TORCH_CHECK(detail::json_depth_exceeded_at(header, kMaxHeaderDepth) == std::string::npos, kRead,
              ": '", name, "': the header nests deeper than a safetensors header (", kMaxHeaderDepth,
              " levels: the root object, an entry, its shape or data_offsets); the file is "
              "corrupt or not safetensors");
}

// Parses the header into JSON, rejecting duplicate keys (nlohmann-json would keep the last one).
json parse_header(const std::string& header, const std::string& name) {
  check_depth(header, name);
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event,
                                               json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end && !keys.empty()) {
      keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
               !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json parsed;
  try {
    parsed = json::parse(header, callback);
  } catch (const json::exception& error) {
    TORCH_CHECK(false, kRead, ": '", name, "': the header is not valid JSON (", error.what(),
                "); the file is corrupt or not safetensors");
  }
  TORCH_CHECK(duplicate.empty(), kRead, ": '", name, "': the header has the key '", duplicate,
              "' twice; every tensor name (and __metadata__ key) must appear once");
  TORCH_CHECK(parsed.is_object(), kRead, ": '", name,
              "': the header must be a JSON object of tensor entries, but it is a JSON ",
              parsed.type_name(), "; the file is corrupt or not safetensors");
  return parsed;
}

// A non-negative JSON integer that fits int64.
uint64_t header_count(const json& value, const std::string& name, const std::string& tensor,
                      const char* field) {
  TORCH_CHECK(
      value.is_number_unsigned() &&
          value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
      kRead, ": '", name, "': tensor '", tensor, "' has ", field, " element ", value.dump(), "; ",
      field, " must hold non-negative integers below 2^63");
  return value.get<uint64_t>();
}

Entry parse_entry(const std::string& tensor, const json& info, const std::string& name) {
  TORCH_CHECK(info.is_object(), kRead, ": '", name, "': the entry of tensor '", tensor,
              "' must be an object {\"dtype\", \"shape\", \"data_offsets\"}, but it is a JSON ",
              info.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    TORCH_CHECK(info.contains(field), kRead, ": '", name, "': tensor '", tensor, "' has no \"",
                field, "\"; every entry needs dtype, shape and data_offsets");
  }
  for (const auto& item : info.items()) {
    TORCH_CHECK(item.key() == "dtype" || item.key() == "shape" || item.key() == "data_offsets",
                kRead, ": '", name, "': tensor '", tensor, "' has the unknown field '", item.key(),
                "'; an entry holds exactly dtype, shape and data_offsets");
  }
  Entry entry;
  entry.name = tensor;
  const json& dtype = info.at("dtype");
  TORCH_CHECK(dtype.is_string(), kRead, ": '", name, "': tensor '", tensor, "' has dtype ",
              dtype.dump(), "; dtype must be a string such as \"F32\"");
  entry.dtype = dtype_by_name(dtype.get<std::string>());
  TORCH_CHECK(entry.dtype != nullptr, kRead, ": '", name, "': tensor '", tensor, "' has dtype '",
              dtype.get<std::string>(),
              "', which is not a safetensors dtype this LibTorch has; use one of ", dtype_names());

  const json& shape = info.at("shape");
  TORCH_CHECK(shape.is_array(), kRead, ": '", name, "': tensor '", tensor, "' has shape ",
              shape.dump(), "; shape must be an array of non-negative integers");
  uint64_t numel = 1;
  // The product of the sizes with zeros counted as ones: the largest stride of the contiguous
  // tensor, which must fit int64 even when the tensor is empty.
  uint64_t span = 1;
  bool overflow = false;
  for (const json& dim : shape) {
    const uint64_t size = header_count(dim, name, tensor, "shape");
    entry.shape.push_back(static_cast<int64_t>(size));
    overflow = overflow || __builtin_mul_overflow(numel, size, &numel) ||
               __builtin_mul_overflow(span, std::max<uint64_t>(size, 1), &span) ||
               span > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  uint64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, entry.dtype->itemsize, &bytes) ||
             numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  TORCH_CHECK(!overflow, kRead, ": '", name, "': tensor '", tensor, "' has shape ", shape.dump(),
              ", whose element count, strides or size in bytes overflow 64-bit integers; the file "
              "is corrupt");

  const json& offsets = info.at("data_offsets");
  TORCH_CHECK(offsets.is_array() && offsets.size() == 2, kRead, ": '", name, "': tensor '", tensor,
              "' has data_offsets ", offsets.dump(),
              "; data_offsets must be [begin, end], two non-negative integers");
  entry.begin = header_count(offsets[0], name, tensor, "data_offsets");
  entry.end = header_count(offsets[1], name, tensor, "data_offsets");
  TORCH_CHECK(entry.begin <= entry.end, kRead, ": '", name, "': tensor '", tensor,
              "' has data_offsets [", entry.begin, ", ", entry.end,
              "]; begin must be <= end; the file is corrupt");
  TORCH_CHECK(entry.end - entry.begin == bytes, kRead, ": '", name, "': tensor '", tensor, "' (",
              entry.dtype->name, ", shape ", shape.dump(), ") needs ", bytes,
              " bytes, but its data_offsets [", entry.begin, ", ", entry.end, "] span ",
              entry.end - entry.begin, "; the file is corrupt");
  return entry;
}

std::map<std::string, std::string> parse_metadata(const json& metadata, const std::string& name) {
  TORCH_CHECK(metadata.is_object(), kRead, ": '", name,
              "': __metadata__ must be an object of strings, but it is a JSON ",
              metadata.type_name());
  std::map<std::string, std::string> result;
  for (const auto& item : metadata.items()) {
    TORCH_CHECK(item.value().is_string(), kRead, ": '", name, "': __metadata__ entry '", item.key(),
                "' is ", item.value().dump(),
                "; metadata values must be strings (safetensors stores str -> str)");
    result.emplace(item.key(), item.value().get<std::string>());
  }
  return result;
}

void read_exactly(std::istream& in, char* data, uint64_t size, const std::string& name,
                  const char* what) {
  in.read(data, static_cast<std::streamsize>(size));
  TORCH_CHECK(in.good() && static_cast<uint64_t>(in.gcount()) == size, kRead, ": '", name,
              "': could not read ", what, " (", size,
              " bytes); the file is truncated or "
              "unreadable");
}

// --- writing -----------------------------------------------------------------------------------


} // namespace

SafetensorsFile read_safetensors(std::istream& in, const std::string& name) {
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  TORCH_CHECK(in.good() && end >= 0, kRead, ": '", name,
              "': cannot determine its size; pass a seekable stream or a file");
  in.seekg(0, std::ios::beg);
  const auto file_size = static_cast<uint64_t>(end);
  TORCH_CHECK(file_size >= 8, kRead, ": '", name, "' has ", file_size,
              " bytes; a safetensors file starts with an 8-byte header length. The file is "
              "truncated or not safetensors");

  unsigned char length_bytes[8];
  read_exactly(in, reinterpret_cast<char*>(length_bytes), 8, name, "the header length");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) {
    header_size = (header_size << 8) | length_bytes[i];
  }
  TORCH_CHECK(header_size <= kMaxHeaderBytes, kRead, ": '", name, "': the header length is ",
              header_size, " bytes, more than safetensors allows (", kMaxHeaderBytes,
              "); the file is corrupt or not safetensors");
  TORCH_CHECK(header_size <= file_size - 8, kRead, ": '", name, "': the header length is ",
              header_size, " bytes, but only ", file_size - 8,
              " bytes follow the length field; the file is truncated");
  std::string header(header_size, '\0');
  read_exactly(in, &header[0], header_size, name, "the header");
  const uint64_t data_size = file_size - 8 - header_size;

  const json parsed = parse_header(header, name);
  SafetensorsFile result;
  std::vector<Entry> entries;
  for (const auto& item : parsed.items()) {
    if (item.key() == kMetadataKey) {
      result.metadata = parse_metadata(item.value(), name);
      continue;
    }
    entries.push_back(parse_entry(item.key(), item.value(), name));
    const Entry& entry = entries.back();
    TORCH_CHECK(entry.end <= data_size, kRead, ": '", name, "': tensor '", entry.name,
                "' has data_offsets [", entry.begin, ", ", entry.end, "], past the ", data_size,
                " bytes of data that follow the header; the file is truncated or corrupt");
  }

  // The offsets must tile the data exactly, as the reference implementation requires.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    TORCH_CHECK(entry.begin >= covered, kRead, ": '", name, "': tensor '", entry.name,
                "' (data_offsets [", entry.begin, ", ", entry.end, "]) overlaps tensor '",
                previous != nullptr ? previous->name : "", "' (which ends at ", covered,
                "); tensors must not share bytes. The file is corrupt");
    TORCH_CHECK(entry.begin == covered, kRead, ": '", name, "': bytes [", covered, ", ",
                entry.begin, ") before tensor '", entry.name,
                "' belong to no tensor; the data offsets must leave no hole. The file is corrupt");
    covered = entry.end;
    previous = &entry;
  }
  TORCH_CHECK(covered == data_size, kRead, ": '", name, "': the last ", data_size - covered,
              " of the ", data_size,
              " data bytes belong to no tensor; a safetensors file ends with "
              "its last tensor. The file is corrupt or was appended to");

  // Everything is known to fit the file: allocate and read, in file order.
  for (const Entry& entry : entries) {
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype->type));
    const uint64_t bytes = entry.end - entry.begin;
    if (bytes > 0) {
      read_exactly(in, static_cast<char*>(tensor.data_ptr()), bytes, name,
                   ("the data of tensor '" + entry.name + "'").c_str());
    }
    if (entry.dtype->type == at::ScalarType::Bool) {
      const auto* raw = static_cast<const unsigned char*>(tensor.data_ptr());
      for (uint64_t i = 0; i < bytes; ++i) {
        TORCH_CHECK(raw[i] <= 1, kRead, ": '", name, "': BOOL tensor '", entry.name,
                    "' holds the byte ", static_cast<int>(raw[i]), " at element ", i,
                    "; BOOL bytes must be 0 or 1. The file is corrupt");
      }
    }
    result.tensors.insert(entry.name, std::move(tensor));
  }
  return result;
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), kRead, ": cannot open '", path, "'; check the path");
  return read_safetensors(in, path);
}

void write_safetensors(std::ostream& out,
                       const torch::OrderedDict<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::string& name) {
  // Check every tensor and make its CPU copy before writing a byte.
  struct Item {
    std::string name;
    int dtype;
    at::Tensor data;
  };
  std::vector<Item> items;
  for (const auto& tensor : tensors) {
    const at::Tensor& value = tensor.value();
    TORCH_CHECK(tensor.key() != kMetadataKey, kWrite, ": '", name,
                "': a tensor cannot be named __metadata__ (the header's metadata key); rename it");
    TORCH_CHECK(value.defined(), kWrite, ": '", name, "': tensor '", tensor.key(),
                "' is undefined; pass defined tensors only");
    TORCH_CHECK(value.layout() == at::kStrided, kWrite, ": '", name, "': tensor '", tensor.key(),
                "' has layout ", value.layout(),
                "; safetensors holds dense tensors only (call to_dense() first)");
    const int dtype = dtype_index(value.scalar_type());
    TORCH_CHECK(dtype >= 0, kWrite, ": '", name, "': tensor '", tensor.key(), "' has dtype ",
                value.scalar_type(),
                ", which safetensors cannot hold here; supported: ", dtype_names());
    TORCH_CHECK(!value.is_meta(), kWrite, ": '", name, "': tensor '", tensor.key(),
                "' is on the meta device and has no data to write");
    items.push_back({tensor.key(), dtype,
                     value.detach().to(at::kCPU).resolve_conj().resolve_neg().contiguous()});
  }
  // Python's layout: widest dtype first, then by name.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.dtype != b.dtype ? a.dtype < b.dtype : a.name < b.name;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header[kMetadataKey] = metadata;
  }
  uint64_t offset = 0;
  for (const Item& item : items) {
    const uint64_t bytes = static_cast<uint64_t>(item.data.nbytes());
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = dtypes()[item.dtype].name;
    entry["shape"] = item.data.sizes().vec();
    entry["data_offsets"] = {offset, offset + bytes};
    header[item.name] = std::move(entry);
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& error) {
    TORCH_CHECK(false, kWrite, ": '", name,
                "': a tensor name or metadata string is not valid "
                "UTF-8 (",
                error.what(), "); safetensors headers are JSON, so use UTF-8 names");
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  unsigned char length[8];
  uint64_t size = text.size();
  for (unsigned char& byte : length) {
    byte = static_cast<unsigned char>(size & 0xff);
    size >>= 8;
  }
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Item& item : items) {
    out.write(static_cast<const char*>(item.data.data_ptr()),
              static_cast<std::streamsize>(item.data.nbytes()));
  }
  TORCH_CHECK(out.good(), kWrite, ": writing '", name, "' failed");
}

void write_safetensors(const std::string& path,
                       const torch::OrderedDict<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Into memory first: a failed check leaves no partial file behind.
  std::ostringstream bytes;
  write_safetensors(bytes, tensors, metadata, path);
  io::write_file_safely(path, bytes.str(), kWrite);
}

torch::OrderedDict<std::string, at::Tensor> state_dict(const torch::nn::Module& module) {
  torch::OrderedDict<std::string, at::Tensor> result;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    result.insert(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    result.insert(item.key(), item.value());
  }
  return result;
}

void save_safetensors(const torch::nn::Module& module, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, state_dict(module), metadata);
}

void load_safetensors(torch::nn::Module& module, std::istream& stream,
                      const LoadStateDictOptions& options, const std::string& name) {
  SafetensorsFile file = read_safetensors(stream, name);
  std::map<std::string, at::Tensor> entries;
  for (auto& item : file.tensors) {
    entries.emplace(item.key(), item.value());
  }
  const detail::CallerScope caller(detail::CallerScope::Rename{}, "load_safetensors");
  detail::assign_state_dict(module, entries, options, name);
}

void load_safetensors(torch::nn::Module& module, const std::string& path,
                      const LoadStateDictOptions& options) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "load_safetensors: cannot open '", path, "'; check the path");
  load_safetensors(module, in, options, path);
}

} // namespace posenc
