// The attention-bias family: positions that enter attention as biases of its scores (ALiBi, T5's
// relative-position buckets) or as a table of relative positions (Transformer-XL / Conformer) and
// the relative shift that aligns it. Schemas, C++ entry points and kernels: the tables and the
// buckets are computed on the host in double precision (detail/attention_bias.cpp); the biases are
// formed with ATen operations on the device of their inputs, differentiable where a model learns
// through them (T5's bias table, the scores given to rel_shift).

#include "ops/common/dispatch.h"
#include "ops/bias/checks.h"
#include "ops/bias/kernels.h"
#include "ops/common/sym_length.h"

#include "detail/attention_bias.h"
#include "detail/checks.h"
#include "detail/device_checks.h"

#include <posenc/ops/attention_bias.h>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <limits>
#include <vector>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def(
      "alibi_slopes(int num_heads, float max_bias=8., int first_head=0, int? heads=None, "
      "ScalarType? dtype=None, Device? device=None) -> Tensor");
  // (POSENC_SYMINT: lengths that torch.export keeps symbolic, ops/common/sym_length.h)
  m.def("alibi_bias(Tensor slopes, " POSENC_SYMINT " query_length, " POSENC_SYMINT
        " key_length, " POSENC_SYMINT
        "? offset=None, bool causal=False, ScalarType? dtype=None) -> Tensor");
  m.def("alibi_causal_bias(Tensor slopes, " POSENC_SYMINT
        " key_length, Tensor? attention_mask=None, ScalarType? dtype=None) -> Tensor");
  m.def(
      "relative_position_bucket(Tensor relative_position, bool bidirectional=True, "
      "int num_buckets=32, int max_distance=128) -> Tensor");
  m.def("relative_position_bias(Tensor weight, " POSENC_SYMINT " query_length, " POSENC_SYMINT
        " key_length, bool bidirectional=True, int max_distance=128, " POSENC_SYMINT
        " offset=0) -> Tensor");
  m.def("relative_sinusoidal_table(" POSENC_SYMINT
        " length, int d_model, float base=10000., " POSENC_SYMINT
        "? key_length=None, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("rel_shift(Tensor x) -> Tensor");
  // A RelPositionalEncoding module's call (ops/bias/relative_module.h), for posenc.nn's module: its
  // table `pe` and options as arguments; returns (dropout(x * scale), dropout(pos_emb)).
  // Composite: a narrow of the table, a scale and dropout.
  m.def(
      "rel_positional_encoding_call(Tensor x, Tensor pe, int offset, bool legacy, float scale, "
      "float dropout, bool training) -> (Tensor, Tensor)");
  // A RelPositionMultiheadAttention module's call (ops/bias/relative_module.h), for posenc.nn's
  // module: its options and parameters (ESPnet's linear_q/k/v/pos/out, pos_bias_u/v) as
  // arguments. Composite: the projections, matmuls, rel_shift, softmax and dropout.
  m.def(
      "rel_position_multihead_attention_call(Tensor query, Tensor key, Tensor value, "
      "Tensor pos_emb, Tensor? mask, int embed_dim, int num_heads, Tensor q_weight, "
      "Tensor? q_bias, Tensor k_weight, Tensor? k_bias, Tensor v_weight, Tensor? v_bias, "
      "Tensor pos_weight, Tensor out_weight, Tensor? out_bias, Tensor pos_bias_u, "
      "Tensor pos_bias_v, float dropout, bool training) -> Tensor");
  m.def(
      "attention_temperature(Tensor query, Tensor? positions=None, int offset=0, "
      "float floor_scale=8192., float attn_scale=0.1, bool heads_first=False, "
      "str form=\"llama4\") -> Tensor");
}

