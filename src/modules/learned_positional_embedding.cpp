#include <posenc/modules/learned_positional_embedding.h>

#include "detail/checks.h"
#include "detail/print_options.h"
#include "ops/common/module_options.h"
#include "ops/sequence/module.h"

#include <torch/nn/init.h>
#include <torch/utils.h>

#include <c10/util/Exception.h>

namespace posenc {

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
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
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

std::vector<detail::TableSlot> LearnedPositionalEmbeddingImpl::table_slots() {
  return {{"weight", &weight, {options.max_len(), options.d_model()}, /*is_buffer=*/false}};
}

void LearnedPositionalEmbeddingImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor LearnedPositionalEmbeddingImpl::forward_at(const torch::Tensor& x, int64_t offset,
                                                         const torch::Tensor& positions) {
  return ops::sequence_module_forward(ops::sequence_module_call(kName, options), x, weight,
                                      /*columns=*/torch::Tensor(), offset, positions, is_training(),
                                      options.inplace());
}

} // namespace posenc
