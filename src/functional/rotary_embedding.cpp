#include <posenc/functional/rotary_embedding.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "detail/rotary.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>

namespace posenc {
namespace functional {

namespace pd = posenc::detail;

std::pair<at::Tensor, at::Tensor> rotary_tables(int64_t max_len, int64_t rotary_dim,
                                                const RotaryTablesFuncOptions& options) {
  constexpr const char* who = "rotary_tables";
  pd::check_rotary_arguments(who, max_len, rotary_dim, options.base());
  pd::check_float_dtype(who, "dtype", options.dtype());
  const auto positions = at::arange(max_len, at::TensorOptions().dtype(at::kLong));
  auto tables = pd::rotary_rows(
      positions,
      pd::rope_frequencies(pd::rope_spec(rotary_dim, options, max_len), options.seq_len(), who),
      options.dtype());
  return {tables.first.to(options.device()), tables.second.to(options.device())};
}

namespace {
// The spec of the table-less functional forms: max_position_embeddings must be given where the
// variant reads it.
pd::RopeSpec spec_without_table(const char* who, int64_t rotary_dim,
                                const RotaryTablesFuncOptions& options) {
  pd::check_rotary_arguments(who, 1, rotary_dim, options.base());
  // dynamic reads max_position_embeddings; yarn/longrope/llama3 default their original length to
  // it, and yarn/longrope their factor to max / original.
  const RopeScalingOptions& scaling = options.scaling();
  const RopeType type = scaling.type();
  const bool extends_context =
      type == RopeType::kYarn || type == RopeType::kLongRope || type == RopeType::kLlama3;
  const bool implied_factor =
      (type == RopeType::kYarn || type == RopeType::kLongRope) && !scaling.factor();
  const bool reads_length = type == RopeType::kDynamic ||
                            (extends_context && !scaling.original_max_position_embeddings()) ||
                            implied_factor;
  TORCH_CHECK(!reads_length || scaling.max_position_embeddings(), who, ": rope type '",
              scaling.type(),
              "' reads the model's context length; set scaling.max_position_embeddings (and "
              "original_max_position_embeddings)");
  return pd::rope_spec(rotary_dim, options, scaling.max_position_embeddings().value_or(1));
}
} // namespace

at::Tensor rotary_inv_freq(int64_t rotary_dim, const RotaryTablesFuncOptions& options) {
  constexpr const char* who = "rotary_inv_freq";
  return at::tensor(
      pd::rope_frequencies(spec_without_table(who, rotary_dim, options), options.seq_len(), who)
          .inv_freq,
      at::TensorOptions().dtype(at::kDouble));
}

double rotary_attention_factor(int64_t rotary_dim, const RotaryTablesFuncOptions& options) {
  constexpr const char* who = "rotary_attention_factor";
  return pd::rope_frequencies(spec_without_table(who, rotary_dim, options), options.seq_len(), who)
      .variant_attention_factor;
}

namespace detail {

at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            int64_t offset, const at::Tensor& positions, RotaryPairing pairing,
                            bool heads_first, const at::Tensor& inv_freq, double attention_factor) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rotary_embedding");
  return ops::apply_rotary(
      x, cos, sin, offset,
      positions.defined() ? c10::optional<at::Tensor>(positions) : c10::nullopt,
      pairing == RotaryPairing::kInterleaved, heads_first,
      /*inverse=*/false, inv_freq.defined() ? c10::optional<at::Tensor>(inv_freq) : c10::nullopt,
      attention_factor);
}

} // namespace detail
} // namespace functional
} // namespace posenc