namespace ops {

void check_relative_position_bucket(const at::Tensor& relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::relative_position_bucket");
  static constexpr detail::CallerName who{};
  TORCH_CHECK(relative_position.defined() &&
                  at::isIntegralType(relative_position.scalar_type(), /*includeBool=*/false),
              who, ": relative_position must be an integer tensor (key position - query "
              "position), but got ",
              relative_position.defined() ? c10::toString(relative_position.scalar_type())
                                          : "an undefined tensor");
  detail::check_bucket_arguments(bidirectional, num_buckets, max_distance);
}

namespace {

constexpr const char* kSlopes = "posenc::alibi_slopes";
constexpr const char* kAlibi = "posenc::alibi_bias";
constexpr const char* kAlibiCausal = "posenc::alibi_causal_bias";
constexpr const char* kBucket = "posenc::relative_position_bucket";
constexpr const char* kBias = "posenc::relative_position_bias";
constexpr const char* kRelativeTable = "posenc::relative_sinusoidal_table";
constexpr const char* kRelShift = "posenc::rel_shift";
constexpr const char* kTemperature = "posenc::attention_temperature";

at::Tensor alibi_slopes_kernel(int64_t num_heads, double max_bias, int64_t first_head,
                               c10::optional<int64_t> heads, c10::optional<at::ScalarType> dtype,
                               c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kSlopes);
  static constexpr detail::CallerName who{};
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  const std::vector<double> slopes =
      detail::alibi_slopes(num_heads, max_bias, first_head,
                           heads.value_or(num_heads > first_head ? num_heads - first_head : 0));
  // rounded once from float64 to the dtype, where no slope may vanish
  const at::Tensor rounded = at::tensor(slopes, at::TensorOptions().dtype(at::kDouble)).to(type);
  TORCH_CHECK(rounded.gt(0).all().item<bool>(), who, ": the smallest slope, 2^-",
              max_bias, " at most, rounds to zero in ", type,
              "; lower max_bias or ask for float32 slopes");
  return rounded.to(device.value_or(at::Device(at::kCPU)));
}

at::Tensor alibi_slopes_meta(int64_t num_heads, double max_bias, int64_t first_head,
                             c10::optional<int64_t> heads, c10::optional<at::ScalarType> dtype,
                             c10::optional<at::Device> /*device*/) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kSlopes);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  const int64_t count = heads.value_or(num_heads > first_head ? num_heads - first_head : 0);
  detail::check_alibi_arguments(num_heads, max_bias, first_head, count);
  return at::empty({count}, at::TensorOptions().dtype(type).device(at::kMeta));
}

// Checks ALiBi slopes: `[H]` or `[B, H]` (one set per batch element), floating.
void check_slopes(const at::Tensor& slopes) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(slopes.defined(), who, ": slopes must be a defined tensor");
  TORCH_CHECK((slopes.dim() == 1 || slopes.dim() == 2) && slopes.size(-1) >= 1, who,
              ": slopes must be [num_heads] or [batch, num_heads] with num_heads >= 1, but got "
              "shape ",
              slopes.sizes(), "; build them with alibi_slopes(num_heads)");
  detail::check_float_dtype("slopes' dtype", slopes.scalar_type());
}

// Checks what both ALiBi forms take: the slopes and the requested dtype.
void check_bias_arguments(const at::Tensor& slopes, c10::optional<at::ScalarType> dtype) {
  check_slopes(slopes);
  if (dtype.has_value()) {
    detail::check_float_dtype("dtype", *dtype);
  }
}

// The dtype biases are formed in: float64 for float64 slopes, float32 otherwise.
at::ScalarType compute_type(const at::Tensor& slopes) {
  return slopes.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

void check_length(const char* what, int64_t length) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(length >= 1, who, ": ", what, " must be >= 1, but got ", length);
}

// The query positions' first value: `offset`, or key_length - query_length when not given (the
// queries are the last query_length of the key positions, as in KV-cache decoding and
// flash-attn's bottom-right alignment).
int64_t query_start(int64_t query_length, int64_t key_length, c10::optional<int64_t> offset) {
  static constexpr detail::CallerName who{};
  check_length("query_length", query_length);
  check_length("key_length", key_length);
  if (!offset.has_value()) {
    TORCH_CHECK(key_length >= query_length, who,
                ": without an offset the queries are the last query_length keys, which needs "
                "key_length >= query_length, but got query_length = ",
                query_length, " and key_length = ", key_length,
                "; pass offset (the position of the first query)");
    return key_length - query_length;
  }
  TORCH_CHECK(*offset >= 0 && *offset <= std::numeric_limits<int64_t>::max() - query_length, who,
              ": offset (the position of the first query) must be >= 0 and offset + "
              "query_length must fit in int64, but got offset = ",
              *offset, " and query_length = ", query_length);
  return *offset;
}

// The shape of a bias: [H, Lq, Lk] or [B, H, Lq, Lk] for the slopes' [H] or [B, H], with
// lengths that may be symbolic.
std::vector<SymLength> bias_lengths(const at::Tensor& slopes, SymLength rows, SymLength columns) {
  std::vector<SymLength> shape = lengths_of(slopes);
  shape.push_back(std::move(rows));
  shape.push_back(std::move(columns));
  return shape;
}

