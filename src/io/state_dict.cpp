#include <posenc/io/state_dict.h>

#include "detail/checks.h"
#include "io/assign_state_dict.h"
#include "io/torch_save_reader.h"

#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <map>
#include <sstream>
#include <utility>
#include <vector>

namespace posenc {

namespace {

// The file's entries as name -> tensor.
std::map<std::string, at::Tensor> read_state_dict(const std::string& path) {
  std::map<std::string, at::Tensor> entries;
  for (auto& entry : detail::read_torch_save_state_dict(path)) {
    entries.emplace(std::move(entry.first), std::move(entry.second));
  }
  return entries;
}

std::string join(const std::vector<std::string>& names) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size(); ++i) {
    out << (i == 0 ? "" : ", ") << "'" << names[i] << "'";
  }
  return out.str();
}

} // namespace

void load_state_dict(torch::nn::Module& module, const std::string& path,
                     const LoadStateDictOptions& options) {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, "load_state_dict");
  detail::assign_state_dict(module, read_state_dict(path), options, path);
}

namespace detail {

void assign_state_dict(torch::nn::Module& module, const std::map<std::string, at::Tensor>& entries,
                       const LoadStateDictOptions& options, const std::string& source) {
  static constexpr detail::CallerName who{};
  // The module's tensors, by the names Python uses.
  std::vector<std::pair<std::string, at::Tensor>> targets;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    targets.emplace_back(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    targets.emplace_back(item.key(), item.value());
  }

  // Check everything first, write afterwards: a failed load leaves the module as it was.
  std::vector<std::pair<at::Tensor, at::Tensor>> assignments;
  std::vector<std::string> missing;
  std::map<std::string, bool> used;
  for (const auto& target : targets) {
    const std::string key = options.prefix() + target.first;
    const auto found = entries.find(key);
    if (found == entries.end()) {
      missing.push_back(key);
      continue;
    }
    used[key] = true;
    const at::Tensor& value = found->second;
    const at::Tensor& destination = target.second;
    TORCH_CHECK(value.sizes() == destination.sizes(), who, ": size mismatch for '", key,
                "': the file has shape ", value.sizes(), ", the module has ", destination.sizes(),
                "; build the module with the options '", source, "' was saved with");
    if (destination.is_floating_point()) {
      TORCH_CHECK(value.is_floating_point(), who, ": dtype mismatch for '", key, "': the file has ",
                  value.scalar_type(), ", the module expects a floating dtype (it holds ",
                  destination.scalar_type(), "); check that '", source, "' belongs to this module");
      TORCH_CHECK(value.numel() == 0 || value.isfinite().all().item<bool>(), who, ": the entry '",
                  key, "' holds NaN or infinite values; the file '", source, "' is corrupted");
    } else {
      TORCH_CHECK(value.scalar_type() == destination.scalar_type(), who, ": dtype mismatch for '",
                  key, "': the file has ", value.scalar_type(), ", the module has ",
                  destination.scalar_type(), "; check that '", source, "' belongs to this module");
    }
    assignments.emplace_back(destination, value);
  }
  std::vector<std::string> unexpected;
  for (const auto& entry : entries) {
    const bool in_scope = entry.first.compare(0, options.prefix().size(), options.prefix()) == 0;
    if (in_scope && used.count(entry.first) == 0) {
      unexpected.push_back(entry.first);
    }
  }
  if (options.strict()) {
    TORCH_CHECK(missing.empty(), who, ": '", source, "' lacks ", join(missing),
                "; check LoadStateDictOptions::prefix (now '", options.prefix(),
                "') or pass strict(false)");
    TORCH_CHECK(unexpected.empty(), who, ": '", source,
                "' has entries the module does not: ", join(unexpected),
                "; check LoadStateDictOptions::prefix (now '", options.prefix(),
                "') or pass strict(false)");
  }

  torch::NoGradGuard no_grad;
  for (auto& assignment : assignments) {
    assignment.first.copy_(assignment.second);
  }
}

} // namespace detail

} // namespace posenc
