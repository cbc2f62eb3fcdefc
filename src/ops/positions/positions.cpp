// The positions family: positions of packed sequences, of context-parallel shards, of padded
// sequences and of multimodal batches, to pass as `positions` to the other operators. Schemas, C++
// entry points and kernels (composite: a small host computation on the CPU, tensor operations where
// cu_seqlens lie elsewhere; Meta: the shape).

#include "ops/common/dispatch.h"
#include "ops/common/sym_length.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/positions.h"

#include <posenc/ops/positions.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  // (POSENC_SYMINT: lengths that torch.export keeps symbolic, ops/common/sym_length.h)
  m.def("packed_positions(Tensor cu_seqlens, " POSENC_SYMINT
        " total, Tensor? start_positions=None) -> Tensor");
  m.def("context_parallel_positions(" POSENC_SYMINT
        " seq_len, int world_size, int rank, bool zigzag=False, Device? device=None) -> Tensor");
  // Rank `rank`'s shard of packed sequences split sequence by sequence (TransformerEngine's THD
  // layout): its tokens' positions and their indices in the packed batch.
  m.def("context_parallel_packed_positions(Tensor cu_seqlens, " POSENC_SYMINT
        " total, int world_size, int rank, bool zigzag=False) -> (Tensor positions, Tensor "
        "indices)");
  // Each real token's position counted from its sequence's first real token; padding (true) -1.
  m.def("positions_from_padding_mask(Tensor padding_mask, bool batch_first=True) -> Tensor");
  // Multimodal RoPE's [3, B, L] positions of text, image and video tokens and each row's delta
  // [B, 1] (transformers' get_rope_index; read on the host: the grids decide the numbering).
  m.def(
      "mrope_position_ids(Tensor token_types, Tensor? image_grid_thw=None, "
      "Tensor? video_grid_thw=None, Tensor? attention_mask=None, *, int spatial_merge_size=2, "
      "float[]? video_time_intervals=None, bool frames_apart=False) -> (Tensor, Tensor)");
}

namespace ops {

namespace {

constexpr const char* kPacked = "posenc::packed_positions";

void check_index_vector(const at::Tensor& tensor, const char* what, const at::Tensor& cu_seqlens) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, kPacked);
  TORCH_CHECK(tensor.dim() == 1 && (tensor.scalar_type() == at::kInt ||
                                    tensor.scalar_type() == at::kLong),
              detail::caller_or(kPacked), ": ", what,
              " must be a 1-D int32 or int64 tensor, but got ", tensor.scalar_type(), " of shape ",
              tensor.sizes());
  detail::check_argument_device(tensor, what, cu_seqlens.device());
}

void check_packed_arguments(const at::Tensor& cu_seqlens, int64_t total,
                            OptionalTensor start_positions) {
  check_index_vector(cu_seqlens, "cu_seqlens", cu_seqlens);
  TORCH_CHECK(total >= 0 && total <= detail::kMaxTableElements, detail::caller_or(kPacked),
              ": total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of "
              "positions in one call), but got ", total);
  if (start_positions.has_value() && start_positions->defined()) {
    check_index_vector(*start_positions, "start_positions", cu_seqlens);
  }
}

std::vector<int64_t> host_values(const at::Tensor& tensor) {
  const at::Tensor host = tensor.to(at::kCPU, at::kLong).contiguous();
  return {host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel()};
}

at::Tensor packed_positions_kernel(const at::Tensor& cu_seqlens, int64_t total,
                                   OptionalTensor start_positions) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, kPacked);
  check_packed_arguments(cu_seqlens, total, start_positions);
  const bool given = start_positions.has_value() && start_positions->defined();
  if (detail::checks_on_device(cu_seqlens.device())) { // computed and checked there: no read back
    return detail::packed_positions_from(cu_seqlens, total,
                                         given ? *start_positions : at::Tensor());
  }
  const std::vector<int64_t> positions =
      detail::packed_positions(host_values(cu_seqlens), total,
                               given ? host_values(*start_positions) : std::vector<int64_t>());
  return at::tensor(positions, at::TensorOptions().dtype(at::kLong)).to(cu_seqlens.device());
}

constexpr const char* kPackedShard = "posenc::context_parallel_packed_positions";

// What context_parallel_packed_positions checks without reading cu_seqlens (`total`: -1 where
// torch.export keeps it symbolic, checked when the program runs).
void check_packed_shard_arguments(const at::Tensor& cu_seqlens, int64_t total, int64_t world_size,
                                  int64_t rank, bool zigzag) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, kPackedShard);
  check_index_vector(cu_seqlens, "cu_seqlens", cu_seqlens);
  detail::check_context_parallel_ranks(world_size, rank);
  TORCH_CHECK(total <= detail::kMaxTableElements, detail::caller_or(kPackedShard),
              ": total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of "
              "positions in one call), but got ", total);
  const int64_t chunks = zigzag ? 2 * world_size : world_size;
  TORCH_CHECK(total < 0 || total % chunks == 0, detail::caller_or(kPackedShard),
              ": total (the number of packed tokens) must be a multiple of ",
              zigzag ? "2 * world_size = " : "world_size = ", chunks,
              ", as every sequence's length must be, but got ", total,
              "; pad each sequence to a multiple of ", chunks);
}