at::Tensor alibi_bias_kernel(const at::Tensor& slopes, int64_t query_length, int64_t key_length,
                             c10::optional<int64_t> offset, bool causal,
                             c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kAlibi);
  check_bias_arguments(slopes, dtype);
  const int64_t start = query_start(query_length, key_length, offset);
  detail::checked_numel("the bias' heads * query_length * key_length",
                        {slopes.numel(), query_length, key_length});
  const auto index = at::TensorOptions().dtype(at::kLong).device(slopes.device());
  // |query position - key position| in float32 (float64 for float64 slopes): exact for
  // distances below 2^24, so the product with the slope is rounded once (and, for 16-bit
  // slopes, once more to their dtype).
  const at::ScalarType compute = compute_type(slopes);
  // key position - query position, [Lq, Lk]; > 0 above the diagonal (the future)
  const at::Tensor difference =
      at::arange(key_length, index) - at::arange(start, start + query_length, index).unsqueeze(1);
  const at::Tensor distance = difference.abs().to(compute);
  const at::Tensor negated = slopes.to(compute).neg().unsqueeze(-1).unsqueeze(-1);
  at::Tensor bias = negated * distance;
  if (causal) {
    bias.masked_fill_(difference.gt(0), -std::numeric_limits<double>::infinity());
  }
  return bias.to(dtype.value_or(slopes.scalar_type()));
}

// The checks of lengths that are concrete (sym_length.h): a symbolic one is checked by the
// kernel that receives its value when the exported program runs.
void check_lengths(std::initializer_list<std::pair<const char*, SymLength>> lengths) {
  for (const auto& length : lengths) {
    if (const c10::optional<int64_t> value = concrete(length.second)) {
      check_length(length.first, *value);
    }
  }
}

at::Tensor alibi_bias_meta(const at::Tensor& slopes, SymLength query_length, SymLength key_length,
                           c10::optional<SymLength> offset, bool /*causal*/,
                           c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kAlibi);
  check_bias_arguments(slopes, dtype);
  bool offset_known = false;
  const c10::optional<int64_t> start = concrete(offset, &offset_known);
  const c10::optional<int64_t> queries = concrete(query_length);
  const c10::optional<int64_t> keys = concrete(key_length);
  if (queries && keys && offset_known) {
    query_start(*queries, *keys, start);
  } else {
    check_lengths({{"query_length", query_length}, {"key_length", key_length}});
  }
  // (no count check of the slopes here: under torch.export their size may be symbolic; an
  // impossible shape is refused by at::empty)
  return empty_with_lengths(bias_lengths(slopes, query_length, key_length),
                            slopes.options().dtype(dtype.value_or(slopes.scalar_type())));
}

// Checks an attention mask `[B, Lk]` (1 / true: a real token, 0 / false: padding) against the
// slopes and returns its batch size.
void check_attention_mask(const at::Tensor& mask, const at::Tensor& slopes, int64_t key_length) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(mask.dim() == 2 && mask.size(1) == key_length, who,
              ": attention_mask must be [batch, key_length] = [batch, ", key_length,
              "] (1 for a token, 0 for padding), but got shape ", mask.sizes());
  TORCH_CHECK(mask.scalar_type() == at::kBool || at::isIntegralType(mask.scalar_type(), false),
              who, ": attention_mask must be bool or integer (1 for a token, 0 for padding), but "
              "got ", mask.scalar_type());
  TORCH_CHECK(slopes.dim() == 1 || slopes.size(0) == mask.size(0), who,
              ": per-batch slopes [", slopes.size(0), ", ", slopes.size(1),
              "] and attention_mask of batch ", mask.size(0), " must agree on the batch size");
  detail::check_argument_device(mask, "attention_mask", slopes.device());
}

// Checks the arguments of alibi_causal_bias; returns whether an attention mask was given.
bool check_causal_bias_arguments(const at::Tensor& slopes, int64_t key_length,
                                 OptionalTensor attention_mask,
                                 c10::optional<at::ScalarType> dtype) {
  check_bias_arguments(slopes, dtype);
  check_length("key_length", key_length);
  const bool masked = attention_mask.has_value() && attention_mask->defined();
  if (masked) {
    check_attention_mask(*attention_mask, slopes, key_length);
  }
  return masked;
}

