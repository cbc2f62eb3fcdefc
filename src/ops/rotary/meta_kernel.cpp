// Meta kernels of the rotary family (see meta_checks.h).

#include "ops/common/meta_checks.h"
#include "ops/rotary/meta_checks.h"
#include "ops/common/sym_length.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace posenc {
namespace ops {
namespace meta {
namespace {

void check_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  OptionalTensor positions, OptionalTensor inv_freq) {
  static constexpr detail::CallerName who{};
  check_input(x, 4);
  TORCH_CHECK(cos.dim() == 2 && sin.dim() == 2 && detail::shape_of(cos) == detail::shape_of(sin),
              who, ": cos and sin must be [max_len, R/2] tables of the same shape, but got ",
              detail::shape_of(cos), " and ", detail::shape_of(sin));
  detail::check_float_dtype("the dtype of cos and sin", cos.scalar_type());
  TORCH_CHECK(cos.scalar_type() == sin.scalar_type() && cos.device() == sin.device(), who,
              ": cos and sin must share dtype and device, but cos is ", cos.scalar_type(), " on ",
              cos.device(), " and sin ", sin.scalar_type(), " on ", sin.device());
  // (the real kernels' width check, sizes compared, not read: a traced or exported program must
  // refuse what eager refuses)
  const detail::SymSize rotated = detail::size_of(cos, 1) * 2;
  TORCH_CHECK(detail::size_of(x, 3) >= rotated, who, ": the head dimension Dh = ",
              detail::size_of(x, 3), " is smaller than the rotated width ", rotated,
              " (input shape ", detail::shape_of(x), "); build the module with head_dim = ",
              detail::size_of(x, 3));
  detail::check_input_device(x, cos.device(), "the cos/sin caches");
  check_positions(positions, x, has_value(inv_freq), "inv_freq");
  check_definition_device(inv_freq, "inv_freq", x.device());
}

// The offset form's rows must lie in the caches unless inv_freq computes the rest.
void check_rotary_offset(const at::Tensor& x, const at::Tensor& cos, int64_t offset,
                         OptionalTensor positions, bool heads_first, OptionalTensor inv_freq) {
  if (!has_value(positions)) {
    check_offset_rows(offset, detail::size_of(x, heads_first ? 2 : 1), detail::size_of(cos, 0),
                      has_value(inv_freq));
  }
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool, bool heads_first, bool,
                        OptionalTensor inv_freq, double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary");
  check_rotary(x, cos, sin, positions, inv_freq);
  check_rotary_offset(x, cos, offset, positions, heads_first, inv_freq);
  return at::empty_like(x);
}

void apply_rotary_(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t offset,
                   OptionalTensor positions, bool, bool heads_first, bool, OptionalTensor inv_freq,
                   double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary_");
  check_rotary(x, cos, sin, positions, inv_freq);
  check_rotary_offset(x, cos, offset, positions, heads_first, inv_freq);
}

// What the shapes alone tell of q and k: the keys of the queries' tokens, in their dtype.
void check_qk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
              const at::Tensor& sin, int64_t offset, OptionalTensor positions,
              OptionalTensor inv_freq, bool heads_first) {
  static constexpr detail::CallerName who{};
  check_rotary(q, cos, sin, positions, inv_freq);
  check_rotary(k, cos, sin, positions, inv_freq);
  check_rotary_offset(q, cos, offset, positions, heads_first, inv_freq);
  const int64_t length = heads_first ? 2 : 1;
  // sym_size: symbolic sizes stay symbolic (torch.export with a dynamic sequence length)
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && k.sym_size(0) == q.sym_size(0) &&
                  k.sym_size(length) == q.sym_size(length),
              who, ": k must hold the keys of q's tokens (same batch, length and dtype), but q is ",
              q.scalar_type(), " ", q.sizes(), " and k ", k.scalar_type(), " ", k.sizes());
}

