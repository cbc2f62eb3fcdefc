#include <posenc/modules/positional_encoding.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "detail/positional_encoding.h"
#include "detail/sinusoidal.h"

#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <c10/util/Exception.h>

#include <ios>
#include <utility>
#include <ostream>

namespace posenc {

namespace {
constexpr const char* kWho = "PositionalEncoding";
} // namespace

PositionalEncodingOptions::PositionalEncodingOptions(int64_t d_model, int64_t max_len)
    : d_model_(d_model), max_len_(max_len) {}

PositionalEncodingImpl::PositionalEncodingImpl(const PositionalEncodingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void PositionalEncodingImpl::reset() {
  detail::check_table_arguments(kWho, options.max_len(), options.d_model(), options.base());
  detail::check_dropout(kWho, options.dropout());
  // A reset() after .to() keeps the table's dtype and device.
  const auto dtype = pe.defined() ? pe.scalar_type() : torch::kFloat;
  const auto device = pe.defined() ? pe.device() : torch::Device(torch::kCPU);
  torch::Tensor table = build_table(dtype, device);
  if (named_buffers(/*recurse=*/false).contains("pe")) {
    // A second reset() (after the options changed): update the registered buffer in place, so
    // that `pe` and named_buffers()["pe"] stay one tensor.
    torch::NoGradGuard no_grad;
    pe.set_data(table);
  } else {
    pe = register_buffer("pe", std::move(table));
  }
}

torch::Tensor PositionalEncodingImpl::build_table(torch::Dtype dtype, torch::Device device) const {
  return functional::detail::sinusoidal_table(
             options.max_len(), options.d_model(), options.base(), /*offset=*/0, dtype, device)
      .unsqueeze(0);
}

void PositionalEncodingImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "posenc::PositionalEncoding(d_model=" << options.d_model()
         << ", max_len=" << options.max_len();
  if (options.base() != 10000.0) {
    stream << ", base=" << options.base();
  }
  stream << ", dropout=" << options.dropout() << ", batch_first=" << options.batch_first() << ")";
}

torch::Tensor PositionalEncodingImpl::forward(const torch::Tensor& x, int64_t offset) {
  const bool batch_first = options.batch_first();
  detail::check_sequence_input(kWho, x, options.d_model(), batch_first, pe.device());
  detail::check_offset(kWho, offset, x.size(batch_first ? 1 : 0), options.max_len());
  const torch::Tensor out = ops::add_position_table(x, pe, offset, batch_first);
  return detail::apply_dropout(out, options.dropout(), is_training());
}

void PositionalEncodingImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  to_impl(device, dtype, non_blocking);
}

void PositionalEncodingImpl::to(torch::Dtype dtype, bool non_blocking) {
  to_impl(c10::nullopt, dtype, non_blocking);
}

void PositionalEncodingImpl::to(torch::Device device, bool non_blocking) {
  to_impl(device, c10::nullopt, non_blocking);
}

void PositionalEncodingImpl::to_impl(
    c10::optional<torch::Device> device,
    c10::optional<torch::Dtype> dtype,
    bool non_blocking) {
  if (dtype) {
    detail::check_float_dtype(kWho, "the dtype passed to to()", *dtype);
  }
  // The table is never stored below float32: float16/bfloat16 would round every encoding to 11 or
  // 8 bits before the addition even happens.
  const torch::Dtype target_dtype = !dtype ? pe.scalar_type() : (*dtype == torch::kDouble ? torch::kDouble : torch::kFloat);
  const torch::Device target_device = device.value_or(pe.device());
  torch::NoGradGuard no_grad;
  torch::Tensor moved;
  if (target_dtype == torch::kDouble && pe.scalar_type() != torch::kDouble) {
    // Widening a float32 table would only append zero bits: recompute it in float64.
    moved = build_table(torch::kDouble, target_device);
  } else {
    moved = pe.to(target_device, target_dtype, non_blocking);
  }
  pe.set_data(moved);
}

void PositionalEncodingImpl::load(torch::serialize::InputArchive& archive) {
  torch::Tensor loaded;
  archive.read("pe", loaded, /*is_buffer=*/true);
  const std::vector<int64_t> expected = {1, options.max_len(), options.d_model()};
  TORCH_CHECK(
      loaded.sizes() == torch::IntArrayRef(expected),
      kWho, ": the checkpoint's pe has shape ", loaded.sizes(), ", but this module's is ",
      torch::IntArrayRef(expected),
      "; build the module with the d_model and max_len the checkpoint was saved with");
  detail::check_float_dtype(kWho, "the checkpoint's pe dtype", loaded.scalar_type());
  torch::NoGradGuard no_grad;
  TORCH_CHECK(
      loaded.isfinite().all().item<bool>(),
      kWho, ": the checkpoint's pe holds NaN or infinite values; the file is corrupted");
  pe.set_data(loaded.to(pe.device(), pe.scalar_type()));
}

} // namespace posenc