at::Tensor alibi_causal_bias_kernel(const at::Tensor& slopes, int64_t key_length,
                                    OptionalTensor attention_mask,
                                    c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kAlibiCausal);
  const bool masked = check_causal_bias_arguments(slopes, key_length, attention_mask, dtype);
  detail::checked_numel(
      "the bias' batch * heads * key_length",
      {masked && slopes.dim() == 1 ? attention_mask->size(0) : 1, slopes.numel(), key_length});
  const at::ScalarType compute = compute_type(slopes);
  at::Tensor bias;
  if (masked) {
    // each sequence's tokens count 0, 1, ... from its first token (left padding), padding 0
    const at::Tensor keep = attention_mask->to(at::kLong);
    const at::Tensor positions = (keep.cumsum(1) - 1) * keep;            // [B, Lk]
    const at::Tensor per_batch = slopes.dim() == 1 ? slopes.unsqueeze(0) : slopes; // [1|B, H]
    bias = per_batch.to(compute).unsqueeze(-1) * positions.to(compute).unsqueeze(1); // [B, H, Lk]
  } else {
    const at::Tensor positions =
        at::arange(key_length, slopes.options().dtype(at::kLong)).to(compute);
    bias = slopes.to(compute).unsqueeze(-1) * positions; // [H, Lk] or [B, H, Lk]
  }
  return bias.unsqueeze(-2).to(dtype.value_or(slopes.scalar_type()));
}

at::Tensor alibi_causal_bias_meta(const at::Tensor& slopes, SymLength key_length,
                                  OptionalTensor attention_mask,
                                  c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kAlibiCausal);
  std::vector<SymLength> shape = bias_lengths(slopes, 1, key_length);
  bool masked = attention_mask.has_value() && attention_mask->defined();
  if (const c10::optional<int64_t> keys = concrete(key_length)) {
    masked = check_causal_bias_arguments(slopes, *keys, attention_mask, dtype);
  } else {
    check_bias_arguments(slopes, dtype);
  }
  if (masked && slopes.dim() == 1) {
    shape.insert(shape.begin(), lengths_of(*attention_mask)[0]);
  }
  return empty_with_lengths(shape, slopes.options().dtype(dtype.value_or(slopes.scalar_type())));
}

at::Tensor relative_position_bucket_kernel(const at::Tensor& relative_position, bool bidirectional,
                                           int64_t num_buckets, int64_t max_distance) {
  check_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance);
  const at::Tensor input = relative_position.to(at::kCPU, at::kLong).contiguous();
  at::Tensor buckets = at::empty(input.sizes(), input.options());
  // The CUDA kernel's thread body, one item an iteration (kernels.h).
  const kernels::BucketBody body{
      input.data_ptr<int64_t>(), buckets.data_ptr<int64_t>(), bidirectional, num_buckets,
      max_distance,
      detail::relative_position_bucket_log_range(bidirectional, num_buckets, max_distance)};
  at::parallel_for(0, input.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      body(i);
    }
  });
  return buckets.to(relative_position.device());
}

at::Tensor relative_position_bucket_meta(const at::Tensor& relative_position, bool bidirectional,
                                         int64_t num_buckets, int64_t max_distance) {
  check_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance);
  // (sizes that may be symbolic: torch.export)
  return empty_with_lengths(lengths_of(relative_position),
                            relative_position.options().dtype(at::kLong));
}

