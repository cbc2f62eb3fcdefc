// posenc::read_safetensors / write_safetensors / save_safetensors / load_safetensors: round trips
// of every dtype, the byte layout Python's safetensors writes, posenc modules, and malformed files,
// each a clear error that leaves the module unchanged. (Files written and read by Python's own
// safetensors package: test/python/test_safetensors.py.)

#include "test_util.h"

#include <posenc/io/safetensors.h>
#include <posenc/posenc.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <csignal>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using posenc_test::error_message;

class Safetensors : public posenc_test::SeededTest {};

// Bitwise equality (dtype, shape, bytes): also for dtypes torch::equal does not cover (float8,
// unsigned), and NaN payloads.
bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return false;
  }
  const auto ca = a.contiguous();
  const auto cb = b.contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

std::string to_bytes(const torch::OrderedDict<std::string, torch::Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata = {}) {
  std::ostringstream out;
  posenc::write_safetensors(out, tensors, metadata);
  return out.str();
}

posenc::SafetensorsFile from_bytes(const std::string& bytes) {
  std::istringstream in(bytes);
  return posenc::read_safetensors(in, "test.safetensors");
}

// A file from a header text and data bytes, as a hand-made (possibly malformed) file.
std::string make_file(const std::string& header, const std::string& data = "") {
  std::string bytes(8, '\0');
  uint64_t size = header.size();
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  }
  return bytes + header + data;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "posenc_" + std::to_string(::getpid()) + "_" + name;
}

// Every safetensors dtype this LibTorch has.
std::vector<torch::Dtype> all_dtypes() {
  std::vector<torch::Dtype> dtypes = {torch::kDouble,   torch::kFloat,       torch::kHalf,
                                      torch::kBFloat16, torch::kLong,        torch::kInt,
                                      torch::kShort,    torch::kChar,        torch::kByte,
                                      torch::kBool,     torch::kComplexFloat};
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  dtypes.push_back(torch::ScalarType::Float8_e4m3fn);
  dtypes.push_back(torch::ScalarType::Float8_e5m2);
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  dtypes.push_back(torch::ScalarType::UInt16);
  dtypes.push_back(torch::ScalarType::UInt32);
  dtypes.push_back(torch::ScalarType::UInt64);
#endif
  return dtypes;
}

torch::Tensor sample(torch::Dtype dtype, torch::IntArrayRef shape) {
  if (dtype == torch::kBool) {
    return torch::randint(0, 2, shape, torch::kLong).to(torch::kBool);
  }
  if (at::isFloatingType(dtype) || at::isComplexType(dtype)) {
    return torch::randn(shape, at::isComplexType(dtype) ? torch::kComplexFloat : torch::kFloat)
        .to(dtype);
  }
  return torch::randint(0, 120, shape, torch::kLong).to(dtype);
}

// All parameters and buffers of `module`, cloned: what a failed load must leave in place.
std::vector<torch::Tensor> snapshot(const torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors;
  for (const auto& item : posenc::state_dict(module)) {
    tensors.push_back(item.value().detach().clone());
  }
  return tensors;
}

bool unchanged(const torch::nn::Module& module, const std::vector<torch::Tensor>& before) {
  const auto now = posenc::state_dict(module);
  if (now.size() != before.size()) {
    return false;
  }
  for (size_t i = 0; i < before.size(); ++i) {
    if (!same_bits(now[i].value(), before[i])) {
      return false;
    }
  }
  return true;
}

TEST_F(Safetensors, RoundTripsEveryDtypeWithEmptyAndZeroDimTensors) {
  torch::OrderedDict<std::string, torch::Tensor> tensors;
  for (const auto dtype : all_dtypes()) {
    const std::string name = c10::toString(dtype);
    tensors.insert(name + ".matrix", sample(dtype, {3, 5}));
    tensors.insert(name + ".empty", sample(dtype, {0, 4}));
    tensors.insert(name + ".scalar", sample(dtype, {}));
  }
  const auto file = from_bytes(to_bytes(tensors));
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& item : tensors) {
    const torch::Tensor* read = file.tensors.find(item.key());
    ASSERT_NE(read, nullptr) << item.key();
    EXPECT_TRUE(same_bits(*read, item.value())) << item.key();
  }
  EXPECT_EQ(file.tensors["Float.scalar"].dim(), 0);
  EXPECT_TRUE(file.metadata.empty());
}

