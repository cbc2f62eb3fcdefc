#include "ops/common.h"

#include "detail/checks.h"
#include "detail/positional_encoding.h"
#include "detail/rotary.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/aminmax.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <tuple>

namespace posenc {
namespace ops {

TableCall prepare_table_call(const char* who,
                             const at::Tensor& x,
                             const at::Tensor& table,
                             int64_t offset,
                             OptionalTensor positions,
                             bool batch_first,
                             double scale) {
  TableCall call;
  const detail::TableShape shape = detail::check_table(who, table);
  call.table = table;
  call.max_len = shape.max_len;
  call.width = shape.width;
  detail::check_sequence_input(who, x, shape.width, batch_first, table.device());
  TORCH_CHECK(std::isfinite(scale), who, ": scale must be finite, but got ", scale);
  call.length = x.size(batch_first ? 1 : 0);
  call.batch = x.size(batch_first ? 0 : 1);
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(offset == 0,
                who,
                ": pass either an offset or explicit positions, not both (got offset = ",
                offset,
                ")");
    call.positions =
        detail::checked_sequence_positions(who, *positions, x, batch_first, shape.max_len, {})
            .values;
  } else {
    detail::check_offset(who, offset, call.length, shape.max_len);
  }
  return call;
}

RotaryCall prepare_rotary_call(const char* who,
                               const at::Tensor& x,
                               const at::Tensor& cos,
                               const at::Tensor& sin,
                               int64_t offset,
                               OptionalTensor positions,
                               bool heads_first) {
  TORCH_CHECK(cos.defined() && sin.defined() && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
                  cos.size(1) >= 1,
              who,
              ": cos and sin must be [max_len, R/2] tables of the same shape, but got ",
              cos.defined() ? cos.sizes() : at::IntArrayRef{},
              " and ",
              sin.defined() ? sin.sizes() : at::IntArrayRef{});
  detail::check_float_dtype(who, "the dtype of cos and sin", cos.scalar_type());
  TORCH_CHECK(cos.scalar_type() == sin.scalar_type() && cos.device() == sin.device(),
              who,
              ": cos and sin must share dtype and device");
  detail::check_rotary_input(who, x, 2 * cos.size(1), heads_first, cos.device());
  RotaryCall call;
  call.batch = x.size(0);
  call.length = x.size(heads_first ? 2 : 1);
  call.heads = x.size(heads_first ? 1 : 2);
  call.head_dim = x.size(3);
  call.half = cos.size(1);
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(offset == 0,
                who,
                ": pass either an offset or explicit positions, not both (got offset = ",
                offset,
                ")");
    const int64_t batch_and_length[] = {call.batch, call.length};
    call.positions =
        detail::checked_positions(
            who, *positions, call.length, batch_and_length, "[B, L]", x.device(), cos.size(0), {})
            .values;
  } else {
    detail::check_offset(who, offset, call.length, cos.size(0));
  }
  return call;
}

TableCall prepare_token_call(const char* who,
                             const at::Tensor& tokens,
                             const at::Tensor& weight,
                             const at::Tensor& table,
                             int64_t offset,
                             OptionalTensor positions,
                             bool batch_first,
                             double scale,
                             double dropout) {
  const char* layout = batch_first ? "[B, L] (batch_first=true)" : "[L, B] (batch_first=false)";
  TORCH_CHECK(tokens.defined() && tokens.dim() == 2,
              who,
              ": expected token ids of shape ",
              layout,
              ", but got ",
              tokens.defined() ? tokens.sizes() : at::IntArrayRef{});
  TORCH_CHECK(tokens.scalar_type() == at::kLong,
              who,
              ": expected int64 token ids, but got ",
              tokens.scalar_type());
  TORCH_CHECK(weight.defined() && weight.dim() == 2,
              who,
              ": expected the token embedding weight as [vocab, D], but got ",
              weight.defined() ? weight.sizes() : at::IntArrayRef{});
  detail::check_float_dtype(who, "the dtype of the token embedding weight", weight.scalar_type());
  TORCH_CHECK(tokens.device() == weight.device(),
              who,
              ": token ids (",
              tokens.device(),
              ") and weight (",
              weight.device(),
              ") must share a device");
  detail::check_dropout(who, dropout);
  TORCH_CHECK(std::isfinite(scale), who, ": scale must be finite, but got ", scale);
  TableCall call;
  const detail::TableShape shape = detail::check_table(who, table);
  call.table = table;
  call.max_len = shape.max_len;
  call.width = shape.width;
  TORCH_CHECK(shape.width == weight.size(1) && table.device() == weight.device(),
              who,
              ": the position table must have D = ",
              weight.size(1),
              " columns on ",
              weight.device(),
              ", but has ",
              shape.width,
              " on ",
              table.device());
  if (tokens.numel() > 0) {
    at::Tensor low;
    at::Tensor high;
    std::tie(low, high) = at::aminmax(tokens);
    const int64_t smallest = low.item<int64_t>();
    const int64_t largest = high.item<int64_t>();
    TORCH_CHECK(smallest >= 0 && largest < weight.size(0),
                who,
                ": token ids must lie in [0, vocab_size) = [0, ",
                weight.size(0),
                "), but got ids from ",
                smallest,
                " to ",
                largest);
  }
  call.length = tokens.size(batch_first ? 1 : 0);
  call.batch = tokens.size(batch_first ? 0 : 1);
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(offset == 0,
                who,
                ": pass either an offset or explicit positions, not both (got offset = ",
                offset,
                ")");
    call.positions = detail::checked_positions(who,
                                               *positions,
                                               call.length,
                                               tokens.sizes(),
                                               layout,
                                               tokens.device(),
                                               shape.max_len,
                                               {})
                         .values;
  } else {
    detail::check_offset(who, offset, call.length, shape.max_len);
  }
  return call;
}

void prepare_out(const char* who, at::Tensor& out, const at::Tensor& x) {
  TORCH_CHECK(out.defined(), who, ": out is undefined");
  TORCH_CHECK(out.scalar_type() == x.scalar_type() && out.device() == x.device(),
              who,
              ": out must have the input's dtype and device (",
              x.scalar_type(),
              ", ",
              x.device(),
              "), but has ",
              out.scalar_type(),
              ", ",
              out.device());
  TORCH_CHECK(out.sizes() == x.sizes() || out.numel() == 0,
              who,
              ": out must have the input's shape ",
              x.sizes(),
              " (or be empty, to be resized), but has ",
              out.sizes());
  if (out.numel() == 0 && x.numel() != 0) {
    out.resize_(x.sizes());
  }
  at::assert_no_internal_overlap(out);
  at::assert_no_partial_overlap(out, x);
}

bool hand_kernels_read(const at::Tensor& table) {
  return table.is_contiguous() &&
         (table.scalar_type() == at::kFloat || table.scalar_type() == at::kDouble);
}

bool below_autograd_suffices(const at::Tensor& a, const at::Tensor& b) {
  if (!c10::GradMode::is_enabled()) {
    return true;
  }
  return !(a.defined() && a.requires_grad()) && !(b.defined() && b.requires_grad());
}

} // namespace ops
} // namespace posenc