// T5's bias `[1, H, Lq, Lk]` from the learned `[num_buckets, H]` table. The bucket depends only on
// key - query, so the Lq + Lk - 1 distinct distances are bucketed and looked up once, and the
// bias is their Toeplitz expansion (an unfold of the looked-up rows, flipped along the queries).
// Composite of differentiable ATen operations: the gradient reaches `weight`. These are the
// concrete lengths' bias; relative_position_bias_kernel below also takes symbolic ones.
at::Tensor relative_position_bias_rows(const at::Tensor& weight, int64_t query_length,
                                       int64_t key_length, bool bidirectional, int64_t max_distance,
                                       int64_t offset) {
  static constexpr detail::CallerName who{};
  check_length("query_length", query_length);
  check_length("key_length", key_length);
  TORCH_CHECK(offset >= 0 && offset <= std::numeric_limits<int64_t>::max() - query_length, who,
              ": offset (the position of the first query, e.g. the number of cached tokens) must "
              "be >= 0 and offset + query_length must fit in int64, but got offset = ",
              offset, " and query_length = ", query_length);
  // (Lq + Lk - 1 distances, then the [H, Lq, Lk] bias: counts a tensor can hold)
  detail::checked_numel("num_heads * query_length * key_length",
                        {weight.size(1), query_length, key_length});
  TORCH_CHECK(key_length <= std::numeric_limits<int64_t>::max() - query_length, who,
              ": query_length + key_length must fit in int64, but got ", query_length, " and ",
              key_length);
  // distances key - query from -(offset + Lq - 1) (first key, last query) up to Lk - 1 - offset
  const int64_t first = -(offset + query_length - 1);
  // (on CUDA made and bucketed on the weight's device: nothing copied from the host; other
  // devices bucket on the host)
  const c10::Device where =
      detail::checks_on_device(weight.device()) ? weight.device() : c10::Device(c10::kCPU);
  const at::Tensor distances =
      at::arange(first, key_length - offset, at::TensorOptions().dtype(at::kLong).device(where));
  const at::Tensor buckets =
      ops::relative_position_bucket(distances, bidirectional, weight.size(0), max_distance)
          .to(weight.device());
  if (query_length == 1 && !(weight.requires_grad() && at::GradMode::is_enabled())) {
    // (one query without a gradient, a decoding step: its Lk buckets are the rows, gathered
    // from the table's columns straight into a contiguous [H, Lk]; with a gradient, the
    // embedding below, whose backward is the one transformers' compute_bias has)
    return weight.t().index_select(1, buckets).view({1, weight.size(1), 1, key_length});
  }
  const at::Tensor rows = at::embedding(weight, buckets).t(); // [H, Lq + Lk - 1]
  // rows[:, i' + j] holds distance j - (Lq - 1 - i'): unfold gives [H, Lq, Lk] indexed by i'
  return rows.unfold(1, key_length, 1).flip({1}).unsqueeze(0);
}

at::Tensor relative_position_bias_kernel(const at::Tensor& weight, SymLength query_length,
                                         SymLength key_length, bool bidirectional,
                                         int64_t max_distance, SymLength offset) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kBias);
  static constexpr detail::CallerName who{};
  TORCH_CHECK(weight.defined() && weight.dim() == 2, who,
              ": weight must be the [num_buckets, num_heads] bias table (T5's "
              "relative_attention_bias.weight), but got ",
              weight.defined() ? "shape " + c10::str(weight.sizes()) : "an undefined tensor");
  detail::check_float_dtype("weight's dtype", weight.scalar_type());
  detail::check_bucket_arguments(bidirectional, weight.size(0), max_distance);
  const c10::optional<int64_t> queries = concrete(query_length);
  const c10::optional<int64_t> keys = concrete(key_length);
  const c10::optional<int64_t> start = concrete(offset);
  if (queries && keys && start) {
    return relative_position_bias_rows(weight, *queries, *keys, bidirectional, max_distance,
                                       *start);
  }
#if POSENC_SYMBOLIC_LENGTHS
  // Symbolic lengths (torch.export): the distance key - query of every (query, key), bucketed by
  // the same operator and looked up in the same table as above, so the same values, with every
  // size a symbol (the view above needs a concrete window).
  check_lengths({{"query_length", query_length}, {"key_length", key_length}});
  const auto index = at::TensorOptions().dtype(at::kLong).device(weight.device());
  const at::Tensor distances = at::arange(c10::Scalar(key_length), index).unsqueeze(0) -
                               at::arange(c10::Scalar(query_length), index)
                                   .add(c10::Scalar(offset))
                                   .unsqueeze(1); // [Lq, Lk]
  const at::Tensor buckets =
      ops::relative_position_bucket(distances, bidirectional, weight.size(0), max_distance);
  return at::embedding(weight, buckets).permute({2, 0, 1}).unsqueeze(0); // [1, H, Lq, Lk]
#else
  TORCH_INTERNAL_ASSERT(false, "lengths are concrete without SymInt");
#endif
}

at::Tensor relative_sinusoidal_table_meta(SymLength length, int64_t d_model, double base,
                                          c10::optional<SymLength> key_length,
                                          c10::optional<at::ScalarType> dtype,
                                          c10::optional<at::Device> device);

at::Tensor relative_sinusoidal_table_kernel(SymLength symbolic_length, int64_t d_model, double base,
                                            c10::optional<SymLength> key_length,
                                            c10::optional<at::ScalarType> dtype,
                                            c10::optional<at::Device> device) {
  if (device.has_value() && device->is_meta()) { // (fake tensors: a factory's meta device)
    return relative_sinusoidal_table_meta(symbolic_length, d_model, base, key_length, dtype,
                                          device);
  }
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kRelativeTable);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  const int64_t length = value_of(symbolic_length);
  const int64_t keys = key_length.has_value() ? value_of(*key_length) : length;
  detail::check_relative_table_arguments(length, keys, d_model, base);
  detail::SinusoidSpec spec;
  spec.d_model = d_model;
  spec.base = base;
  return detail::relative_sinusoidal_table(length, keys, spec, type,
                                           device.value_or(at::Device(at::kCPU)));
}

