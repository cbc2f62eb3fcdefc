#include <posenc/functional/positions.h>
#include <posenc/modules/token_and_position_embedding.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "detail/module_support.h"
#include "detail/sinusoidal.h"

#include <ATen/ops/aminmax.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <ios>
#include <string>
#include <tuple>

namespace posenc {

namespace {
constexpr const char* kWho = "TokenAndPositionEmbedding";

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
                                                                   int64_t d_model,
                                                                   int64_t max_len)
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
  TORCH_CHECK(
      options.vocab_size() >= 1, kWho, ": vocab_size must be >= 1, but got ", options.vocab_size());
  TORCH_CHECK(options.d_model() >= 1, kWho, ": d_model must be >= 1, but got ", options.d_model());
  TORCH_CHECK(
      options.vocab_size() <= detail::kMaxTableElements / options.d_model(),
      kWho,
      ": a token table of vocab_size * d_model = ",
      options.vocab_size(),
      " * ",
      options.d_model(),
      " elements is over posenc's limit of 2^28 elements (1 GiB in float32); lower vocab_size");
  TORCH_CHECK(
      std::isfinite(options.scale()), kWho, ": scale must be finite, but got ", options.scale());
  if (options.padding_idx()) {
    const int64_t pad = *options.padding_idx();
    TORCH_CHECK(pad >= 0 && pad < options.vocab_size(),
                kWho,
                ": padding_idx must be in [0, vocab_size) = [0, ",
                options.vocab_size(),
                "), but got ",
                pad);
  }
  TORCH_CHECK(options.positions() == PositionKind::kSinusoidal ||
                  options.beyond_max_len() == BeyondMaxLen::kError,
              kWho,
              ": learned positions cannot extrapolate past max_len; use PositionKind::kSinusoidal "
              "or BeyondMaxLen::kError");
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
  stream << std::boolalpha
         << "posenc::TokenAndPositionEmbedding(vocab_size=" << options.vocab_size()
         << ", d_model=" << options.d_model() << ", max_len=" << options.max_len()
         << ", positions=" << options.positions() << ", scale=" << options.scale();
  if (options.padding_idx()) {
    stream << ", padding_idx=" << *options.padding_idx();
  }
  stream << ", dropout=" << options.dropout() << ", batch_first=" << options.batch_first() << ")";
}

void TokenAndPositionEmbeddingImpl::check_ids(const torch::Tensor& ids) const {
  const char* layout =
      options.batch_first() ? "[B, L] (batch_first=true)" : "[L, B] (batch_first=false)";
  TORCH_CHECK(ids.defined(),
              kWho,
              ": expected token ids of shape ",
              layout,
              ", but got an undefined tensor");
  TORCH_CHECK(ids.dim() == 2,
              kWho,
              ": expected token ids of shape ",
              layout,
              ", but got a ",
              ids.dim(),
              "-D tensor of shape ",
              ids.sizes());
  TORCH_CHECK(at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
              kWho,
              ": expected integer token ids, but got ",
              ids.scalar_type());
  const torch::Tensor& weight = tokens->weight;
  TORCH_CHECK(ids.device() == weight.device(),
              kWho,
              ": expected the token ids on the module's device (",
              weight.device(),
              "), but got ",
              ids.device());
  if (ids.numel() > 0) {
    torch::Tensor low;
    torch::Tensor high;
    std::tie(low, high) = at::aminmax(ids);
    const int64_t smallest = low.item<int64_t>();
    const int64_t largest = high.item<int64_t>();
    TORCH_CHECK(smallest >= 0 && largest < options.vocab_size(),
                kWho,
                ": token ids must lie in [0, vocab_size) = [0, ",
                options.vocab_size(),
                "), but got ids from ",
                smallest,
                " to ",
                largest);
  }
}

torch::Tensor TokenAndPositionEmbeddingImpl::run(const torch::Tensor& ids,
                                                 int64_t offset,
                                                 const torch::Tensor& positions) {
  check_ids(ids);
  const torch::Tensor long_ids = ids.to(torch::kLong);
  const torch::Tensor& table = sinusoidal ? sinusoidal->pe : learned->weight;
  const int64_t length = ids.size(options.batch_first() ? 1 : 0);
  // Positions past the table can only be extrapolated by the sinusoidal submodule.
  bool past_table = false;
  if (sinusoidal && options.beyond_max_len() == BeyondMaxLen::kExtrapolate) {
    past_table = positions.defined()
                     ? positions.numel() > 0 && positions.max().item<int64_t>() >= options.max_len()
                     : offset > options.max_len() - length;
  }
  if (past_table) {
    const torch::Tensor embedded = tokens(long_ids);
    return positions.defined() ? sinusoidal->forward_positions(embedded, positions)
                               : sinusoidal(embedded, offset);
  }
  const c10::optional<torch::Tensor> given =
      positions.defined() ? c10::optional<torch::Tensor>(positions) : c10::nullopt;
  return std::get<0>(ops::token_and_position_embedding(long_ids,
                                                       tokens->weight,
                                                       table,
                                                       offset,
                                                       options.batch_first(),
                                                       given,
                                                       options.scale(),
                                                       options.padding_idx().value_or(-1),
                                                       options.dropout(),
                                                       is_training()));
}

torch::Tensor TokenAndPositionEmbeddingImpl::forward(const torch::Tensor& ids, int64_t offset) {
  if (!options.padding_idx()) {
    return run(ids, offset, torch::Tensor());
  }
  TORCH_CHECK(
      offset >= 0, kWho, ": offset must be >= 0, but got ", offset, "; positions start at 0");
  check_ids(ids);
  torch::Tensor positions =
      functional::positions_from_tokens(ids, *options.padding_idx(), options.batch_first());
  if (offset != 0) {
    positions = positions.where(positions.lt(0), positions + offset);
  }
  return run(ids, 0, positions);
}

torch::Tensor TokenAndPositionEmbeddingImpl::forward_positions(const torch::Tensor& ids,
                                                               const torch::Tensor& positions) {
  TORCH_CHECK(positions.defined(),
              kWho,
              ": forward_positions needs positions; use forward(ids, offset) for consecutive ones");
  return run(ids, 0, positions);
}

namespace functional {

at::Tensor token_and_position_embedding(const at::Tensor& tokens,
                                        const at::Tensor& weight,
                                        const at::Tensor& table,
                                        const TokenAndPositionEmbeddingFuncOptions& options) {
  const c10::optional<at::Tensor> given =
      options.positions().defined() ? c10::optional<at::Tensor>(options.positions()) : c10::nullopt;
  return std::get<0>(ops::token_and_position_embedding(tokens,
                                                       weight,
                                                       table,
                                                       options.offset(),
                                                       options.batch_first(),
                                                       given,
                                                       options.scale(),
                                                       options.padding_idx(),
                                                       options.dropout(),
                                                       options.training()));
}

} // namespace functional
} // namespace posenc
