#pragma once

/// The plumbing every posenc module shares, written once (as LibTorch keeps shared module code in
/// CRTP bases such as `torch::nn::detail::_DropoutNd` and `NormImplBase`): the forward trio
/// (offset, explicit positions, padding mask), `to()` for tables that are functions of the
/// options, and `load()` that checks every tensor before writing any.
///
/// A module `FooImpl` derives from `EncodingModule<FooImpl>` (or `SequenceEncodingModule<FooImpl>`
/// for `[B, L, D]` inputs, which adds `forward_padded`) and provides
///
///   static constexpr const char* kName;                       // "Foo", prefixes its messages
///   torch::Tensor forward_at(const torch::Tensor& x,          // the forward, for positions
///                            int64_t offset,                   // offset .. offset + L - 1 or the
///                            const torch::Tensor& positions);  // explicit ones (when defined)
///   std::vector<detail::TableSlot> table_slots();              // what load() reads (may be empty)
///   static constexpr bool kDerivedTables;                      // tables computed from options?
///   void build_tables(torch::Dtype, torch::Device);            // (then) recompute them
///
/// `forward_at`, `table_slots` and `build_tables` may be private with
/// `friend class detail::EncodingModule<FooImpl>;`.

#include <posenc/functional/positions.h>

#include <c10/util/Optional.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/common.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace posenc {
namespace detail {

/// A tensor of a module that `load()` reads: its name in the archive, the member, its expected
/// shape, and whether it is a buffer (else a parameter).
struct TableSlot {
  /// The tensor's key in the archive (e.g. "pe", "weight").
  std::string name;
  /// The module's member the tensor is written to.
  torch::Tensor* member;
  /// The shape the archived tensor must have.
  std::vector<int64_t> shape;
  /// `true` for a buffer, `false` for a parameter.
  bool is_buffer;
};

/// Reads every slot from `archive` and checks its shape, floating dtype and finite values; only
/// when all pass are the members overwritten (in their own dtype and device), so a bad checkpoint
/// leaves the module unchanged. Messages name `module` (the module's kName).
void load_slots(const char* module, torch::serialize::InputArchive& archive,
                const std::vector<TableSlot>& slots);

/// The dtype a derived table (sinusoidal `pe`, rotary `cos`/`sin`) takes when the module is cast to
/// `requested`: float64 stays float64, everything else float32, so a table is never stored in 16
/// bits. Checks that `requested` is one of the four float dtypes (for a caller that named itself
/// in posenc's CallerScope, as move_derived_tables does).
c10::ScalarType derived_table_dtype(c10::optional<c10::ScalarType> requested,
                                    c10::ScalarType current);

/// Registers `value` as the buffer `name` of `module`, or, when the buffer exists (a second
/// reset()), replaces its data so that the member and named_buffers() stay one tensor.
void set_buffer(torch::nn::Module& module, const std::string& name, torch::Tensor& member,
                torch::Tensor value);

/// Moves and casts derived `tables` (all of one dtype) for `to()`: float64, or another device,
/// recomputes them through `rebuild` (widening float32 would only append zero bits; a move takes
/// the definition the tables come from along), anything else casts. Messages name `module`.
void move_derived_tables(const char* module, const std::vector<torch::Tensor*>& tables,
                         c10::optional<torch::Device> device, c10::optional<torch::Dtype> dtype,
                         bool non_blocking,
                         const std::function<void(torch::Dtype, torch::Device)>& rebuild);

/// Checks that forward_positions got positions; `consecutive` names the forward for consecutive
/// ones, e.g. "forward(x, offset)"; the message names `module`.
void check_positions_given(const char* module, const torch::Tensor& positions,
                           const char* consecutive);

/// The base of posenc's modules: `forward(x, offset)`, `forward_positions(x, positions)`, `load`,
/// and `to` for derived tables.
template <typename Derived>
class EncodingModule : public torch::nn::Cloneable<Derived> {
 public:
  /// The forward for positions `offset .. offset + L - 1`.
  torch::Tensor forward(const torch::Tensor& x, int64_t offset = 0) {
    return derived().forward_at(x, offset, torch::Tensor());
  }

  /// The forward for explicit positions: an integer tensor `[L]` (shared by the batch) or one
  /// position per sequence element; -1 marks padding. Reading their range synchronizes with a GPU
  /// (once per call).
  torch::Tensor forward_positions(const torch::Tensor& x, const torch::Tensor& positions) {
    check_positions_given(Derived::kName, positions, "forward(x, offset)");
    return derived().forward_at(x, 0, positions);
  }

  /// Loads the module's tensors from an archive written by `torch::save`, checking shapes, dtypes
  /// and values first: on any mismatch a `c10::Error` is thrown and the module is left unchanged.
  void load(torch::serialize::InputArchive& archive) override {
    const std::vector<TableSlot> slots = derived().table_slots();
    if (slots.empty()) {
      torch::nn::Module::load(archive);
      return;
    }
    load_slots(Derived::kName, archive, slots);
  }

  /// Moves and casts like `torch::nn::Module::to`; tables computed from the options are kept in at
  /// least float32 (float64 recomputes them in float64, float16/bfloat16 leave them in float32).
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override {
    to_impl(device, dtype, non_blocking);
  }
  /// Casts like `torch::nn::Module::to(dtype)`, keeping the device; derived tables as above.
  void to(torch::Dtype dtype, bool non_blocking = false) override {
    to_impl(c10::nullopt, dtype, non_blocking);
  }
  /// Moves like `torch::nn::Module::to(device)`, keeping the dtype; derived tables are recomputed
  /// there when the device changes.
  void to(torch::Device device, bool non_blocking = false) override {
    to_impl(device, c10::nullopt, non_blocking);
  }

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(int64_t{0})})

  /// Internal (CRTP): this module as its `Derived` type, for the calls into the derived class.
  Derived& derived() {
    return static_cast<Derived&>(*this);
  }

 private:
  void to_impl(c10::optional<torch::Device> device, c10::optional<torch::Dtype> dtype,
               bool non_blocking) {
    if (!Derived::kDerivedTables) {
      if (device && dtype) {
        torch::nn::Module::to(*device, *dtype, non_blocking);
      } else if (dtype) {
        torch::nn::Module::to(*dtype, non_blocking);
      } else {
        torch::nn::Module::to(*device, non_blocking);
      }
      return;
    }
    move_derived_tables(Derived::kName, derived().derived_tables(), device, dtype, non_blocking,
                        [this](torch::Dtype table_dtype, torch::Device table_device) {
                          derived().build_tables(table_dtype, table_device);
                        });
  }
};

/// The base of modules whose inputs are sequences `[B, L, D]` / `[L, B, D]`: adds
/// `forward_padded`.
template <typename Derived>
class SequenceEncodingModule : public EncodingModule<Derived> {
 public:
  /// The forward for positions counted from the first real token of each sequence; padding (`true`
  /// in `padding_mask`, shaped like the first two dimensions of `x`) gets a zero vector, as in
  /// fairseq. Correct for left and right padding. See `functional::positions_from_padding_mask`.
  torch::Tensor forward_padded(const torch::Tensor& x, const torch::Tensor& padding_mask) {
    Derived& self = this->derived();
    return self.forward_at(
        x, 0, functional::positions_from_padding_mask(padding_mask, self.options.batch_first()));
  }
};

} // namespace detail
} // namespace posenc