at::Tensor relative_sinusoidal_table_meta(SymLength length, int64_t d_model, double base,
                                          c10::optional<SymLength> key_length,
                                          c10::optional<at::ScalarType> dtype,
                                          c10::optional<at::Device> /*device*/) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kRelativeTable);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  const SymLength keys = key_length.has_value() ? *key_length : length;
  const c10::optional<int64_t> rows = concrete(length);
  const c10::optional<int64_t> columns = concrete(keys);
  if (rows && columns) {
    detail::check_relative_table_arguments(*rows, *columns, d_model, base);
  }
  return empty_with_lengths({length + keys - 1, SymLength(d_model)},
                            at::TensorOptions().dtype(type).device(at::kMeta));
}

// Transformer-XL's relative shift: scores [..., Lq, Lq + Lk - 1] against the relative table's
// rows (relative positions Lk - 1 .. -(Lq - 1)) to [..., Lq, Lk], out[i, j] = x[i, Lq - 1 - i + j]
// (the relative position of query offset + i and key j, offset = Lk - Lq). Element (i, j) lies at
// (Lq - 1) + i (P - 1) + j of a row-major x, so the result is a narrow / reshape / narrow of the
// flattened scores (no padding copy, unlike the zero-pad-and-view formulation).
at::Tensor rel_shift_kernel(const at::Tensor& x) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kRelShift);
  static constexpr detail::CallerName who{};
  TORCH_CHECK(x.defined() && x.dim() >= 2, who,
              ": x must be scores [..., Lq, Lq + Lk - 1] against a relative table, but got ",
              x.defined() ? "shape " + c10::str(shape_of(x)) : "an undefined tensor");
  // (the sizes compared, not read: torch.export keeps the batch and the lengths symbolic)
  const SymLength queries = size_of(x, -2);
  const SymLength relative = size_of(x, -1);
  TORCH_CHECK(queries >= 1 && relative >= queries, who,
              ": the last dimension of x (", relative,
              ") must hold the Lq + Lk - 1 relative positions of its Lq = ", queries,
              " queries, so it must be >= Lq >= 1; build the table with "
              "relative_sinusoidal_table(Lq, d_model, key_length=Lk)");
  const SymLength keys = relative - queries + 1;
  if (queries == 1) {
    return x.clone(at::MemoryFormat::Contiguous);
  }
  const SymLengths sizes = shape_of(x);
  std::vector<SymLength> flat(sizes.begin(), sizes.end() - 2);
  flat.push_back(queries * relative);
  std::vector<SymLength> rows(sizes.begin(), sizes.end() - 2);
  rows.push_back(queries);
  rows.push_back(relative - 1);
  const at::Tensor shifted = POSENC_SYM(x.reshape)(flat);
  const at::Tensor diagonals =
      POSENC_SYM(shifted.narrow)(-1, queries - 1, queries * (relative - 1));
  const at::Tensor by_query = POSENC_SYM(diagonals.reshape)(rows);
  // (copied into a fresh tensor rather than made contiguous: whether the narrow is already
  // contiguous depends on Lk == Lq + Lk - 2, which torch.export would have to decide)
  rows.back() = keys;
  return empty_with_lengths(rows, x.options()).copy_(POSENC_SYM(by_query.narrow)(-1, 0, keys));
}

