#include <posenc/modules/encoding_base.h>

#include "detail/checks.h"

#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <utility>

namespace posenc {
namespace detail {

void load_slots(const char* module, torch::serialize::InputArchive& archive,
                const std::vector<TableSlot>& slots) {
  const CallerScope scope(CallerScope::Rename{}, module);
  static constexpr CallerName who{};
  std::vector<torch::Tensor> loaded(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const TableSlot& slot = slots[i];
    archive.read(slot.name, loaded[i], slot.is_buffer);
    TORCH_CHECK(loaded[i].sizes() == at::IntArrayRef(slot.shape), who, ": the checkpoint's ",
                slot.name, " has shape ", loaded[i].sizes(), ", but this module's is ",
                at::IntArrayRef(slot.shape),
                "; build the module with the options the checkpoint was saved with");
    check_float_dtype(("the checkpoint's " + slot.name + " dtype").c_str(),
                      loaded[i].scalar_type());
    torch::NoGradGuard no_grad;
    TORCH_CHECK(loaded[i].numel() == 0 || loaded[i].isfinite().all().item<bool>(), who,
                ": the checkpoint's ", slot.name,
                " holds NaN or infinite values; the file is corrupted");
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < slots.size(); ++i) {
    torch::Tensor& member = *slots[i].member;
    member.set_data(loaded[i].to(member.device(), member.scalar_type()));
  }
}

c10::ScalarType derived_table_dtype(c10::optional<c10::ScalarType> requested,
                                    c10::ScalarType current) {
  if (!requested) {
    return current;
  }
  check_float_dtype("the dtype passed to to()", *requested);
  return *requested == c10::kDouble ? c10::kDouble : c10::kFloat;
}

void set_buffer(torch::nn::Module& module, const std::string& name, torch::Tensor& member,
                torch::Tensor value) {
  if (module.named_buffers(/*recurse=*/false).contains(name)) {
    torch::NoGradGuard no_grad;
    member.set_data(value);
  } else {
    member = module.register_buffer(name, std::move(value));
  }
}

void move_derived_tables(const char* module, const std::vector<torch::Tensor*>& tables,
                         c10::optional<torch::Device> device, c10::optional<torch::Dtype> dtype,
                         bool non_blocking,
                         const std::function<void(torch::Dtype, torch::Device)>& rebuild) {
  const CallerScope scope(CallerScope::Rename{}, module);
  const torch::Tensor& first = *tables.front();
  const torch::Dtype target_dtype = derived_table_dtype(dtype, first.scalar_type());
  const torch::Device target_device = device.value_or(first.device());
  if (target_dtype == torch::kDouble && first.scalar_type() != torch::kDouble) {
    rebuild(torch::kDouble, target_device); // recompute in float64 rather than widen float32
    return;
  }
  if (target_device != first.device()) {
    // rebuilt on the device: the tables (the same values) and the definition they come from
    // (column plan, frequencies), which the operators take with them
    rebuild(target_dtype, target_device);
    return;
  }
  torch::NoGradGuard no_grad;
  for (torch::Tensor* table : tables) {
    table->set_data(table->to(target_device, target_dtype, non_blocking));
  }
}

void check_positions_given(const char* module, const torch::Tensor& positions,
                           const char* consecutive) {
  TORCH_CHECK(positions.defined(), module, ": forward_positions needs positions; use ", consecutive,
              " for consecutive ones");
}

} // namespace detail
} // namespace posenc
