#include "io/torch_save_reader.h"

#include "detail/checks.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>

namespace posenc {
namespace detail {

namespace {

// Limits that keep a hostile file from asking for absurd work before any data backs it.
constexpr size_t kMaxStackDepth = size_t{1} << 20;
constexpr int64_t kMaxDims = 64;

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// A pickled object, as far as a state dict needs to understand it.
struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kOpaque
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string text; // string contents, "module.name" of a global, or an opaque object's class
  std::vector<ValuePtr> items;                        // tuple or list
  std::vector<std::pair<ValuePtr, ValuePtr>> entries; // dict
  at::Tensor tensor;                                  // storage (1-D, its dtype) or tensor
};

ValuePtr make_value(Value::Kind kind) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  return value;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kGlobal:
      return "global";
    case Value::Kind::kStorage:
      return "storage";
    case Value::Kind::kTensor:
      return "Tensor";
    case Value::Kind::kOpaque:
      return "object";
  }
  return "?";
}

at::ScalarType storage_dtype(const std::string& global, const std::string& what) {
  static const std::map<std::string, at::ScalarType> types = {
      {"torch.FloatStorage", at::kFloat},
      {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},
      {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},
      {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat},
      {"torch.ComplexDoubleStorage", at::kComplexDouble},
      {"torch.UntypedStorage", at::kByte}};
  const auto found = types.find(global);
  TORCH_CHECK(found != types.end(), what, ": unsupported storage type '", global, "'");
  return found->second;
}

class Unpickler {
 public:
  Unpickler(caffe2::serialize::PyTorchStreamReader& reader, std::string what, const char* data,
            size_t size)
      : reader_(reader), what_(std::move(what)), data_(data), size_(size) {}

  // A hostile pickle can make a list or dict hold itself (through the memo): a cycle of shared
  // pointers that would never be freed. Emptying every container made here breaks them all.
  ~Unpickler() {
    for (const ValuePtr& value : created_) {
      value->items.clear();
      value->entries.clear();
    }
  }
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  ValuePtr run() {
    while (true) {
      const size_t at = position_;
      const uint8_t opcode = read_u8();
      if (opcode == '.') { // STOP
        TORCH_CHECK(!stack_.empty(), what_, ": corrupted pickle: STOP on an empty stack");
        return stack_.back();
      }
      TORCH_CHECK(push_literal(opcode) || build_container(opcode) || follow_reference(opcode),
                  what_, ": unsupported pickle opcode 0x", std::hex, static_cast<int>(opcode),
                  std::dec, " at byte ", at, " of data.pkl; is this a file written by torch.save?");
    }
  }

 private:
  // The framing opcodes, MARK and the literal values (None, bools, numbers, strings).
  bool push_literal(uint8_t opcode) {
    switch (opcode) {
      case 0x80:
        read_u8();
        return true; // PROTO
      case 0x95:
        read_bytes(8);
        return true; // FRAME
      case '(':
        marks_.push_back(stack_.size());
        return true; // MARK
      case 'N':
        push(make(Value::Kind::kNone));
        return true;
      case 0x88:
        push_bool(true);
        return true; // NEWTRUE
      case 0x89:
        push_bool(false);
        return true; // NEWFALSE
      case 'K':
        push_int(read_u8());
        return true; // BININT1
      case 'M':
        push_int(read_le(2, false));
        return true; // BININT2
      case 'J':
        push_int(read_le(4, true));
        return true; // BININT
      case 0x8a: {   // LONG1
        const size_t n = read_u8();
        TORCH_CHECK(n <= 8, what_, ": integer of ", n, " bytes is out of range");
        push_int(n == 0 ? 0 : read_le(n, true));
        return true;
      }
      case 'G':
        push_float();
        return true; // BINFLOAT
      case 'X':
        push_string(read_le(4, false));
        return true; // BINUNICODE
      case 0x8c:
        push_string(read_u8());
        return true; // SHORT_BINUNICODE
      case 0x8d:
        push_string(read_le(8, false));
        return true; // BINUNICODE8
      case 'T':
        push_string(read_le(4, false));
        return true; // BINSTRING
      case 'U':
        push_string(read_u8());
        return true; // SHORT_BINSTRING
      case 'B':
        push_string(read_le(4, false));
        return true; // BINBYTES
      case 'C':
        push_string(read_u8());
        return true; // SHORT_BINBYTES
      default:
        return false;
    }
  }

