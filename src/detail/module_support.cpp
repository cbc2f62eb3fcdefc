#include "detail/module_support.h"

#include "detail/checks.h"

#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <sstream>
#include <utility>

namespace posenc {
namespace detail {

c10::ScalarType derived_table_dtype(const char* who,
                                    c10::optional<c10::ScalarType> requested,
                                    c10::ScalarType current) {
  if (!requested) {
    return current;
  }
  check_float_dtype(who, "the dtype passed to to()", *requested);
  return *requested == c10::kDouble ? c10::kDouble : c10::kFloat;
}

void set_buffer(torch::nn::Module& module,
                const std::string& name,
                at::Tensor& member,
                at::Tensor value) {
  if (module.named_buffers(/*recurse=*/false).contains(name)) {
    torch::NoGradGuard no_grad;
    member.set_data(value);
  } else {
    member = module.register_buffer(name, std::move(value));
  }
}

at::Tensor read_checked(const char* who,
                        torch::serialize::InputArchive& archive,
                        const std::string& name,
                        const std::vector<int64_t>& expected,
                        bool is_buffer) {
  at::Tensor loaded;
  archive.read(name, loaded, is_buffer);
  TORCH_CHECK(loaded.sizes() == at::IntArrayRef(expected),
              who,
              ": the checkpoint's ",
              name,
              " has shape ",
              loaded.sizes(),
              ", but this module's is ",
              at::IntArrayRef(expected),
              "; build the module with the options the checkpoint was saved with");
  check_float_dtype(who, ("the checkpoint's " + name + " dtype").c_str(), loaded.scalar_type());
  torch::NoGradGuard no_grad;
  TORCH_CHECK(loaded.numel() == 0 || loaded.isfinite().all().item<bool>(),
              who,
              ": the checkpoint's ",
              name,
              " holds NaN or infinite values; the file is corrupted");
  return loaded;
}

std::string non_default(const char* name, double value, double fallback) {
  if (value == fallback) {
    return "";
  }
  std::ostringstream out;
  out << ", " << name << "=" << value;
  return out.str();
}

} // namespace detail
} // namespace posenc
