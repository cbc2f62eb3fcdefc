#include <posenc/modules/token_and_position_embedding.h>

#include "detail/checks.h"
#include "detail/print_options.h"
#include "ops/common/module_options.h"
#include "ops/sequence/module.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <string>
#include <tuple>

namespace posenc {

namespace {
constexpr const char* kWho = TokenAndPositionEmbeddingImpl::kName;

// register_module the first time, replace_module on a later reset().
template <typename Holder>
Holder put_module(torch::nn::Module& parent, const std::string& name, Holder child) {
  if (parent.named_children().contains(name)) {
    return parent.replace_module(name, child);
  }
  return parent.register_module(name, child);
}
} // namespace

TokenAndPositionEmbeddingOptions::TokenAndPositionEmbeddingOptions(int64_t vocab_size,
                                                                   int64_t d_model, int64_t max_len)
    : vocab_size_(vocab_size),
      d_model_(d_model),
      max_len_(max_len),
      scale_(std::sqrt(static_cast<double>(d_model))) {}

TokenAndPositionEmbeddingImpl::TokenAndPositionEmbeddingImpl(
    const TokenAndPositionEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void TokenAndPositionEmbeddingImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kWho);
  ops::check_options(options);
  // Build everything before registering anything, so that invalid options change nothing.
  torch::nn::EmbeddingOptions token_options(options.vocab_size(), options.d_model());
  if (options.padding_idx()) {
    token_options.padding_idx(*options.padding_idx());
  }
  torch::nn::Embedding new_tokens(token_options);
  PositionalEncoding new_sinusoidal{nullptr};
  LearnedPositionalEmbedding new_learned{nullptr};
  if (options.positions() == PositionKind::kSinusoidal) {
    new_sinusoidal =
        PositionalEncoding(PositionalEncodingOptions(options.d_model(), options.max_len())
                               .base(options.base())
                               .dropout(options.dropout())
                               .batch_first(options.batch_first())
                               .beyond_max_len(options.beyond_max_len())
                               .scale(options.scale()));
  } else {
    new_learned = LearnedPositionalEmbedding(
        LearnedPositionalEmbeddingOptions(options.d_model(), options.max_len())
            .dropout(options.dropout())
            .batch_first(options.batch_first())
            .scale(options.scale()));
  }
  tokens = put_module(*this, "tokens", new_tokens);
  if (new_sinusoidal) {
    sinusoidal = put_module(*this, "positions", new_sinusoidal);
    learned = nullptr;
  } else {
    learned = put_module(*this, "positions", new_learned);
    sinusoidal = nullptr;
  }
}

void TokenAndPositionEmbeddingImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor TokenAndPositionEmbeddingImpl::forward_at(const torch::Tensor& ids, int64_t offset,
                                                        const torch::Tensor& positions) {
  ops::SequenceModuleCall call = ops::sequence_module_call(
      kWho, options, sinusoidal && options.beyond_max_len() == BeyondMaxLen::kExtrapolate);
  call.padding_idx = options.padding_idx().value_or(-1);
  return ops::token_module_forward(
      call, ids, tokens->weight, sinusoidal ? sinusoidal->pe : learned->weight,
      sinusoidal ? sinusoidal->column_plan() : torch::Tensor(), offset, positions, is_training());
}

} // namespace posenc