  // The opcodes that build tuples, lists and dicts.
  bool build_container(uint8_t opcode) {
    switch (opcode) {
      case ')':
        push(make(Value::Kind::kTuple));
        return true; // EMPTY_TUPLE
      case ']':
        push(make(Value::Kind::kList));
        return true; // EMPTY_LIST
      case '}':
        push(make(Value::Kind::kDict));
        return true; // EMPTY_DICT
      case 't':
        push_sequence(Value::Kind::kTuple, pop_to_mark());
        return true; // TUPLE
      case 'l':
        push_sequence(Value::Kind::kList, pop_to_mark());
        return true; // LIST
      case 0x85:
        push_sequence(Value::Kind::kTuple, pop_n(1));
        return true; // TUPLE1
      case 0x86:
        push_sequence(Value::Kind::kTuple, pop_n(2));
        return true; // TUPLE2
      case 0x87:
        push_sequence(Value::Kind::kTuple, pop_n(3));
        return true; // TUPLE3
      case 'd': {    // DICT
        auto dict = make(Value::Kind::kDict);
        add_pairs(*dict, pop_to_mark());
        push(dict);
        return true;
      }
      case 's': { // SETITEM
        auto pair = pop_n(2);
        add_pairs(top_of_kind(Value::Kind::kDict, "SETITEM"), pair);
        return true;
      }
      case 'u': { // SETITEMS
        auto items = pop_to_mark();
        add_pairs(top_of_kind(Value::Kind::kDict, "SETITEMS"), items);
        return true;
      }
      case 'a': { // APPEND
        auto item = pop_n(1);
        append(top_of_kind(Value::Kind::kList, "APPEND"), item);
        return true;
      }
      case 'e': { // APPENDS
        auto items = pop_to_mark();
        append(top_of_kind(Value::Kind::kList, "APPENDS"), items);
        return true;
      }
      default:
        return false;
    }
  }

  // The opcodes of the memo, globals, persistent ids (storages), objects and the stack.
  bool follow_reference(uint8_t opcode) {
    switch (opcode) {
      case 'q':
        memo_[read_u8()] = top();
        return true; // BINPUT
      case 'r':
        memo_[read_le(4, false)] = top();
        return true; // LONG_BINPUT
      case 0x94:
        memo_[next_memo_++] = top();
        return true; // MEMOIZE
      case 'h':
        push(memo(read_u8()));
        return true; // BINGET
      case 'j':
        push(memo(read_le(4, false)));
        return true; // LONG_BINGET
      case 'c': {    // GLOBAL
        std::string module = read_line();
        std::string name = read_line();
        push_global(module + "." + name);
        return true;
      }
      case 0x93: { // STACK_GLOBAL
        auto parts = pop_n(2);
        TORCH_CHECK(
            parts[0]->kind == Value::Kind::kString && parts[1]->kind == Value::Kind::kString, what_,
            ": corrupted pickle: STACK_GLOBAL needs two strings");
        push_global(parts[0]->text + "." + parts[1]->text);
        return true;
      }
      case 'Q':
        push(load_storage(pop_n(1)[0]));
        return true; // BINPERSID
      case 'R': {    // REDUCE
        auto parts = pop_n(2);
        push(reduce(parts[0], parts[1]));
        return true;
      }
      case 0x81: { // NEWOBJ
        auto parts = pop_n(2);
        push(opaque(parts[0]));
        return true;
      }
      case 'b':
        pop_n(1);
        top();
        return true; // BUILD: the state of an object we keep opaque (or an OrderedDict's metadata)
      case '0':
        pop_n(1);
        return true; // POP
      case '1':
        pop_to_mark();
        return true; // POP_MARK
      case '2':
        push(top());
        return true; // DUP
      default:
        return false;
    }
  }

