#include <posenc/functional/rotary_embedding.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "detail/rotary.h"

#include <ATen/ops/arange.h>

namespace posenc {
namespace functional {

std::pair<at::Tensor, at::Tensor> rotary_tables(int64_t max_len,
                                                int64_t rotary_dim,
                                                const RotaryTablesFuncOptions& options) {
  constexpr const char* who = "rotary_tables";
  posenc::detail::check_rotary_arguments(who, max_len, rotary_dim, options.base());
  posenc::detail::check_float_dtype(who, "dtype", options.dtype());
  const auto positions = at::arange(max_len, at::TensorOptions().dtype(at::kLong));
  auto tables = posenc::detail::rotary_rows(positions, rotary_dim, options.base(), options.dtype());
  return {tables.first.to(options.device()), tables.second.to(options.device())};
}

at::Tensor rotary_embedding(const at::Tensor& x,
                            const at::Tensor& cos,
                            const at::Tensor& sin,
                            const RotaryEmbeddingFuncOptions& options) {
  return ops::apply_rotary(
      x,
      cos,
      sin,
      options.offset(),
      options.positions().defined() ? c10::optional<at::Tensor>(options.positions()) : c10::nullopt,
      options.pairing() == RotaryPairing::kInterleaved,
      options.heads_first(),
      /*inverse=*/false);
}

} // namespace functional
} // namespace posenc