TEST_F(Safetensors, WritesNonContiguousAndRequiresGradTensorsAsContiguousCopies) {
  const auto base = torch::randn({4, 6}, torch::requires_grad());
  const auto view = base.t().slice(0, 1, 5);
  const auto file = from_bytes(to_bytes({{"view", view}}));
  EXPECT_TRUE(torch::equal(file.tensors["view"], view.detach()));
  EXPECT_TRUE(file.tensors["view"].is_contiguous());
}

// The header and layout of Python's safetensors.torch.save_file (0.8.0) for these tensors and
// metadata, byte for byte: data sorted by dtype, widest first, then by name; __metadata__ first;
// compact JSON padded with spaces to a multiple of 8.
TEST_F(Safetensors, LaysOutTheFileAsPythonsSaveFile) {
  const std::string bytes = to_bytes({{"b", torch::arange(6, torch::kFloat).reshape({2, 3})},
                                      {"a", torch::tensor({1, 2}, torch::kShort)},
                                      {"c", torch::tensor(true)},
                                      {"z", torch::zeros({0, 3}, torch::kDouble)},
                                      {"y", torch::ones({2}, torch::kBFloat16)}},
                                     {{"format", "pt"}, {"k", "v"}});
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
      "\"z\":{\"dtype\":\"F64\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"y\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
      "\"a\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[28,32]},"
      "\"c\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[32,33]}}   ";
  ASSERT_EQ(header.size(), 320u);
  ASSERT_EQ(bytes.size(), 8 + 320 + 33u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x40\x01\0\0\0\0\0\0", 8));
  EXPECT_EQ(bytes.substr(8, 320), header);
  EXPECT_EQ(bytes.back(), '\x01'); // c = true, last
  const auto file = from_bytes(bytes);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"k", "v"}}));
  std::vector<std::string> order;
  for (const auto& item : file.tensors) {
    order.push_back(item.key());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"z", "b", "y", "a", "c"}));
}

TEST_F(Safetensors, WriteRejectsWhatTheFormatCannotHold) {
  EXPECT_POSENC_ERROR(to_bytes({{"__metadata__", torch::zeros(1)}}),
                      "a tensor cannot be named __metadata__");
  EXPECT_POSENC_ERROR(to_bytes({{"x", torch::Tensor()}}), "tensor 'x' is undefined");
  EXPECT_POSENC_ERROR(to_bytes({{"s", torch::eye(2).to_sparse()}}), "tensor 's' has layout Sparse");
  EXPECT_POSENC_ERROR(to_bytes({{"c", torch::zeros(2, torch::kComplexDouble)}}),
                      "tensor 'c' has dtype ComplexDouble");
  EXPECT_POSENC_ERROR(to_bytes({{"x", torch::zeros(1)}}, {{"k", "\xff"}}), "is not valid UTF-8");
  // A failed write leaves no file behind.
  const std::string path = temp_path("rejected.safetensors");
  std::remove(path.c_str());
  EXPECT_THROW(posenc::write_safetensors(path, {{"x", torch::Tensor()}}), c10::Error);
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

template <typename ModuleHolder>
void expect_module_round_trip(ModuleHolder saved, ModuleHolder loaded, const std::string& file) {
  const std::string path = temp_path(file);
  posenc::save_safetensors(*saved, path);
  EXPECT_EQ(posenc::read_safetensors(path).metadata,
            (std::map<std::string, std::string>{{"format", "pt"}}));
  const auto expected = posenc::state_dict(*saved);
  ASSERT_FALSE(unchanged(*loaded, snapshot(*saved))) << "the modules must differ before loading";
  posenc::load_safetensors(*loaded, path);
  const auto got = posenc::state_dict(*loaded);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key(), expected[i].key());
    EXPECT_TRUE(same_bits(got[i].value(), expected[i].value())) << got[i].key();
  }
  std::remove(path.c_str());
}