std::tuple<at::Tensor, at::Tensor> context_parallel_packed_positions_kernel(
    const at::Tensor& cu_seqlens, int64_t total, int64_t world_size, int64_t rank, bool zigzag) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, kPackedShard);
  TORCH_CHECK(total >= 0, detail::caller_or(kPackedShard),
              ": total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of "
              "positions in one call), but got ", total);
  check_packed_shard_arguments(cu_seqlens, total, world_size, rank, zigzag);
  if (detail::checks_on_device(cu_seqlens.device())) { // computed and checked there: no read back
    auto shard =
        detail::context_parallel_packed_positions_from(cu_seqlens, total, world_size, rank, zigzag);
    return {std::move(shard.first), std::move(shard.second)};
  }
  const detail::PackedShard shard = detail::context_parallel_packed_positions(
      host_values(cu_seqlens), total, world_size, rank, zigzag);
  const auto longs = at::TensorOptions().dtype(at::kLong);
  return {at::tensor(shard.positions, longs).to(cu_seqlens.device()),
          at::tensor(shard.indices, longs).to(cu_seqlens.device())};
}

std::tuple<at::Tensor, at::Tensor> context_parallel_packed_positions_meta(
    const at::Tensor& cu_seqlens, SymLength total, int64_t world_size, int64_t rank, bool zigzag) {
  const c10::optional<int64_t> known = concrete(total);
  TORCH_CHECK(!known || *known >= 0, detail::caller_or(kPackedShard),
              ": total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of "
              "positions in one call), but got ", *known);
  check_packed_shard_arguments(cu_seqlens, known.value_or(-1), world_size, rank, zigzag);
  const auto longs = cu_seqlens.options().dtype(at::kLong);
  const SymLength local = total / world_size;
  return {empty_with_lengths({local}, longs), empty_with_lengths({local}, longs)};
}

at::Tensor packed_positions_meta(const at::Tensor& cu_seqlens, SymLength total,
                                 OptionalTensor start_positions) {
  // (a symbolic total, torch.export's, is checked when the program runs)
  check_packed_arguments(cu_seqlens, concrete(total).value_or(0), start_positions);
  return empty_with_lengths({total}, cu_seqlens.options().dtype(at::kLong));
}

at::Tensor context_parallel_positions_kernel(SymLength length, int64_t world_size, int64_t rank,
                                             bool zigzag, c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::context_parallel_positions");
  const c10::optional<int64_t> known = concrete(length);
  if (!known.has_value()) { // torch.export (fake tensors: the meta device): only the shard's size
    detail::context_parallel_positions(0, world_size, rank, zigzag); // (rank, world_size)
    return empty_with_lengths({length / world_size}, at::TensorOptions().dtype(at::kLong).device(
                                                         device.value_or(at::kCPU)));
  }
  const int64_t seq_len = *known;
  const std::vector<int64_t> positions =
      detail::context_parallel_positions(seq_len, world_size, rank, zigzag);
  return at::tensor(positions, at::TensorOptions().dtype(at::kLong))
      .to(device.value_or(at::Device(at::kCPU)));
}

at::Tensor positions_from_padding_mask_kernel(const at::Tensor& padding_mask, bool batch_first) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::positions_from_padding_mask");
  static constexpr detail::CallerName who{};
  const char* layout = detail::sequence_layout(batch_first);
  TORCH_CHECK(padding_mask.dim() == 2, who, ": expected a padding mask of shape ", layout,
              ", but got a ", padding_mask.dim(), "-D tensor of shape ", padding_mask.sizes());
  TORCH_CHECK(
      padding_mask.scalar_type() == at::kBool, who,
      ": expected a bool padding mask (true = padding), but got ", padding_mask.scalar_type(),
      "; compare token ids with the padding id, e.g. tokens == pad, or use positions_from_tokens");
  // Each real token's position is the number of real tokens before it in its sequence.
  const at::Tensor real = padding_mask.logical_not().to(at::kLong);
  return (real.cumsum(batch_first ? 1 : 0) - 1).masked_fill(padding_mask, -1);
}

constexpr const char* kMRope = "posenc::mrope_position_ids";

