#include <posenc/functional/positions.h>
#include <posenc/modules/learned_positional_embedding.h>

#include "detail/checks.h"
#include "detail/module_support.h"
#include "detail/positional_encoding.h"
#include "detail/sinusoidal.h"

#include <torch/nn/init.h>
#include <torch/utils.h>

#include <c10/util/Exception.h>

#include <cmath>
#include <ios>

namespace posenc {

namespace {
constexpr const char* kWho = "LearnedPositionalEmbedding";
} // namespace

LearnedPositionalEmbeddingOptions::LearnedPositionalEmbeddingOptions(int64_t d_model,
                                                                     int64_t max_len)
    : d_model_(d_model), max_len_(max_len) {}

LearnedPositionalEmbeddingImpl::LearnedPositionalEmbeddingImpl(
    const LearnedPositionalEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void LearnedPositionalEmbeddingImpl::reset() {
  detail::check_table_arguments(kWho, options.max_len(), options.d_model(), /*base=*/1.0);
  detail::check_dropout(kWho, options.dropout());
  TORCH_CHECK(std::isfinite(options.init_std()) && options.init_std() >= 0,
              kWho,
              ": init_std must be finite and >= 0, but got ",
              options.init_std());
  TORCH_CHECK(
      std::isfinite(options.scale()), kWho, ": scale must be finite, but got ", options.scale());
  if (named_parameters(/*recurse=*/false).contains("weight")) {
    torch::NoGradGuard no_grad;
    weight.set_data(torch::empty({options.max_len(), options.d_model()}, weight.options()));
  } else {
    weight = register_parameter("weight", torch::empty({options.max_len(), options.d_model()}));
  }
  reset_parameters();
}

void LearnedPositionalEmbeddingImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(weight, 0.0, options.init_std());
}

void LearnedPositionalEmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "posenc::LearnedPositionalEmbedding(d_model=" << options.d_model()
         << ", max_len=" << options.max_len() << ", dropout=" << options.dropout()
         << ", batch_first=" << options.batch_first()
         << detail::non_default("scale", options.scale(), 1.0)
         << (options.inplace() ? ", inplace=true" : "") << ")";
}

torch::Tensor LearnedPositionalEmbeddingImpl::forward_impl(const torch::Tensor& x,
                                                           int64_t offset,
                                                           const torch::Tensor& positions) {
  const torch::Tensor out = detail::table_forward(kWho,
                                                  x,
                                                  weight,
                                                  offset,
                                                  positions,
                                                  options.batch_first(),
                                                  options.scale(),
                                                  {},
                                                  options.inplace());
  return detail::apply_dropout(out, options.dropout(), is_training(), options.inplace());
}

torch::Tensor LearnedPositionalEmbeddingImpl::forward(const torch::Tensor& x, int64_t offset) {
  return forward_impl(x, offset, torch::Tensor());
}

torch::Tensor LearnedPositionalEmbeddingImpl::forward_positions(const torch::Tensor& x,
                                                                const torch::Tensor& positions) {
  TORCH_CHECK(positions.defined(),
              kWho,
              ": forward_positions needs positions; use forward(x, offset) for consecutive ones");
  return forward_impl(x, 0, positions);
}

torch::Tensor LearnedPositionalEmbeddingImpl::forward_padded(const torch::Tensor& x,
                                                             const torch::Tensor& padding_mask) {
  return forward_impl(
      x, 0, functional::positions_from_padding_mask(padding_mask, options.batch_first()));
}

void LearnedPositionalEmbeddingImpl::load(torch::serialize::InputArchive& archive) {
  const torch::Tensor loaded = detail::read_checked(
      kWho, archive, "weight", {options.max_len(), options.d_model()}, /*is_buffer=*/false);
  torch::NoGradGuard no_grad;
  weight.set_data(loaded.to(weight.device(), weight.scalar_type()));
}

} // namespace posenc