// A write that fails half-way (here a file-size limit, as a full disk) loses nothing: the file is
// written beside the target and renamed over it (src/io/file_output.h), so the file that was there
// is unchanged and no temporary is left. Run in a child process, whose limit the test does not
// share; the child exits 0 when the write raised the expected c10::Error.
TEST_F(Safetensors, AFailedWriteLeavesTheFileThatWasThere) {
  char directory_template[] = "/tmp/posenc_safetensors_XXXXXX";
  ASSERT_NE(mkdtemp(directory_template), nullptr);
  const std::string directory = directory_template;
  const std::string path = directory + "/model.safetensors";
  {
    std::ofstream previous(path, std::ios::binary);
    previous << "the previous file";
  }
  torch::OrderedDict<std::string, torch::Tensor> big;
  big.insert("weight", torch::zeros({64, 64}));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    const std::string error = error_message([&] { posenc::write_safetensors(path, big, {}); });
    const bool expected = error.find("File too large") != std::string::npos &&
                          error.find("the file that was there is unchanged") != std::string::npos;
    _exit(expected ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the write did not fail cleanly";
  std::ifstream kept(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "the previous file");
  std::vector<std::string> names;
  DIR* listing = opendir(directory.c_str());
  ASSERT_NE(listing, nullptr);
  for (dirent* entry = readdir(listing); entry != nullptr; entry = readdir(listing)) {
    if (std::string(entry->d_name) != "." && std::string(entry->d_name) != "..") {
      names.push_back(entry->d_name);
    }
  }
  closedir(listing);
  EXPECT_EQ(names, std::vector<std::string>{"model.safetensors"}) << "a temporary was left";
  // Written where it can be: replaced whole.
  posenc::write_safetensors(path, big, {});
  std::ifstream in(path, std::ios::binary);
  EXPECT_EQ(posenc::read_safetensors(in, path).tensors.size(), 1u);
  std::remove(path.c_str());
  rmdir(directory.c_str());
}

TEST_F(Safetensors, ModulesRoundTrip) {
  expect_module_round_trip(posenc::LearnedPositionalEmbedding(6, 10),
                           posenc::LearnedPositionalEmbedding(6, 10), "learned.safetensors");
  expect_module_round_trip(posenc::RelativePositionBias(posenc::RelativePositionBiasOptions(4)),
                           posenc::RelativePositionBias(posenc::RelativePositionBiasOptions(4)),
                           "t5.safetensors");
  expect_module_round_trip(posenc::TokenAndPositionEmbedding(20, 8, 12),
                           posenc::TokenAndPositionEmbedding(20, 8, 12), "token.safetensors");
  expect_module_round_trip(posenc::RelPositionMultiheadAttention(8, 2),
                           posenc::RelPositionMultiheadAttention(8, 2), "conformer.safetensors");
}

TEST_F(Safetensors, StateDictHasTheKeysOfNamedParametersAndBuffers) {
  posenc::TokenAndPositionEmbedding module(20, 8, 12);
  std::vector<std::string> keys;
  for (const auto& item : posenc::state_dict(*module)) {
    keys.push_back(item.key());
  }
  std::vector<std::string> expected;
  for (const auto& item : module->named_parameters()) {
    expected.push_back(item.key());
  }
  for (const auto& item : module->named_buffers()) {
    expected.push_back(item.key());
  }
  EXPECT_EQ(keys, expected);
  EXPECT_FALSE(keys.empty());
}

TEST_F(Safetensors, LoadsWithPrefixAndNonStrict) {
  posenc::LearnedPositionalEmbedding source(4, 5);
  std::ostringstream out;
  posenc::write_safetensors(
      out, {{"model.pos.weight", source->weight}, {"model.other", torch::zeros(3)}});
  posenc::LearnedPositionalEmbedding target(4, 5);
  std::istringstream in(out.str());
  posenc::load_safetensors(*target, in, posenc::LoadStateDictOptions().prefix("model.pos."));
  EXPECT_TRUE(torch::equal(target->weight, source->weight));

  posenc::LearnedPositionalEmbedding untouched(4, 5);
  const auto before = snapshot(*untouched);
  std::istringstream other(to_bytes({{"unrelated", torch::zeros(1)}}));
  posenc::load_safetensors(*untouched, other, posenc::LoadStateDictOptions().strict(false));
  EXPECT_TRUE(unchanged(*untouched, before));
}

struct Malformed {
  const char* what;
  std::string bytes;
  const char* message;
};

// A valid file for the module below (LearnedPositionalEmbedding(2, 3): weight [3, 2] float32, 24
// bytes), so that each malformed variant differs from it in one respect.
const char* kWeight = "\"weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}";

std::vector<Malformed> malformed_files() {
  const std::string data(24, '\0');
  const std::string w = kWeight;
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };
  std::string huge(8, '\xff');
  std::string past_end = make_file("{" + w + "}", data).substr(0, 8) + "{}";
  return {
      {"empty file", "", "has 0 bytes; a safetensors file starts with an 8-byte header length"},
      {"truncated header length", std::string("\x10\0\0", 3), "has 3 bytes"},
      {"huge header length", huge + "{}", "more than safetensors allows (100000000)"},
      {"header length past the end", past_end,
       "bytes follow the length field; the file is truncated"},
      {"header not JSON", make_file("{\"weight\":", data), "the header is not valid JSON"},
      {"header not an object", make_file("[1, 2]", data), "the header must be a JSON object"},
      {"nested too deep", make_file("{\"a\":{\"b\":[[1]]}}"),
       "nests deeper than a safetensors header"},
      {"duplicate key", make_file("{" + w + "," + w + "}", data), "has the key 'weight' twice"},
      {"entry not an object", make_file("{\"weight\":[1]}", data), "must be an object"},
      {"missing dtype", make_file("{\"weight\":{\"shape\":[3,2],\"data_offsets\":[0,24]}}", data),
       "tensor 'weight' has no \"dtype\""},
      {"missing data_offsets", make_file("{\"weight\":{\"dtype\":\"F32\",\"shape\":[3,2]}}", data),
       "tensor 'weight' has no \"data_offsets\""},
      {"extra field",
       make_file("{\"weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24],"
                 "\"stride\":[2,1]}}",
                 data),
       "tensor 'weight' has the unknown field 'stride'"},
      {"unknown dtype", make_file("{" + entry("weight", "F33", "[3,2]", "[0,24]") + "}", data),
       "tensor 'weight' has dtype 'F33', which is not a safetensors dtype this LibTorch has"},
      {"dtype not a string",
       make_file("{\"weight\":{\"dtype\":32,\"shape\":[3,2],\"data_offsets\":[0,24]}}", data),
       "dtype must be a string"},
      {"negative shape", make_file("{" + entry("weight", "F32", "[-3,2]", "[0,24]") + "}", data),
       "has shape element -3; shape must hold non-negative integers"},
      {"fractional shape", make_file("{" + entry("weight", "F32", "[1.5,2]", "[0,24]") + "}", data),
       "has shape element 1.5"},
      {"shape overflows",
       make_file("{" + entry("weight", "F32", "[4294967296,4294967296]", "[0,24]") + "}", data),
       "overflow 64-bit integers"},
      {"empty shape whose strides overflow",
       make_file("{" + w + "," + entry("e", "F32", "[0,4294967296,4294967296]", "[24,24]") + "}",
                 data),
       "overflow 64-bit integers"},
      {"size mismatch with shape",
       make_file("{" + entry("weight", "F32", "[3,3]", "[0,24]") + "}", data),
       "needs 36 bytes, but its data_offsets [0, 24] span 24"},
      {"begin after end", make_file("{" + entry("weight", "F32", "[3,2]", "[24,0]") + "}", data),
       "begin must be <= end"},
      {"offsets not a pair",
       make_file("{" + entry("weight", "F32", "[3,2]", "[0,24,48]") + "}", data),
       "data_offsets must be [begin, end]"},
      {"offsets out of range",
       make_file("{" + entry("weight", "F32", "[3,2]", "[0,24]") + "}", data.substr(0, 20)),
       "past the 20 bytes of data that follow the header"},
      {"overlapping tensors",
       make_file("{" + entry("weight", "F32", "[3,2]", "[0,24]") + "," +
                     entry("x", "F32", "[2]", "[16,24]") + "}",
                 data),
       "tensor 'x' (data_offsets [16, 24]) overlaps tensor 'weight'"},
      {"hole between tensors",
       make_file("{" + entry("weight", "F32", "[3,2]", "[8,32]") + "}",
                 data + std::string(8, '\0')),
       "bytes [0, 8) before tensor 'weight' belong to no tensor"},
      {"trailing bytes", make_file("{" + w + "}", data + "junk"),
       "the last 4 of the 28 data bytes belong to no tensor"},
      {"metadata not an object", make_file("{\"__metadata__\":[\"a\"]," + w + "}", data),
       "__metadata__ must be an object of strings"},
      {"metadata value not a string", make_file("{\"__metadata__\":{\"epoch\":3}," + w + "}", data),
       "__metadata__ entry 'epoch' is 3; metadata values must be strings"},
      {"BOOL byte 2",
       make_file("{" + w + "," + entry("flag", "BOOL", "[2]", "[24,26]") + "}", data + "\x01\x02"),
       "BOOL tensor 'flag' holds the byte 2 at element 1"},
      {"shape mismatch with the module",
       make_file("{" + entry("weight", "F32", "[2,3]", "[0,24]") + "}", data),
       "load_safetensors: size mismatch for 'weight': the file has shape [2, 3], the module has "
       "[3, 2]"},
      {"name mismatch with the module",
       make_file("{" + entry("weights", "F32", "[3,2]", "[0,24]") + "}", data),
       "load_safetensors: 'test.safetensors' lacks 'weight'"},
      {"unknown key for the module",
       make_file("{" + w + "," + entry("bias", "F32", "[]", "[24,28]") + "}",
                 data + std::string(4, '\0')),
       "has entries the module does not: 'bias'"},
      {"dtype mismatch with the module",
       make_file("{" + entry("weight", "I32", "[3,2]", "[0,24]") + "}", data),
       "dtype mismatch for 'weight': the file has Int, the module expects a floating dtype"},
      {"NaN for the module",
       make_file("{" + w + "}", std::string(20, '\0') + std::string("\0\0\xc0\x7f", 4)),
       "the entry 'weight' holds NaN or infinite values"},
  };
}