// The shapes and dtypes mrope_position_ids requires (token_types [B, L] of integers, the grids
// [N, 3] of integers, the mask token_types' shape); the values are the host numbering's.
void check_mrope_arguments(const at::Tensor& token_types, OptionalTensor image_grid_thw,
                           OptionalTensor video_grid_thw, OptionalTensor attention_mask,
                           c10::optional<at::ArrayRef<double>> video_time_intervals) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kMRope);
  static constexpr detail::CallerName who{};
  TORCH_CHECK(token_types.dim() == 2 && at::isIntegralType(token_types.scalar_type(),
                                                           /*includeBool=*/false),
              who, ": token_types must be [B, L] integers (0 text, 1 image, 2 video), but got ",
              token_types.scalar_type(), " of shape ", shape_of(token_types));
  if (attention_mask.has_value() && attention_mask->defined()) {
    TORCH_CHECK(shape_of(*attention_mask) == shape_of(token_types), who,
                ": attention_mask must have token_types' shape ", shape_of(token_types),
                ", but got ", shape_of(*attention_mask));
    detail::check_argument_device(*attention_mask, "attention_mask", token_types.device());
  }
  for (const auto& grid : {std::make_pair("image_grid_thw", &image_grid_thw),
                           std::make_pair("video_grid_thw", &video_grid_thw)}) {
    const c10::optional<at::Tensor>& given = *grid.second;
    if (given.has_value() && given->defined()) {
      TORCH_CHECK(given->dim() == 2 && size_of(*given, 1) == 3 &&
                      at::isIntegralType(given->scalar_type(), /*includeBool=*/false),
                  who, ": ", grid.first, " must be [N, 3] (t, h, w) integers, but got ",
                  given->scalar_type(), " of shape ", shape_of(*given));
      // (the Meta kernel too: a meta grid among CPU tensors selects it, and it must refuse the
      // call rather than return memory nobody wrote)
      detail::check_argument_device(*given, grid.first, token_types.device());
    }
  }
  if (video_time_intervals.has_value()) {
    const bool videos = video_grid_thw.has_value() && video_grid_thw->defined();
    const detail::SymSize count = videos ? size_of(*video_grid_thw, 0) : detail::SymSize(0);
    TORCH_CHECK(count == static_cast<int64_t>(video_time_intervals->size()), who,
                ": video_time_intervals must give one interval per video (", count, "), but gives ",
                video_time_intervals->size());
    for (size_t g = 0; g < video_time_intervals->size(); ++g) {
      const double interval = (*video_time_intervals)[g];
      TORCH_CHECK(std::isfinite(interval) && interval >= 0.0, who,
                  ": video_time_intervals must be finite and >= 0 (each video's temporal "
                  "spacing in positions), but video ",
                  g, " has ", interval);
    }
  }
}

detail::MRopeGrids mrope_grids(const char* name, OptionalTensor given,
                               c10::optional<at::ArrayRef<double>> intervals) {
  detail::MRopeGrids grids{name, {}, {}};
  if (given.has_value() && given->defined()) {
    const std::vector<int64_t> values = host_values(given->reshape({-1}));
    for (size_t g = 0; g + 2 < values.size(); g += 3) {
      grids.thw.push_back({values[g], values[g + 1], values[g + 2]});
    }
  }
  grids.intervals =
      intervals.has_value() ? intervals->vec() : std::vector<double>(grids.thw.size(), 1.0);
  return grids;
}

std::tuple<at::Tensor, at::Tensor> mrope_position_ids_kernel(
    const at::Tensor& token_types, OptionalTensor image_grid_thw, OptionalTensor video_grid_thw,
    OptionalTensor attention_mask, int64_t spatial_merge_size,
    c10::optional<at::ArrayRef<double>> video_time_intervals, bool frames_apart) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, kMRope);
  check_mrope_arguments(token_types, image_grid_thw, video_grid_thw, attention_mask,
                        video_time_intervals);
  const int64_t batch = token_types.size(0);
  const int64_t length = token_types.size(1);
  std::vector<uint8_t> keep;
  if (attention_mask.has_value() && attention_mask->defined()) {
    const at::Tensor host = attention_mask->ne(0).to(at::kCPU, at::kByte).contiguous();
    keep.assign(host.data_ptr<uint8_t>(), host.data_ptr<uint8_t>() + host.numel());
  }
  const detail::MRopeNumbering numbering = detail::mrope_position_ids(
      host_values(token_types.reshape({-1})), keep, batch, length,
      mrope_grids("image_grid_thw", image_grid_thw, c10::nullopt),
      mrope_grids("video_grid_thw", video_grid_thw, video_time_intervals), spatial_merge_size,
      frames_apart);
  const auto longs = at::TensorOptions().dtype(at::kLong);
  return {
      at::tensor(numbering.positions, longs).reshape({3, batch, length}).to(token_types.device()),
      at::tensor(numbering.deltas, longs).reshape({batch, 1}).to(token_types.device())};
}