// Llama 4's query temperature, in the form of Llama4TextAttention.forward (its layers without
// rotary: log1p(floor((p + 1) / floor_scale)) * attn_scale + 1, the product in the promoted dtype,
// cast back) or of Ministral 3's and Mistral 4's get_llama_4_attn_scale (every layer: 1 +
// attn_scale * log(1 + floor(p / floor_scale)), cast to the query's dtype before the product).
// Each with transformers' ATen operations in its order, from float32 positions, so that it rounds
// as transformers does on every device. (CompositeImplicitAutograd: differentiable, every device,
// and torch.export / ONNX see the ATen operations.)
at::Tensor attention_temperature_kernel(const at::Tensor& query,
                                        const c10::optional<at::Tensor>& positions, int64_t offset,
                                        double floor_scale, double attn_scale, bool heads_first,
                                        c10::string_view form) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kTemperature);
  static constexpr detail::CallerName who{};
  const AttentionTemperatureForm kind = detail::attention_temperature_form(form);
  detail::check_attention_temperature(floor_scale, attn_scale);
  TORCH_CHECK(
      query.defined() && query.dim() == 4 && detail::is_supported_float(query.scalar_type()), who,
      ": query must be a floating-point ",
      heads_first ? "[B, H, L, head_dim]" : "[B, L, H, head_dim]",
      " tensor (float16, bfloat16, float32 or float64), but got ",
      query.defined() ? c10::str(query.scalar_type(), " of shape ", query.sizes())
                      : std::string("an undefined tensor"),
      heads_first ? "" : "; pass heads_first=true for [B, H, L, head_dim]");
  // (lengths as torch.export sees them: symbolic where the input's are, ops/common/sym_length.h)
  const std::vector<SymLength> sizes = lengths_of(query);
  const SymLength& batch = sizes[0];
  const SymLength& length = sizes[heads_first ? 2 : 1];
  at::Tensor steps;
  if (positions.has_value() && positions->defined()) {
    detail::check_no_offset_with_positions(offset);
    TORCH_CHECK(at::isIntegralType(positions->scalar_type(), /*includeBool=*/false) ||
                    at::isFloatingType(positions->scalar_type()),
                who,
                ": positions must be an integer tensor (int64 or int32) or a floating-point one, "
                "but got ",
                positions->scalar_type());
    const std::vector<SymLength> given = lengths_of(*positions);
    const bool shared = given.size() == 1 && given[0] == length;
    // ([1, L]: one row for the batch, as transformers' default position_ids)
    const bool each =
        given.size() == 2 && (given[0] == batch || given[0] == 1) && given[1] == length;
    TORCH_CHECK(shared || each, who, ": positions must have shape [L] = [", length,
                "] or [B, L] = [", batch, ", ", length, "] (or [1, L]), but got ",
                c10::ArrayRef<SymLength>(given));
    detail::check_positions_device(*positions, query.device());
    steps = positions->to(at::kFloat);
  } else {
    if (const c10::optional<int64_t> known = concrete(length)) {
      detail::check_offset_start(offset, *known);
    } else {
      detail::check_offset_start(offset, 0);
    }
    // (int64 positions first, as transformers: a float32 arange would round large offsets
    // differently)
    steps = at::arange(c10::Scalar(length), query.options().dtype(at::kLong))
                .add(offset)
                .to(at::kFloat);
  }
  // [L] or [B, L] scales against [B, L, H, D] (tokens first) or [B, H, L, D] (heads first)
  const auto shaped = [&](const at::Tensor& scales) {
    const at::Tensor rows = scales.unsqueeze(-1);
    return heads_first ? (scales.dim() == 2 ? rows.unsqueeze(1) : rows) : rows.unsqueeze(-1);
  };
  if (kind == AttentionTemperatureForm::kLlama4) {
    const at::Tensor scales =
        steps.clamp_min(-1.0).add(1.0).div(floor_scale).floor().log1p().mul(attn_scale).add(1.0);
    return query.mul(shaped(scales)).to(query.scalar_type());
  }
  const at::Tensor scales =
      steps.clamp_min(0.0).div(floor_scale).floor().add(1.0).log().mul(attn_scale).add(1.0);
  return query.mul(shaped(scales).to(query.scalar_type()));
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("alibi_slopes", TORCH_FN(alibi_slopes_kernel));
  m.impl("alibi_bias", TORCH_FN(alibi_bias_kernel));
  m.impl("alibi_causal_bias", TORCH_FN(alibi_causal_bias_kernel));
  // (CUDA has its own kernel, cuda_kernel.cu, which reads nothing back)
  m.impl("relative_position_bucket", TORCH_FN(relative_position_bucket_kernel));
  m.impl("relative_sinusoidal_table", TORCH_FN(relative_sinusoidal_table_kernel));
}