TEST_F(Safetensors, MalformedFilesAreClearErrorsAndLeaveTheModuleUnchanged) {
  posenc::LearnedPositionalEmbedding module(2, 3);
  const auto before = snapshot(*module);
  // The well-formed file these variants start from loads.
  {
    std::istringstream in(make_file(std::string("{") + kWeight + "}", std::string(24, '\0')));
    posenc::LearnedPositionalEmbedding zeros(2, 3);
    posenc::load_safetensors(*zeros, in, {}, "test.safetensors");
    EXPECT_TRUE(torch::equal(zeros->weight, torch::zeros({3, 2})));
  }
  for (const Malformed& file : malformed_files()) {
    SCOPED_TRACE(file.what);
    std::istringstream in(file.bytes);
    const std::string message =
        error_message([&] { posenc::load_safetensors(*module, in, {}, "test.safetensors"); });
    EXPECT_NE(message.find(file.message), std::string::npos) << message;
    EXPECT_NE(message.find("test.safetensors"), std::string::npos) << message;
    EXPECT_TRUE(unchanged(*module, before));
  }
}

TEST_F(Safetensors, MalformedFilesFailToReadFromAPathToo) {
  const std::string path = temp_path("bad.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    out << make_file("{\"weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}}",
                     std::string(20, '\0'));
  }
  EXPECT_POSENC_ERROR(posenc::read_safetensors(path),
                      "read_safetensors: '" + path +
                          "': tensor 'weight' has data_offsets [0, 24], past the 20 bytes");
  std::remove(path.c_str());
  EXPECT_POSENC_ERROR(posenc::read_safetensors(path),
                      "read_safetensors: cannot open '" + path + "'");
  posenc::LearnedPositionalEmbedding module(2, 3);
  EXPECT_POSENC_ERROR(posenc::load_safetensors(*module, path),
                      "load_safetensors: cannot open '" + path + "'");
}

TEST_F(Safetensors, FileWithOnlyMetadataOrNothingReads) {
  const auto empty = from_bytes(make_file("{}"));
  EXPECT_EQ(empty.tensors.size(), 0u);
  const auto only_metadata = from_bytes(make_file("{\"__metadata__\":{\"a\":\"b\"}}   "));
  EXPECT_EQ(only_metadata.metadata.at("a"), "b");
  EXPECT_EQ(to_bytes(torch::OrderedDict<std::string, torch::Tensor>()), make_file("{}      "));
}

} // namespace