// The shapes only (fake tensors: the numbering needs the values).
std::tuple<at::Tensor, at::Tensor> mrope_position_ids_meta(
    const at::Tensor& token_types, OptionalTensor image_grid_thw, OptionalTensor video_grid_thw,
    OptionalTensor attention_mask, int64_t spatial_merge_size,
    c10::optional<at::ArrayRef<double>> video_time_intervals, bool /*frames_apart*/) {
  check_mrope_arguments(token_types, image_grid_thw, video_grid_thw, attention_mask,
                        video_time_intervals);
  TORCH_CHECK(spatial_merge_size >= 1, detail::caller_or(kMRope),
              ": spatial_merge_size must be >= 1, but got ", spatial_merge_size);
  const auto longs = token_types.options().dtype(at::kLong);
  const SymLength three(3);
  const SymLength one(1);
  return {empty_with_lengths({three, size_of(token_types, 0), size_of(token_types, 1)}, longs),
          empty_with_lengths({size_of(token_types, 0), one}, longs)};
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeImplicitAutograd, m) {
  m.impl("positions_from_padding_mask", TORCH_FN(positions_from_padding_mask_kernel));
}

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("packed_positions", TORCH_FN(packed_positions_kernel));
  m.impl("context_parallel_positions", TORCH_FN(context_parallel_positions_kernel));
  m.impl("context_parallel_packed_positions", TORCH_FN(context_parallel_packed_positions_kernel));
  m.impl("mrope_position_ids", TORCH_FN(mrope_position_ids_kernel));
}

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("packed_positions", TORCH_FN(packed_positions_meta));
  m.impl("context_parallel_packed_positions", TORCH_FN(context_parallel_packed_positions_meta));
  m.impl("mrope_position_ids", TORCH_FN(mrope_position_ids_meta));
}

// Integer positions have no gradient: autograd passes mrope_position_ids and
// context_parallel_packed_positions through to their kernels
// (LibTorch 1.13 has no AutogradMeta kernel for CompositeExplicitAutograd operators otherwise).
TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("mrope_position_ids", torch::CppFunction::makeFallthrough());
  m.impl("context_parallel_packed_positions", torch::CppFunction::makeFallthrough());
}

using PackedSignature = at::Tensor(const at::Tensor&, int64_t, OptionalTensor);
// (context_parallel_positions' kernel takes SymLength: called so, unboxed)
using ShardSignature = at::Tensor(SymLength, int64_t, int64_t, bool, c10::optional<at::Device>);

at::Tensor packed_positions(const at::Tensor& cu_seqlens, int64_t total,
                            const c10::optional<at::Tensor>& start_positions) {
  static const auto op = typed_op<PackedSignature>("posenc::packed_positions");
  return op.call(cu_seqlens, total, start_positions);
}

at::Tensor context_parallel_positions(int64_t seq_len, int64_t world_size, int64_t rank,
                                      bool zigzag, c10::optional<at::Device> device) {
  static const auto op = typed_op<ShardSignature>("posenc::context_parallel_positions");
  return op.call(SymLength(seq_len), world_size, rank, zigzag, device);
}

std::tuple<at::Tensor, at::Tensor> context_parallel_packed_positions(const at::Tensor& cu_seqlens,
                                                                     int64_t total,
                                                                     int64_t world_size,
                                                                     int64_t rank, bool zigzag) {
  static const auto op =
      typed_op<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, int64_t, int64_t,
                                                  bool)>("posenc::context_parallel_packed_positions");
  return op.call(cu_seqlens, total, world_size, rank, zigzag);
}

at::Tensor positions_from_padding_mask(const at::Tensor& padding_mask, bool batch_first) {
  static const auto op =
      typed_op<at::Tensor(const at::Tensor&, bool)>("posenc::positions_from_padding_mask");
  return op.call(padding_mask, batch_first);
}

std::tuple<at::Tensor, at::Tensor> mrope_position_ids(
    const at::Tensor& token_types, const c10::optional<at::Tensor>& image_grid_thw,
    const c10::optional<at::Tensor>& video_grid_thw,
    const c10::optional<at::Tensor>& attention_mask, int64_t spatial_merge_size,
    c10::optional<at::ArrayRef<double>> video_time_intervals, bool frames_apart) {
  static const auto op = typed_op<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, OptionalTensor, OptionalTensor, OptionalTensor, int64_t,
      c10::optional<at::ArrayRef<double>>, bool)>("posenc::mrope_position_ids");
  return op.call(token_types, image_grid_thw, video_grid_thw, attention_mask, spatial_merge_size,
                 video_time_intervals, frames_apart);
}

} // namespace ops
} // namespace posenc