  ValuePtr make(Value::Kind kind) {
    created_.push_back(make_value(kind));
    return created_.back();
  }

  // --- input ---------------------------------------------------------------------------------
  const char* read_bytes(size_t n) {
    TORCH_CHECK(n <= size_ - position_, what_, ": data.pkl is truncated (needs ", n,
                " more bytes at byte ", position_, " of ", size_, ")");
    const char* bytes = data_ + position_;
    position_ += n;
    return bytes;
  }
  uint8_t read_u8() {
    return static_cast<uint8_t>(*read_bytes(1));
  }
  int64_t read_le(size_t n, bool is_signed) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(read_bytes(n));
    uint64_t value = 0;
    for (size_t i = 0; i < n; ++i) {
      value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
    }
    if (is_signed && n < 8 && (bytes[n - 1] & 0x80)) {
      value |= ~uint64_t{0} << (8 * n); // sign-extend
    }
    if (!is_signed && n == 8) {
      TORCH_CHECK(value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what_,
                  ": length out of range");
    }
    return static_cast<int64_t>(value);
  }
  std::string read_line() {
    const char* start = data_ + position_;
    const void* end = std::memchr(start, '\n', size_ - position_);
    TORCH_CHECK(end != nullptr, what_, ": data.pkl is truncated (unterminated GLOBAL)");
    const size_t n = static_cast<size_t>(static_cast<const char*>(end) - start);
    position_ += n + 1;
    return std::string(start, n);
  }

  // --- stack ---------------------------------------------------------------------------------
  void push(ValuePtr value) {
    TORCH_CHECK(stack_.size() < kMaxStackDepth, what_, ": pickle stack deeper than ",
                kMaxStackDepth, " entries");
    stack_.push_back(std::move(value));
  }
  void push_bool(bool b) {
    auto value = make(Value::Kind::kBool);
    value->boolean = b;
    push(value);
  }
  void push_int(int64_t i) {
    auto value = make(Value::Kind::kInt);
    value->integer = i;
    push(value);
  }
  void push_float() {
    const auto* bytes = reinterpret_cast<const uint8_t*>(read_bytes(8));
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) {
      bits = (bits << 8) | bytes[i]; // big-endian
    }
    auto value = make(Value::Kind::kFloat);
    std::memcpy(&value->real, &bits, sizeof(bits));
    push(value);
  }
  void push_string(int64_t n) {
    TORCH_CHECK(n >= 0, what_, ": negative string length");
    auto value = make(Value::Kind::kString);
    value->text.assign(read_bytes(static_cast<size_t>(n)), static_cast<size_t>(n));
    push(value);
  }
  void push_global(std::string name) {
    auto value = make(Value::Kind::kGlobal);
    value->text = std::move(name);
    push(value);
  }
  void push_sequence(Value::Kind kind, std::vector<ValuePtr> items) {
    auto value = make(kind);
    value->items = std::move(items);
    push(value);
  }
  const ValuePtr& top() {
    TORCH_CHECK(!stack_.empty(), what_, ": corrupted pickle: the stack is empty");
    return stack_.back();
  }
  Value& top_of_kind(Value::Kind kind, const char* opcode) {
    const ValuePtr& value = top();
    TORCH_CHECK(value->kind == kind, what_, ": corrupted pickle: ", opcode, " on a ",
                kind_name(value->kind));
    return *value;
  }
  std::vector<ValuePtr> pop_n(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    TORCH_CHECK(stack_.size() >= floor + n, what_, ": corrupted pickle: stack underflow");
    std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return items;
  }
  std::vector<ValuePtr> pop_to_mark() {
    TORCH_CHECK(!marks_.empty(), what_, ": corrupted pickle: no MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    TORCH_CHECK(mark <= stack_.size(), what_, ": corrupted pickle: MARK past the stack");
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  ValuePtr memo(int64_t index) {
    const auto found = memo_.find(index);
    TORCH_CHECK(found != memo_.end(), what_, ": corrupted pickle: memo entry ", index,
                " is not defined");
    return found->second;
  }
  void add_pairs(Value& dict, const std::vector<ValuePtr>& items) {
    TORCH_CHECK(items.size() % 2 == 0, what_, ": corrupted pickle: odd number of dict items");
    for (size_t i = 0; i < items.size(); i += 2) {
      dict.entries.emplace_back(items[i], items[i + 1]);
    }
  }
  void append(Value& list, const std::vector<ValuePtr>& items) {
    list.items.insert(list.items.end(), items.begin(), items.end());
  }

  // --- objects -------------------------------------------------------------------------------
  ValuePtr opaque(const ValuePtr& callable) {
    auto value = make(Value::Kind::kOpaque);
    value->text =
        callable->kind == Value::Kind::kGlobal ? callable->text : kind_name(callable->kind);
    return value;
  }

  int64_t as_int(const ValuePtr& value, const char* what) {
    TORCH_CHECK(value->kind == Value::Kind::kInt, what_, ": expected an int for ", what, ", got ",
                kind_name(value->kind));
    return value->integer;
  }
  std::vector<int64_t> as_ints(const ValuePtr& value, const char* what) {
    TORCH_CHECK(value->kind == Value::Kind::kTuple || value->kind == Value::Kind::kList, what_,
                ": expected a tuple for ", what, ", got ", kind_name(value->kind));
    TORCH_CHECK(static_cast<int64_t>(value->items.size()) <= kMaxDims, what_,
                ": tensor of more than ", kMaxDims, " dimensions");
    std::vector<int64_t> ints;
    for (const auto& item : value->items) {
      ints.push_back(as_int(item, what));
    }
    return ints;
  }

  ValuePtr reduce(const ValuePtr& callable, const ValuePtr& args) {
    TORCH_CHECK(args->kind == Value::Kind::kTuple, what_,
                ": corrupted pickle: REDUCE arguments are a ", kind_name(args->kind));
    const std::string name = callable->kind == Value::Kind::kGlobal ? callable->text : "";
    if (name == "collections.OrderedDict") {
      auto dict = make(Value::Kind::kDict);
      if (!args->items.empty()) { // OrderedDict([(key, value), ...])
        for (const auto& pair : args->items[0]->items) {
          TORCH_CHECK(pair->items.size() == 2, what_,
                      ": corrupted pickle: OrderedDict item is not a pair");
          dict->entries.emplace_back(pair->items[0], pair->items[1]);
        }
      }
      return dict;
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      return rebuild_tensor(args->items);
    }
    if (name ==
        "torch.jit._pickle.restore_type_tag") { // LibTorch's pickle_save wraps typed containers
      TORCH_CHECK(!args->items.empty(), what_,
                  ": corrupted pickle: restore_type_tag without a value");
      return args->items[0];
    }
    if (name == "torch._utils._rebuild_parameter" ||
        name == "torch._utils._rebuild_parameter_with_state") {
      TORCH_CHECK(!args->items.empty() && args->items[0]->kind == Value::Kind::kTensor, what_,
                  ": corrupted pickle: parameter without data");
      return args->items[0];
    }
    return opaque(callable);
  }

  ValuePtr load_storage(const ValuePtr& pid) {
    TORCH_CHECK(pid->kind == Value::Kind::kTuple && pid->items.size() == 5 &&
                    pid->items[0]->kind == Value::Kind::kString &&
                    pid->items[0]->text == "storage" &&
                    pid->items[1]->kind == Value::Kind::kGlobal &&
                    pid->items[2]->kind == Value::Kind::kString,
                what_,
                ": unsupported persistent id in data.pkl (expected ('storage', type, key, "
                "location, numel))");
    const std::string& key = pid->items[2]->text;
    const auto cached = storages_.find(key);
    if (cached != storages_.end()) {
      return cached->second;
    }
    const at::ScalarType dtype = storage_dtype(pid->items[1]->text, what_);
    const int64_t numel = as_int(pid->items[4], "a storage size");
    const size_t itemsize = c10::elementSize(dtype);
    TORCH_CHECK(numel >= 0 &&
                    static_cast<uint64_t>(numel) <= std::numeric_limits<uint64_t>::max() / itemsize,
                what_, ": storage '", key, "' has an invalid size ", numel);
    const std::string record = "data/" + key;
    TORCH_CHECK(reader_.hasRecord(record), what_, ": storage '", key,
                "' is missing from the archive (the file is truncated or corrupted)");
    at::DataPtr bytes;
    size_t stored = 0;
    std::tie(bytes, stored) = reader_.getRecord(record);
    const size_t needed = static_cast<size_t>(numel) * itemsize;
    TORCH_CHECK(stored >= needed, what_, ": storage '", key, "' holds ", stored, " bytes, but ",
                numel, " elements of ", dtype, " need ", needed,
                " (the file is truncated or corrupted)");
    auto value = make(Value::Kind::kStorage);
    value->tensor = at::empty({numel}, at::TensorOptions().dtype(dtype));
    if (needed > 0) {
      std::memcpy(value->tensor.data_ptr(), bytes.get(), needed);
    }
    storages_[key] = value;
    return value;
  }

  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& args) {
    TORCH_CHECK(args.size() >= 4 && args[0]->kind == Value::Kind::kStorage, what_,
                ": corrupted pickle: bad tensor arguments");
    const at::Tensor& storage = args[0]->tensor;
    const int64_t offset = as_int(args[1], "a storage offset");
    const std::vector<int64_t> sizes = as_ints(args[2], "tensor sizes");
    const std::vector<int64_t> strides = as_ints(args[3], "tensor strides");
    TORCH_CHECK(sizes.size() == strides.size(), what_,
                ": tensor sizes and strides differ in length");
    TORCH_CHECK(offset >= 0, what_, ": negative storage offset ", offset);
    // The largest element index the view reaches must lie inside the storage.
    int64_t last = offset;
    bool empty = false;
    for (size_t d = 0; d < sizes.size(); ++d) {
      TORCH_CHECK(sizes[d] >= 0 && strides[d] >= 0, what_, ": negative tensor size or stride");
      empty = empty || sizes[d] == 0;
    }
    if (!empty) {
      for (size_t d = 0; d < sizes.size(); ++d) {
        int64_t step = 0;
        TORCH_CHECK(!__builtin_mul_overflow(sizes[d] - 1, strides[d], &step) &&
                        !__builtin_add_overflow(last, step, &last),
                    what_, ": tensor extent overflows");
      }
      TORCH_CHECK(last < storage.numel(), what_, ": tensor of sizes ", c10::IntArrayRef(sizes),
                  " and strides ", c10::IntArrayRef(strides), " at offset ", offset,
                  " reaches past its storage of ", storage.numel(), " elements");
      // It is copied whole: a view that repeats its storage's elements (stride 0, an expand) may
      // not make more than posenc's limit of elements out of fewer.
      int64_t elements = 1;
      for (const int64_t size : sizes) {
        TORCH_CHECK(!__builtin_mul_overflow(elements, size, &elements), what_, ": tensor of sizes ",
                    c10::IntArrayRef(sizes),
                    " has more elements than int64 "
                    "can count");
      }
      TORCH_CHECK(elements <= storage.numel() || elements <= detail::kMaxTableElements, what_,
                  ": tensor of sizes ", c10::IntArrayRef(sizes), " repeats the ", storage.numel(),
                  " elements of its storage into ", elements,
                  ", over posenc's limit of 2^28 elements for such views; save it with .clone() "
                  "or .contiguous()");
    }
    auto value = make(Value::Kind::kTensor);
    value->tensor =
        storage.as_strided(sizes, strides, empty ? 0 : offset).clone(at::MemoryFormat::Contiguous);
    return value;
  }

  caffe2::serialize::PyTorchStreamReader& reader_;
  std::string what_;
  const char* data_;
  size_t size_;
  size_t position_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<ValuePtr> created_; // every value made here, emptied by the destructor
  std::vector<size_t> marks_;
  std::unordered_map<int64_t, ValuePtr> memo_;
  int64_t next_memo_ = 0;
  std::unordered_map<std::string, ValuePtr> storages_;
};

