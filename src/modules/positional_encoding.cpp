#include <posenc/modules/positional_encoding.h>

#include "detail/checks.h"
#include "detail/print_options.h"
#include "detail/sinusoidal.h"
#include "ops/common/module_options.h"
#include "ops/sequence/module.h"

#include <c10/util/Exception.h>

#include <ostream>

namespace posenc {

PositionalEncodingOptions::PositionalEncodingOptions(int64_t d_model, int64_t max_len)
    : d_model_(d_model), max_len_(max_len) {}

PositionalEncodingImpl::PositionalEncodingImpl(const PositionalEncodingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void PositionalEncodingImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
  // A reset() after .to() keeps the table's dtype and device.
  build_tables(pe.defined() ? pe.scalar_type() : torch::kFloat,
               pe.defined() ? pe.device() : torch::Device(torch::kCPU));
}

void PositionalEncodingImpl::build_tables(torch::Dtype dtype, torch::Device device) {
  const detail::SinusoidSpec spec = detail::sinusoid_spec(options);
  torch::Tensor columns = detail::column_plan_tensor(spec).to(device);
  detail::set_buffer(
      *this, "pe", pe,
      detail::sinusoidal_table(options.max_len(), /*offset=*/0, spec, dtype, device).unsqueeze(0));
  columns_ = std::move(columns); // on the table's device (passed with it), once the table is set
}

std::vector<torch::Tensor*> PositionalEncodingImpl::derived_tables() {
  return {&pe};
}

std::vector<detail::TableSlot> PositionalEncodingImpl::table_slots() {
  return {{"pe", &pe, {1, options.max_len(), options.d_model()}, /*is_buffer=*/true}};
}

void PositionalEncodingImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor PositionalEncodingImpl::forward_at(const torch::Tensor& x, int64_t offset,
                                                 const torch::Tensor& positions) {
  const bool extrapolate = options.beyond_max_len() == BeyondMaxLen::kExtrapolate;
  return ops::sequence_module_forward(ops::sequence_module_call(kName, options, extrapolate), x, pe,
                                      columns_, offset, positions, is_training(),
                                      options.inplace());
}

} // namespace posenc
