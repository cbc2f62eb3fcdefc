#include <posenc/functional/positional_encoding.h>
#include <posenc/functional/positions.h>

#include "detail/checks.h"
#include "detail/positional_encoding.h"

#include <c10/util/Exception.h>

namespace posenc {
namespace functional {

namespace detail {

at::Tensor positional_encoding(const at::Tensor& x,
                               const at::Tensor& table,
                               int64_t offset,
                               const at::Tensor& positions,
                               bool batch_first,
                               double scale,
                               double dropout,
                               bool training) {
  constexpr const char* who = "positional_encoding";
  posenc::detail::check_dropout(who, dropout);
  const at::Tensor out =
      posenc::detail::table_forward(who, x, table, offset, positions, batch_first, scale, {});
  return posenc::detail::apply_dropout(out, dropout, training);
}

} // namespace detail

at::Tensor positions_from_padding_mask(const at::Tensor& padding_mask, bool batch_first) {
  constexpr const char* who = "positions_from_padding_mask";
  const char* layout = batch_first ? "[B, L] (batch_first=true)" : "[L, B] (batch_first=false)";
  TORCH_CHECK(padding_mask.defined(),
              who,
              ": expected a padding mask of shape ",
              layout,
              ", but got an undefined tensor");
  TORCH_CHECK(padding_mask.dim() == 2,
              who,
              ": expected a padding mask of shape ",
              layout,
              ", but got a ",
              padding_mask.dim(),
              "-D tensor of shape ",
              padding_mask.sizes());
  TORCH_CHECK(
      padding_mask.scalar_type() == at::kBool,
      who,
      ": expected a bool padding mask (true = padding), but got ",
      padding_mask.scalar_type(),
      "; compare token ids with the padding id, e.g. tokens == pad, or use positions_from_tokens");
  // Each real token's position is the number of real tokens before it in its sequence.
  const at::Tensor real = padding_mask.logical_not().to(at::kLong);
  return (real.cumsum(batch_first ? 1 : 0) - 1).masked_fill(padding_mask, -1);
}

at::Tensor positions_from_tokens(const at::Tensor& tokens, int64_t padding_idx, bool batch_first) {
  TORCH_CHECK(tokens.defined(),
              "positions_from_tokens: expected token ids, but got an undefined tensor");
  TORCH_CHECK(at::isIntegralType(tokens.scalar_type(), /*includeBool=*/false),
              "positions_from_tokens: expected integer token ids, but got ",
              tokens.scalar_type());
  return positions_from_padding_mask(tokens.eq(padding_idx), batch_first);
}

} // namespace functional
} // namespace posenc