TORCH_LIBRARY_IMPL(posenc, CompositeImplicitAutograd, m) {
  m.impl("relative_position_bias", TORCH_FN(relative_position_bias_kernel));
  m.impl("rel_shift", TORCH_FN(rel_shift_kernel));
  m.impl("attention_temperature", TORCH_FN(attention_temperature_kernel));
}

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("alibi_slopes", TORCH_FN(alibi_slopes_meta));
  m.impl("alibi_bias", TORCH_FN(alibi_bias_meta));
  m.impl("alibi_causal_bias", TORCH_FN(alibi_causal_bias_meta));
  m.impl("relative_position_bucket", TORCH_FN(relative_position_bucket_meta));
  m.impl("relative_sinusoidal_table", TORCH_FN(relative_sinusoidal_table_meta));
}

using SlopesSignature = at::Tensor(int64_t, double, int64_t, c10::optional<int64_t>,
                                   c10::optional<at::ScalarType>, c10::optional<at::Device>);
using AlibiSignature = at::Tensor(const at::Tensor&, int64_t, int64_t, c10::optional<int64_t>,
                                  bool, c10::optional<at::ScalarType>);
using AlibiCausalSignature = at::Tensor(const at::Tensor&, int64_t, OptionalTensor,
                                        c10::optional<at::ScalarType>);
using BucketSignature = at::Tensor(const at::Tensor&, bool, int64_t, int64_t);
// (the kernels of these two take SymLength: called so, unboxed)
using BiasSignature = at::Tensor(const at::Tensor&, SymLength, SymLength, bool, int64_t, SymLength);
using RelativeTableSignature = at::Tensor(SymLength, int64_t, double, c10::optional<SymLength>,
                                          c10::optional<at::ScalarType>, c10::optional<at::Device>);
using RelShiftSignature = at::Tensor(const at::Tensor&);
using TemperatureSignature = at::Tensor(const at::Tensor&, const c10::optional<at::Tensor>&,
                                        int64_t, double, double, bool, c10::string_view);

at::Tensor alibi_slopes(int64_t num_heads, double max_bias, int64_t first_head,
                        c10::optional<int64_t> heads, c10::optional<at::ScalarType> dtype,
                        c10::optional<at::Device> device) {
  static const auto op = typed_op<SlopesSignature>(kSlopes);
  return op.call(num_heads, max_bias, first_head, heads, dtype, device);
}

at::Tensor alibi_bias(const at::Tensor& slopes, int64_t query_length, int64_t key_length,
                      c10::optional<int64_t> offset, bool causal,
                      c10::optional<at::ScalarType> dtype) {
  static const auto op = typed_op<AlibiSignature>(kAlibi);
  return op.call(slopes, query_length, key_length, offset, causal, dtype);
}

at::Tensor alibi_causal_bias(const at::Tensor& slopes, int64_t key_length,
                             const c10::optional<at::Tensor>& attention_mask,
                             c10::optional<at::ScalarType> dtype) {
  static const auto op = typed_op<AlibiCausalSignature>(kAlibiCausal);
  return op.call(slopes, key_length, attention_mask, dtype);
}

at::Tensor relative_position_bucket(const at::Tensor& relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance) {
  static const auto op = typed_op<BucketSignature>(kBucket);
  return op.call(relative_position, bidirectional, num_buckets, max_distance);
}

at::Tensor relative_position_bias(const at::Tensor& weight, int64_t query_length,
                                  int64_t key_length, bool bidirectional, int64_t max_distance,
                                  int64_t offset) {
  static const auto op = typed_op<BiasSignature>(kBias);
  return op.call(weight, SymLength(query_length), SymLength(key_length), bidirectional,
                 max_distance, SymLength(offset));
}

at::Tensor relative_sinusoidal_table(int64_t length, int64_t d_model, double base,
                                     c10::optional<int64_t> key_length,
                                     c10::optional<at::ScalarType> dtype,
                                     c10::optional<at::Device> device) {
  static const auto op = typed_op<RelativeTableSignature>(kRelativeTable);
  const c10::optional<SymLength> keys =
      key_length.has_value() ? c10::optional<SymLength>(SymLength(*key_length)) : c10::nullopt;
  return op.call(SymLength(length), d_model, base, keys, dtype, device);
}

at::Tensor rel_shift(const at::Tensor& x) {
  static const auto op = typed_op<RelShiftSignature>(kRelShift);
  return op.call(x);
}

at::Tensor attention_temperature(const at::Tensor& query,
                                 const c10::optional<at::Tensor>& positions, int64_t offset,
                                 double floor_scale, double attn_scale, bool heads_first,
                                 c10::string_view form) {
  static const auto op = typed_op<TemperatureSignature>(kTemperature);
  return op.call(query, positions, offset, floor_scale, attn_scale, heads_first, form);
}

} // namespace ops
} // namespace posenc