std::tuple<at::Tensor, at::Tensor> apply_rotary_qk(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& cos, const at::Tensor& sin,
                                                   int64_t offset, OptionalTensor positions, bool,
                                                   bool heads_first, bool, OptionalTensor inv_freq,
                                                   double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary_qk");
  check_qk(q, k, cos, sin, offset, positions, inv_freq, heads_first);
  // As the CPU and CUDA kernels allocate: contiguous.
  return {at::empty_symint(q.sym_sizes(), q.options()), at::empty_symint(k.sym_sizes(), k.options())};
}

void apply_rotary_qk_(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                      int64_t offset, OptionalTensor positions, bool, bool heads_first, bool,
                      OptionalTensor inv_freq, double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary_qk_");
  check_qk(q, k, cos, sin, offset, positions, inv_freq, heads_first);
}

std::tuple<at::Tensor, at::Tensor> multimodal_rotary_tables(const at::Tensor& cos,
                                                            const at::Tensor& sin,
                                                            const at::Tensor& positions,
                                                            at::IntArrayRef mrope_section,
                                                            bool interleaved,
                                                            OptionalTensor inv_freq, double) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::multimodal_rotary_tables");
  static constexpr detail::CallerName who{};
  TORCH_CHECK(cos.dim() == 2 && sin.dim() == 2 && cos.sizes() == sin.sizes(), who,
              ": cos and sin must be [max_len, R/2] tables of the same shape");
  detail::mrope_axes(mrope_section.vec(), interleaved, cos.size(1));
  TORCH_CHECK((positions.dim() == 2 || positions.dim() == 3) && positions.sym_size(0) == 3, who,
              ": multimodal positions must be [3, B, L] or [3, L], but got ", positions.sizes());
  detail::check_positions_device(positions, cos.device());
  check_definition_device(inv_freq, "inv_freq", cos.device());
  // symbolic sizes stay symbolic (torch.export with a dynamic sequence length)
  std::vector<c10::SymInt> shape = positions.sym_sizes().slice(1).vec();
  shape.emplace_back(cos.size(1));
  return {at::empty_symint(shape, cos.options()), at::empty_symint(shape, sin.options())};
}

std::tuple<at::Tensor, at::Tensor> rotary_tables(SymLength length, const at::Tensor& inv_freq,
                                                 double, c10::optional<at::ScalarType> dtype,
                                                 c10::optional<at::Device>) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, "posenc::rotary_tables");
  static constexpr detail::CallerName who{};
  TORCH_CHECK(inv_freq.dim() == 1 && inv_freq.size(0) >= 1 &&
                  inv_freq.size(0) <= detail::kMaxTableElements,
              who, ": inv_freq must be a 1-D float64 [R/2] tensor of frequencies (R/2 <= 2^28), but got ",
              inv_freq.sizes());
  // (a symbolic length, torch.export's, is checked when the program runs)
  detail::check_rotary_arguments(concrete(length).value_or(1), 2 * inv_freq.size(0), 10000.0);
  const auto options = inv_freq.options().dtype(dtype.value_or(at::kFloat));
  const std::vector<SymLength> shape{length, SymLength(inv_freq.size(0))};
  return {empty_with_lengths(shape, options), empty_with_lengths(shape, options)};
}

} // namespace

void check_rotary_qk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                     const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                     OptionalTensor inv_freq, bool heads_first) {
  check_qk(q, k, cos, sin, offset, positions, inv_freq, heads_first);
}

} // namespace meta

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("apply_rotary", TORCH_FN(meta::apply_rotary));
  m.impl("apply_rotary_", TORCH_FN(meta::apply_rotary_));
  m.impl("apply_rotary_qk", TORCH_FN(meta::apply_rotary_qk));
  m.impl("apply_rotary_qk_", TORCH_FN(meta::apply_rotary_qk_));
  m.impl("multimodal_rotary_tables", TORCH_FN(meta::multimodal_rotary_tables));
  m.impl("rotary_tables", TORCH_FN(meta::rotary_tables));
}

} // namespace ops
} // namespace posenc