std::vector<std::pair<std::string, at::Tensor>> read_archive(
    caffe2::serialize::PyTorchStreamReader& reader, const std::string& what) {
  if (reader.hasRecord("byteorder")) {
    at::DataPtr order;
    size_t n = 0;
    std::tie(order, n) = reader.getRecord("byteorder");
    const std::string byteorder(static_cast<const char*>(order.get()), n);
    TORCH_CHECK(byteorder == "little", what, ": saved on a ", byteorder,
                "-endian machine; only little-endian files are supported");
  }
  TORCH_CHECK(reader.hasRecord("data.pkl"), what,
              ": the archive has no data.pkl; it was not written by torch.save");
  at::DataPtr pickle;
  size_t size = 0;
  std::tie(pickle, size) = reader.getRecord("data.pkl");
  Unpickler unpickler(reader, what, static_cast<const char*>(pickle.get()), size);
  const ValuePtr root = unpickler.run();
  TORCH_CHECK(root->kind == Value::Kind::kDict, what, " holds a ",
              kind_name(root->kind) == std::string("object") ? root->text : kind_name(root->kind),
              ", not a state dict; save it in Python with torch.save(model.state_dict(), path)");
  std::vector<std::pair<std::string, at::Tensor>> entries;
  std::map<std::string, bool> seen;
  for (const auto& entry : root->entries) {
    TORCH_CHECK(entry.first->kind == Value::Kind::kString, what, ": has a key of type ",
                kind_name(entry.first->kind), "; a state dict maps names (str) to tensors");
    const std::string& key = entry.first->text;
    TORCH_CHECK(entry.second->kind == Value::Kind::kTensor, what, ": the entry '", key, "' is a ",
                entry.second->kind == Value::Kind::kOpaque ? entry.second->text
                                                           : kind_name(entry.second->kind),
                ", not a tensor");
    TORCH_CHECK(seen.emplace(key, true).second, what, ": the key '", key, "' appears twice");
    entries.emplace_back(key, entry.second->tensor);
  }
  return entries;
}

template <typename Source>
std::vector<std::pair<std::string, at::Tensor>> read_from(Source&& source,
                                                          const std::string& what) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::forward<Source>(source));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, what, " is not a readable torch.save file (", e.what_without_backtrace(),
                "); save it in Python with torch.save(model.state_dict(), path) (PyTorch >= 1.6 "
                "writes this zip format by default)");
  }
  return read_archive(*reader, what);
}

} // namespace

std::vector<std::pair<std::string, at::Tensor>> read_torch_save_state_dict(
    std::istream& in, const std::string& what) {
  return read_from(&in, what);
}

std::vector<std::pair<std::string, at::Tensor>> read_torch_save_state_dict(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "load_state_dict: cannot open '", path,
              "' for reading; check the path and its permissions");
  return read_from(&in, "load_state_dict: '" + path + "'");
}

} // namespace detail
} // namespace posenc
