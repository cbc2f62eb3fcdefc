#include <posenc/modules/rotary_embedding.h>

#include <posenc/functional/positions.h>

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/rope_types.h"
#include "detail/rotary.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <ios>
#include <limits>

namespace posenc {

RopeScalingOptions::RopeScalingOptions(RopeType type) : type_(type) {}

RotaryEmbeddingOptions::RotaryEmbeddingOptions(int64_t head_dim, int64_t max_len)
    : head_dim_(head_dim), max_len_(max_len) {}

int64_t RotaryEmbeddingOptions::cached_rows() const {
  return cached_len_.value_or(max_len_);
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void RotaryEmbeddingImpl::reset() {
  TORCH_CHECK(options.head_dim() >= 2, kName, ": head_dim must be >= 2, but got ",
              options.head_dim());
  const int64_t rotary_dim = options.rotated_width();
  TORCH_CHECK(rotary_dim <= options.head_dim(), kName, ": rotary_dim (", rotary_dim,
              ") must be <= head_dim (", options.head_dim(), ")");
  TORCH_CHECK(!options.deinterleave() || options.pairing() == RotaryPairing::kHalfSplit, kName,
              ": deinterleave regroups pairs (2i, 2i + 1) into halves (i, i + R/2), the "
              "layout of pairing kHalfSplit, but pairing is ",
              options.pairing(),
              "; pass pairing(kHalfSplit) with deinterleave, or drop "
              "deinterleave for pairs (2i, 2i + 1) kept in place");
  TORCH_CHECK(options.max_len() >= 1, kName, ": max_len must be >= 1, but got ", options.max_len(),
              "; pass the number of positions the module rotates");
  // (the width and base first: a cache of a width over the limit is reported as such)
  detail::check_rotary_arguments(kName, 1, rotary_dim, options.base());
  const int64_t cached = options.cached_rows();
  const char* length = options.cached_len() ? "cached_len" : "max_len";
  TORCH_CHECK(cached >= 1 && cached <= options.max_len(), kName,
              ": cached_len must be in [1, max_len = ", options.max_len(), "], but got ", cached,
              "; leave it unset to cache every position");
  TORCH_CHECK(rotary_dim < 2 || cached <= detail::kMaxTableElements / (rotary_dim / 2), kName,
              ": the cos/sin caches hold ", length, " * rotary_dim / 2 = ", cached, " * ",
              rotary_dim / 2,
              " elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); ",
              options.cached_len()
                  ? "lower cached_len (positions past it are computed on each call)"
                  : "set cached_len (e.g. 8192; positions past it are computed on each call) or "
                    "lower max_len");
  detail::check_rotary_arguments(kName, options.cached_rows(), rotary_dim, options.base());
  if (!options.mrope_section().empty()) {
    detail::mrope_axes(kName, options.mrope_section(), options.mrope_interleaved(), rotary_dim / 2);
  }
  build_tables(cos.defined() ? cos.scalar_type() : torch::kFloat,
               cos.defined() ? cos.device() : torch::Device(torch::kCPU));
}

void RotaryEmbeddingImpl::build_tables(torch::Dtype dtype, torch::Device device) {
  // rope_frequencies checks every scaling parameter before anything is built.
  const detail::RopeSpec spec = detail::rope_spec(options);
  const detail::RopeFrequencies frequencies = detail::rope_frequencies(spec, c10::nullopt, kName);
  // The frequencies stay float64, on the caches' device (passed with them). Everything is computed
  // before the first member changes.
  const auto float64 = at::TensorOptions().dtype(at::kDouble);
  torch::Tensor inv_freq = at::tensor(frequencies.inv_freq, float64).to(device);
  const c10::optional<int64_t> switch_length = detail::rope_switch_length(spec);
  torch::Tensor long_inv_freq =
      detail::rope_type_entry(spec.scaling.type()).switches == detail::RopeSwitch::kLongFactors
          ? at::tensor(detail::rope_frequencies(spec, *switch_length + 1, kName).inv_freq, float64)
                .to(device)
          : torch::Tensor();
  const auto positions =
      torch::arange(options.cached_rows(), torch::TensorOptions().dtype(torch::kLong));
  auto tables = detail::rotary_rows(positions, frequencies, dtype);
  detail::set_buffer(*this, "cos", cos, tables.first.to(device));
  detail::set_buffer(*this, "sin", sin, tables.second.to(device));
  inv_freq_ = std::move(inv_freq);
  long_inv_freq_ = std::move(long_inv_freq);
  attention_factor_ = frequencies.attention_factor;
  variant_attention_factor_ = frequencies.variant_attention_factor;
  switch_length_ = switch_length;
}

std::vector<torch::Tensor*> RotaryEmbeddingImpl::derived_tables() {
  return {&cos, &sin};
}

std::vector<detail::TableSlot> RotaryEmbeddingImpl::table_slots() {
  const std::vector<int64_t> shape = {options.cached_rows(), options.rotated_width() / 2};
  return {{"cos", &cos, shape, /*is_buffer=*/true}, {"sin", &sin, shape, /*is_buffer=*/true}};
}

void RotaryEmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "posenc::RotaryEmbedding(head_dim=" << options.head_dim()
         << ", max_len=" << options.max_len();
  if (options.cached_rows() != options.max_len()) {
    stream << ", cached_len=" << options.cached_rows();
  }
  stream << ", rotary_dim=" << options.rotated_width() << ", base=" << options.base()
         << ", pairing=" << options.pairing();
  if (options.deinterleave()) {
    stream << ", deinterleave=true";
  }
  if (options.inverse()) {
    stream << ", inverse=true";
  }
  stream << ", heads_first=" << options.heads_first();
  if (options.beyond_max_len() != BeyondMaxLen::kError) {
    stream << ", beyond_max_len=" << options.beyond_max_len();
  }
  if (options.scaling().type() != RopeType::kDefault) {
    stream << ", rope_type=" << options.scaling().type()
           << detail::describe_rope_scaling(detail::rope_spec(options), variant_attention_factor_);
  }
  if (!options.freq_factors().empty()) {
    stream << ", freq_factors=[" << options.freq_factors().size() << "]";
  }
  if (!options.mrope_section().empty()) {
    stream << ", mrope_section=" << c10::IntArrayRef(options.mrope_section());
    if (options.mrope_interleaved()) {
      stream << ", mrope_interleaved=true";
    }
  }
  stream << ")";
}

torch::Tensor RotaryEmbeddingImpl::forward_packed(const torch::Tensor& x,
                                                  const torch::Tensor& cu_seqlens,
                                                  const torch::Tensor& start_positions) {
  TORCH_CHECK(x.defined() && x.dim() == 3, kName,
              ": forward_packed expects packed queries or keys [T, H, head_dim], but got ",
              x.defined() ? x.sizes() : at::IntArrayRef{},
              "; for padded batches [B, L, H, head_dim] call forward or forward_positions");
  TORCH_CHECK(cu_seqlens.defined(), kName, ": forward_packed needs cu_seqlens");
  const torch::Tensor positions = [&] {
    const detail::CallerScope caller(kName);
    return functional::packed_positions(cu_seqlens, x.size(0), start_positions);
  }();
  // [T, H, Dh] as a batch of one in the module's layout.
  const bool heads_first = options.heads_first();
  const torch::Tensor batch = heads_first ? x.transpose(0, 1).unsqueeze(0) : x.unsqueeze(0);
  const torch::Tensor out = forward_at(batch, 0, positions.to(x.device()));
  return heads_first ? out.squeeze(0).transpose(0, 1) : out.squeeze(0);
}

torch::Tensor RotaryEmbeddingImpl::inv_freq() const {
  return inv_freq_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

double RotaryEmbeddingImpl::attention_factor() const {
  return variant_attention_factor_;
}

torch::Tensor RotaryEmbeddingImpl::inv_freq(int64_t seq_len) const {
  TORCH_CHECK(seq_len >= 1, kName, ": seq_len must be >= 1 (a call's last position + 1), but got ",
              seq_len);
  return at::tensor(detail::rope_frequencies(detail::rope_spec(options), seq_len, kName).inv_freq,
                    at::TensorOptions().dtype(at::kDouble));
}

c10::optional<int64_t> RotaryEmbeddingImpl::call_end(int64_t offset, int64_t length,
                                                     const torch::Tensor& positions) const {
  if (!positions.defined()) {
    // offset + length, if it is a valid call's end (the operator reports the others).
    if (offset < 0 || length < 1 || offset > std::numeric_limits<int64_t>::max() - length) {
      return c10::nullopt;
    }
    return offset + length;
  }
  if (positions.numel() == 0) {
    return c10::nullopt;
  }
  if (detail::is_continuous(positions)) {
    // Fractional positions: the end is the first integer past the largest (NaN/Inf and values
    // out of range are left to the operator's message).
    const double last = positions.max().item<double>();
    if (!(last >= 0.0 && last < 9.2e18)) {
      return c10::nullopt;
    }
    return static_cast<int64_t>(std::floor(last)) + 1;
  }
  if (!c10::isIntegralType(positions.scalar_type(), false)) {
    return c10::nullopt;
  }
  const int64_t last = positions.max().item<int64_t>();
  if (last < 0 || last == std::numeric_limits<int64_t>::max()) {
    return c10::nullopt;
  }
  return last + 1;
}

void RotaryEmbeddingImpl::check_within_max_len(const torch::Tensor& x, int64_t offset,
                                               const torch::Tensor& positions) const {
  const int64_t max_len = options.max_len();
  if (!positions.defined()) {
    const int64_t length = x.size(options.heads_first() ? 2 : 1);
    if (offset >= 0 && length >= 1) { // (other offsets and lengths get the operator's message)
      detail::check_offset(kName, offset, length, max_len, detail::caller_hint());
    }
  } else if (c10::isIntegralType(positions.scalar_type(), false) && positions.numel() > 0) {
    if (detail::checks_on_device(positions.device())) { // (nothing read back)
      detail::check_on_device(detail::within(positions, -1.0, static_cast<double>(max_len - 1)),
                              positions, detail::DeviceCheck::kPositionsInCaches);
    } else {
      const int64_t largest = positions.max().item<int64_t>();
      detail::check_positions_range(kName, -1, largest, max_len, detail::caller_hint());
    }
  }
}

void RotaryEmbeddingImpl::check_heads(const torch::Tensor& x) const {
  // The operator accepts any head width >= the rotated one (partial rotary from the caches alone);
  // the module knows head_dim, and an input of another width contradicts its options. (Heads
  // narrower than the rotated width get the operator's message.)
  TORCH_CHECK(!x.defined() || x.dim() != 4 || x.size(3) == options.head_dim() ||
                  x.size(3) < options.rotated_width(),
              kName, ": expected heads of width head_dim = ", options.head_dim(), ", but got ",
              x.size(3), " (input shape ", x.sizes(),
              "); build the module with head_dim = ", x.size(3), " or split the heads to ",
              options.head_dim(), " channels");
}

RotaryEmbeddingImpl::CallTables RotaryEmbeddingImpl::call_tables(
    const torch::Tensor& x, int64_t offset, const torch::Tensor& positions) const {
  check_heads(x);
  const bool extrapolate = options.beyond_max_len() == BeyondMaxLen::kExtrapolate;
  // Floating-point positions are computed from the frequencies, at any position: they never read
  // (or interpolate) the caches.
  const bool continuous = detail::is_continuous(positions);
  // Positions past the cached rows but within max_len (cached_len < max_len) are computed from
  // the frequencies, as extrapolated ones are; the module then holds max_len itself.
  const bool uncached = cos.size(0) < options.max_len();
  CallTables tables{cos, sin, extrapolate || continuous || uncached ? inv_freq_ : torch::Tensor(),
                    positions};
  if (uncached && !extrapolate && !continuous && x.defined() && x.dim() == 4) {
    check_within_max_len(x, offset, positions);
  }
  if (switch_length_ && x.defined() && x.dim() == 4 && positions.defined() &&
      detail::checks_on_device(positions.device())) {
    // dynamic / longrope, positions on a device (never read back, nothing copied from the host):
    // the frequencies of the call, chosen there by its end from the module's own (the same choice
    // as below), and every row computed from them (the cached rows' values, within an ulp of the
    // cos/sin roundings, where the call does not switch). Without extrapolation, positions past
    // max_len are refused there.
    if (!extrapolate && !continuous) {
      detail::check_on_device(
          detail::within(positions, -1.0, static_cast<double>(options.max_len() - 1)), positions,
          detail::DeviceCheck::kPositionsInCaches);
    }
    tables.inv_freq = detail::rope_frequencies_at(
        detail::rope_spec(options),
        long_inv_freq_.defined() ? at::stack({inv_freq_, long_inv_freq_}) : inv_freq_, positions,
        kName);
    tables.cos = cos.narrow(0, 0, 0);
    tables.sin = sin.narrow(0, 0, 0);
  } else if (switch_length_ && x.defined() && x.dim() == 4) {
    // dynamic / longrope: a call reaching past the switch length rotates all of its positions
    // with the frequencies of its own length (longrope: the long ones, computed once), for
    // exactly the rows it uses (an empty slice of the caches makes every position one "past the
    // caches"). Other calls take the cached path.
    const int64_t length = x.size(options.heads_first() ? 2 : 1);
    const c10::optional<int64_t> end = call_end(offset, length, positions);
    if (end && *end > *switch_length_ && (extrapolate || continuous || *end <= options.max_len())) {
      tables.inv_freq =
          long_inv_freq_.defined()
              ? long_inv_freq_
              : detail::upload( // (no copy from host memory: see detail::upload)
                    at::tensor(
                        detail::rope_frequencies(detail::rope_spec(options), end, kName).inv_freq,
                        at::TensorOptions().dtype(at::kDouble)),
                    cos.device());
      tables.cos = cos.narrow(0, 0, 0);
      tables.sin = sin.narrow(0, 0, 0);
    }
  }
  if (positions.defined() && positions.dim() == 3) {
    // Multimodal: each token's own cos/sin rows, and positions indexing them.
    TORCH_CHECK(!options.mrope_section().empty(), kName, ": positions ", positions.sizes(),
                " are multimodal [3, B, L] positions, but the module has no mrope_section; build "
                "it with mrope_section (e.g. {16, 24, 24} for Qwen2-VL) or pass [B, L] positions");
    const auto rows = functional::detail::multimodal_rotary_tables(
        tables.cos, tables.sin, positions, options.mrope_section(), options.mrope_interleaved(),
        tables.inv_freq, attention_factor_);
    const int64_t tokens = positions.size(1) * positions.size(2);
    const int64_t half = cos.size(1);
    tables = {rows.first.view({tokens, half}), rows.second.view({tokens, half}), torch::Tensor(),
              at::arange(tokens, at::TensorOptions().dtype(at::kLong).device(x.device()))
                  .view({positions.size(1), positions.size(2)})};
  }
  return tables;
}

namespace {
const char* beyond_hint(const RotaryEmbeddingOptions& options) {
  return options.beyond_max_len() == BeyondMaxLen::kExtrapolate
             ? ""
             : " or pass beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)";
}
} // namespace

torch::Tensor RotaryEmbeddingImpl::regrouped(const torch::Tensor& x) const {
  const int64_t rotary_dim = options.rotated_width();
  if (!options.deinterleave() || !x.defined() || x.dim() < 1 || x.size(-1) < rotary_dim) {
    return x; // (other inputs get the operator's messages)
  }
  const torch::Tensor part = x.narrow(-1, 0, rotary_dim);
  std::vector<int64_t> pairs(part.sizes().begin(), part.sizes().end());
  pairs.back() = rotary_dim / 2;
  pairs.push_back(2);
  // (a copy: the transposed pairs are not contiguous)
  const torch::Tensor halves = part.reshape(pairs).transpose(-1, -2).reshape(part.sizes());
  if (rotary_dim == x.size(-1)) {
    return halves;
  }
  return at::cat({halves, x.narrow(-1, rotary_dim, x.size(-1) - rotary_dim)}, -1);
}

torch::Tensor RotaryEmbeddingImpl::forward_at(const torch::Tensor& x, int64_t offset,
                                              const torch::Tensor& positions) {
  const detail::CallerScope caller(kName, beyond_hint(options));
  const CallTables tables = call_tables(x, offset, positions);
  return functional::detail::rotary_embedding(
      regrouped(x), tables.cos, tables.sin, offset, tables.positions, options.pairing(),
      options.heads_first(), tables.inv_freq, attention_factor_, options.inverse());
}

std::tuple<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward_qk_at(
    const torch::Tensor& q, const torch::Tensor& k, int64_t offset, const torch::Tensor& positions,
    bool in_place) {
  const detail::CallerScope caller(kName, beyond_hint(options));
  check_heads(k);
  const CallTables tables = call_tables(q, offset, positions);
  if (options.deinterleave() && in_place) {
    // Pairs (2i, 2i + 1) turned where they lie (the operator checks q and k before writing
    // either), then regrouped into halves: the arithmetic of turning regrouped copies.
    functional::detail::rotary_embedding_qk(q, k, tables.cos, tables.sin, offset, tables.positions,
                                            RotaryPairing::kInterleaved, options.heads_first(),
                                            tables.inv_freq, attention_factor_, /*in_place=*/true,
                                            options.inverse());
    const int64_t rotary_dim = options.rotated_width();
    for (const torch::Tensor* t : {&q, &k}) {
      torch::Tensor part = t->narrow(-1, 0, rotary_dim);
      part.copy_(regrouped(part));
    }
    return {q, k};
  }
  if (options.deinterleave()) {
    return functional::detail::rotary_embedding_qk(
        regrouped(q), regrouped(k), tables.cos, tables.sin, offset, tables.positions,
        options.pairing(), options.heads_first(), tables.inv_freq, attention_factor_,
        /*in_place=*/false, options.inverse());
  }
  return functional::detail::rotary_embedding_qk(
      q, k, tables.cos, tables.sin, offset, tables.positions, options.pairing(),
      options.heads_first(), tables.inv_freq, attention_factor_, in_place, options.inverse());
}

std::tuple<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward_qk(const torch::Tensor& q,
                                                                         const torch::Tensor& k,
                                                                         int64_t offset) {
  return forward_qk_at(q, k, offset, torch::Tensor(), /*in_place=*/false);
}

std::tuple<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward_qk_positions(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& positions) {
  TORCH_CHECK(positions.defined(), kName,
              ": forward_qk_positions needs positions; use forward_qk(q, k, offset) otherwise");
  return forward_qk_at(q, k, 0, positions, /*in_place=*/false);
}

void RotaryEmbeddingImpl::forward_qk_(torch::Tensor& q, torch::Tensor& k, int64_t offset,
                                      const torch::Tensor& positions) {
  forward_qk_at(q, k, offset, positions, /*in_place=*/true);
}

} // namespace posenc
