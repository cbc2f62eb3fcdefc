#include <posenc/functional/token_and_position_embedding.h>
#include <posenc/ops.h>

#include "detail/checks.h"

#include <tuple>

namespace posenc {
namespace functional {
namespace detail {

namespace pd = posenc::detail;

at::Tensor token_and_position_embedding(const at::Tensor& tokens, const at::Tensor& weight,
                                        const at::Tensor& table, int64_t offset,
                                        const at::Tensor& positions, bool batch_first, double scale,
                                        int64_t padding_idx, double dropout, bool training,
                                        const at::Tensor& columns) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "token_and_position_embedding");
  return std::get<0>(ops::token_and_position_embedding(
      tokens, weight, table, offset, batch_first,
      positions.defined() ? c10::optional<at::Tensor>(positions) : c10::nullopt, scale, padding_idx,
      dropout, training, columns.defined() ? c10::optional<at::Tensor>(columns) : c10::nullopt));
}

} // namespace detail
} // namespace functional
} // namespace posenc
