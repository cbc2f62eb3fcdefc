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
  auto tables = pd::rotary_rows(positions, pd::rope_frequencies({rotary_dim, options.base()}),
                                options.dtype());
  return {tables.first.to(options.device()), tables.second.to(options.device())};
}

at::Tensor rotary_inv_freq(int64_t rotary_dim, const RotaryTablesFuncOptions& options) {
  pd::check_rotary_arguments("rotary_inv_freq", 1, rotary_dim, options.base());
  return at::tensor(pd::rope_frequencies({rotary_dim, options.base()}).inv_freq,
                    at::TensorOptions().dtype(at::kDouble));
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
