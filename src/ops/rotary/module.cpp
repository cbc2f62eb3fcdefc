// A RotaryEmbedding's call (ops/rotary/module.h), and the rotary_embedding_call operators through
// which posenc.nn's module makes it.

#include "ops/rotary/module.h"
#include "ops/common/dispatch.h"
#include "ops/common/options_reader.h"
#include "ops/common/sym_length.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/json_text.h"
#include "detail/rope_types.h"
#include "detail/rotary.h"

#include <posenc/ops/kv_cache.h>
#include <posenc/ops/rotary.h>

#include <ATen/ops/_assert_async.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace posenc {
namespace ops {
namespace {

constexpr const char* kName = "RotaryEmbedding";

// (sizes of the inputs: ops/common/sym_length.h's SymLength, size_of, shape_of and value_of)

/// The last position + 1 of a call (explicit positions: their maximum, one host read), or unset
/// when the call is invalid (the operator reports it).
c10::optional<int64_t> call_end(int64_t offset, int64_t length, const at::Tensor& positions) {
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

/// Checks where they lie, without reading them back, that positions on a device lie in [-1,
/// max_len): posenc's device check on real tensors; on the tensors of a tracing mode (FakeTensor,
/// torch.compile: the Python dispatch key; they carry no values) ATen's _assert_async, which such
/// modes trace.
void check_in_caches_on_device(const at::Tensor& positions, int64_t max_len) {
  const at::Tensor ok = detail::within(positions, -1.0, static_cast<double>(max_len - 1));
#if POSENC_SYMBOLIC_LENGTHS
  if (positions.key_set().has(c10::DispatchKey::Python)) {
    at::_assert_async(ok.all(),
                      detail::device_check_message(detail::DeviceCheck::kPositionsInCaches));
    return;
  }
#endif
  detail::check_on_device(ok, positions, detail::DeviceCheck::kPositionsInCaches);
}

/// The frequencies of a call through the rope_frequencies operator (whose kernels serve every
/// device and tracing mode): those of a call ending at `end`, on `device`; or, for positions on a
/// device, chosen there by their end from the module's own `own` (nothing read back).
at::Tensor call_frequencies(const RotaryEmbeddingOptions& options, c10::optional<int64_t> end,
                            const at::Tensor& positions, const at::Tensor& own,
                            const c10::Device& device) {
  const detail::RopeSpec spec = detail::rope_spec(options);
  RopeFrequenciesArguments arguments;
  arguments.rotary_dim = spec.rotary_dim;
  arguments.base = spec.base;
  arguments.scaling = spec.scaling;
  arguments.freq_factors = spec.freq_factors;
  if (positions.defined()) {
    arguments.positions = positions;
    arguments.frequencies = own;
  } else {
    arguments.seq_len = end;
    arguments.device = device;
  }
  return std::get<0>(rope_frequencies(arguments));
}

/// With fewer cached rows than max_len (and no extrapolation): checks that the call's integer
/// positions lie below max_len (the operator computes every row past the caches).
void check_within_max_len(const RotaryEmbeddingOptions& options, const at::Tensor& x,
                          int64_t offset, const at::Tensor& positions) {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  const int64_t max_len = options.max_len();
  if (!positions.defined()) {
    const int64_t length = value_of(size_of(x, options.heads_first() ? 2 : 1));
    if (offset >= 0 && length >= 1) { // (other offsets and lengths get the operator's message)
      detail::check_offset(offset, length, max_len, detail::caller_hint());
    }
  } else if (c10::isIntegralType(positions.scalar_type(), false) && positions.numel() > 0) {
    if (detail::checks_on_device(positions.device())) { // (nothing read back)
      check_in_caches_on_device(positions, max_len);
    } else {
      const int64_t largest = positions.max().item<int64_t>();
      detail::check_positions_range(-1, largest, max_len, detail::caller_hint());
    }
  }
}

/// Checks that heads `x` have the module's head_dim.
void check_heads(const RotaryEmbeddingOptions& options, const at::Tensor& x) {
  // The operator accepts any head width >= the rotated one (partial rotary from the caches alone);
  // the module knows head_dim, and an input of another width contradicts its options. (Heads
  // narrower than the rotated width get the operator's message.)
  // (sizes that torch.export keeps symbolic: sym_size)
  if (!x.defined() || x.dim() != 4) {
    return;
  }
  const SymLength width = size_of(x, 3);
  TORCH_CHECK(width == options.head_dim() || width < options.rotated_width(), kName,
              ": expected heads of width head_dim = ", options.head_dim(), ", but got ", width,
              " (input shape ", shape_of(x), "); build the module with head_dim = ", width,
              " or split the heads to ", options.head_dim(), " channels");
}

/// The caches and frequencies a call reads, and its positions.
struct CallTables {
  at::Tensor cos;
  at::Tensor sin;
  at::Tensor inv_freq;  // undefined: positions must lie in the caches
  at::Tensor positions; // the call's, or (multimodal) indices of per-token rows
};

/// ERNIE 4.5-VL's multimodal rows (mrope_hw_alternating): the rows of each axis' positions for
/// every frequency (multimodal_rotary_tables with one block per axis: its checks, rows past the
/// caches and device paths), each frequency then taken from its axis' rows.
std::tuple<at::Tensor, at::Tensor> hw_alternating_rows(const RotaryEmbeddingOptions& options,
                                                       const CallTables& tables,
                                                       const at::Tensor& positions,
                                                       double attention_factor) {
  const int64_t half = options.rotated_width() / 2;
  std::vector<std::tuple<at::Tensor, at::Tensor>> axes;
  for (int64_t axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> block(3, 0);
    block[static_cast<size_t>(axis)] = half;
    axes.push_back(multimodal_rotary_tables(tables.cos, tables.sin, positions, block,
                                            /*interleaved=*/false,
                                            optional_tensor(tables.inv_freq), attention_factor));
  }
  // detail::mrope_hw_alternating_axes as masks over the frequencies (arange: traceable by
  // torch.export, whose fake tensors hold no data to copy a constant into)
  const at::Tensor frequency =
      at::arange(half, at::TensorOptions().dtype(at::kLong).device(positions.device()));
  const int64_t alternating = options.mrope_section()[1] + options.mrope_section()[2];
  const at::Tensor paired = frequency.lt(alternating);
  const at::Tensor height = paired.logical_and(frequency.remainder(2).eq(0));
  const at::Tensor width = paired.logical_and(frequency.remainder(2).eq(1));
  const auto pick = [&](const at::Tensor& t, const at::Tensor& h, const at::Tensor& w) {
    return at::where(height, h, at::where(width, w, t));
  };
  return {pick(std::get<0>(axes[0]), std::get<0>(axes[1]), std::get<0>(axes[2])),
          pick(std::get<1>(axes[0]), std::get<1>(axes[1]), std::get<1>(axes[2]))};
}

/// The caches and frequencies a call of `x` at these positions reads (dynamic / longrope: its own
/// frequencies past the switch length), after checking x's head width.
CallTables call_tables(const RotaryModuleCall& call, const RotaryModuleTensors& tensors,
                       const at::Tensor& x, int64_t offset, const at::Tensor& positions) {
  const RotaryEmbeddingOptions& options = call.options;
  check_heads(options, x);
  const bool extrapolate = options.beyond_max_len() == BeyondMaxLen::kExtrapolate;
  // Floating-point positions are computed from the frequencies, at any position: they never read
  // (or interpolate) the caches.
  const bool continuous = detail::is_continuous(positions);
  // Positions past the cached rows but within max_len (cached_len < max_len) are computed from
  // the frequencies, as extrapolated ones are; the module then holds max_len itself.
  const bool uncached = tensors.cos.size(0) < options.max_len();
  CallTables tables{tensors.cos, tensors.sin,
                    extrapolate || continuous || uncached ? tensors.inv_freq : at::Tensor(),
                    positions};
  if (uncached && !extrapolate && !continuous && x.defined() && x.dim() == 4) {
    check_within_max_len(options, x, offset, positions);
  }
  if (call.switch_length && x.defined() && x.dim() == 4 && positions.defined() &&
      detail::checks_on_device(positions.device())) {
    // dynamic / longrope, positions on a device (never read back, nothing copied from the host):
    // the frequencies of the call, chosen there by its end from the module's own (the same choice
    // as below), and every row computed from them (the cached rows' values, within an ulp of the
    // cos/sin roundings, where the call does not switch). Without extrapolation, positions past
    // max_len are refused there.
    if (!extrapolate && !continuous) {
      check_in_caches_on_device(positions, options.max_len());
    }
    tables.inv_freq = call_frequencies(
        options, c10::nullopt, positions,
        tensors.long_inv_freq.defined() ? at::stack({tensors.inv_freq, tensors.long_inv_freq})
                                        : tensors.inv_freq,
        positions.device());
    tables.cos = tensors.cos.narrow(0, 0, 0);
    tables.sin = tensors.sin.narrow(0, 0, 0);
  } else if (call.switch_length && x.defined() && x.dim() == 4) {
    // dynamic / longrope: a call reaching past the switch length rotates all of its positions
    // with the frequencies of its own length (longrope: the long ones, computed once), for
    // exactly the rows it uses (an empty slice of the caches makes every position one "past the
    // caches"). Other calls take the cached path.
    const int64_t length = value_of(size_of(x, options.heads_first() ? 2 : 1));
    const c10::optional<int64_t> end = call_end(offset, length, positions);
    if (end && *end > *call.switch_length &&
        (extrapolate || continuous || *end <= options.max_len())) {
      tables.inv_freq = tensors.long_inv_freq.defined()
                            ? tensors.long_inv_freq
                            : call_frequencies(options, end, at::Tensor(), at::Tensor(),
                                               tensors.cos.device());
      tables.cos = tensors.cos.narrow(0, 0, 0);
      tables.sin = tensors.sin.narrow(0, 0, 0);
    }
  }
  if (positions.defined() && positions.dim() == 3) {
    // Multimodal: each token's own cos/sin rows, and positions indexing them.
    TORCH_CHECK(!options.mrope_section().empty(), kName, ": positions ", positions.sizes(),
                " are multimodal [3, B, L] positions, but the module has no mrope_section; build "
                "it with mrope_section (e.g. {16, 24, 24} for Qwen2-VL) or pass [B, L] positions");
    const auto rows = [&] {
      const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                       "multimodal_rotary_tables");
      if (!options.mrope_hw_alternating()) {
        return multimodal_rotary_tables(tables.cos, tables.sin, positions,
                                        options.mrope_section(), options.mrope_interleaved(),
                                        optional_tensor(tables.inv_freq), call.attention_factor);
      }
      return hw_alternating_rows(options, tables, positions, call.attention_factor);
    }();
    const SymLength tokens = size_of(positions, 1) * size_of(positions, 2);
    const SymLength half = size_of(tensors.cos, 1);
    const std::vector<SymLength> flat = {tokens, half};
    const std::vector<SymLength> grid = {size_of(positions, 1), size_of(positions, 2)};
    tables = {std::get<0>(rows).POSENC_SYM(view)(flat), std::get<1>(rows).POSENC_SYM(view)(flat),
              at::Tensor(),
              at::arange(c10::Scalar(tokens),
                         at::TensorOptions().dtype(at::kLong).device(x.device()))
                  .POSENC_SYM(view)(grid)};
  }
  return tables;
}

/// With `deinterleave`: x with its rotated channels regrouped from pairs (2i, 2i + 1) into halves
/// (a new tensor); else x.
at::Tensor regrouped(const RotaryEmbeddingOptions& options, const at::Tensor& x) {
  const int64_t rotary_dim = options.rotated_width();
  if (!options.deinterleave() || !x.defined() || x.dim() < 1 || size_of(x, -1) < rotary_dim) {
    return x; // (other inputs get the operator's messages)
  }
  const at::Tensor part = x.narrow(-1, 0, rotary_dim);
  std::vector<SymLength> pairs;
  for (int64_t d = 0; d + 1 < part.dim(); ++d) {
    pairs.push_back(size_of(part, d));
  }
  pairs.emplace_back(rotary_dim / 2);
  pairs.emplace_back(2);
  std::vector<SymLength> same;
  for (int64_t d = 0; d < part.dim(); ++d) {
    same.push_back(size_of(part, d));
  }
  // (a copy: the transposed pairs are not contiguous)
  const at::Tensor halves =
      part.POSENC_SYM(reshape)(pairs).transpose(-1, -2).POSENC_SYM(reshape)(same);
  if (size_of(x, -1) == rotary_dim) {
    return halves;
  }
  return at::cat({halves, x.narrow(-1, rotary_dim, value_of(size_of(x, -1)) - rotary_dim)}, -1);
}

/// Whether a call turns the last rotary_dim channels of x's heads apart from the others: with
/// `rotate_last_channels` and a partial rotation, for heads of width head_dim. (Other inputs stay
/// whole: the checks and the operator report them.)
bool turns_last_channels(const RotaryEmbeddingOptions& options, const at::Tensor& x) {
  return options.rotate_last_channels() && options.rotated_width() < options.head_dim() &&
         x.defined() && x.dim() == 4 && size_of(x, 3) == options.head_dim();
}

/// With `rotate_last_channels`: the last rotary_dim channels of x's heads (a view), which the
/// call turns as whole heads; else x.
at::Tensor rotated_channels(const RotaryEmbeddingOptions& options, const at::Tensor& x) {
  const int64_t rotary_dim = options.rotated_width();
  return turns_last_channels(options, x)
             ? x.narrow(-1, options.head_dim() - rotary_dim, rotary_dim)
             : x;
}

/// `turned` (the rotation of rotated_channels(options, x)) after x's leading channels where the
/// module rotates the last ones; else `turned`.
at::Tensor with_passed_channels(const RotaryEmbeddingOptions& options, const at::Tensor& x,
                                const at::Tensor& turned) {
  return turns_last_channels(options, x)
             ? at::cat({x.narrow(-1, 0, options.head_dim() - options.rotated_width()), turned}, -1)
             : turned;
}

} // namespace

RotaryModuleCall rotary_module_call(const RotaryEmbeddingOptions& options, const char* name,
                                    bool python) {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, name);
  static constexpr detail::CallerName who{};
  TORCH_CHECK(options.head_dim() >= 2, who, ": head_dim must be >= 2, but got ",
              options.head_dim());
  const int64_t rotary_dim = options.rotated_width();
  TORCH_CHECK(rotary_dim <= options.head_dim(), who, ": rotary_dim (", rotary_dim,
              ") must be <= head_dim (", options.head_dim(), ")");
  TORCH_CHECK(!options.deinterleave() || options.pairing() == RotaryPairing::kHalfSplit, who,
              ": deinterleave regroups pairs (2i, 2i + 1) into halves (i, i + R/2), the "
              "layout of pairing ",
              python ? "'half_split', but pairing is 'interleaved'; pass pairing='half_split'"
                     : "kHalfSplit, but pairing is interleaved; pass pairing(kHalfSplit)",
              " with deinterleave, or drop deinterleave for pairs (2i, 2i + 1) kept in place");
  TORCH_CHECK(options.max_len() >= 1, who, ": max_len must be >= 1, but got ", options.max_len(),
              "; pass the number of positions the module rotates");
  // (the width and base first: a cache of a width over the limit is reported as such)
  detail::check_rotary_arguments(1, rotary_dim, options.base());
  const int64_t cached = options.cached_rows();
  const char* length = options.cached_len() ? "cached_len" : "max_len";
  TORCH_CHECK(cached >= 1 && cached <= options.max_len(), who,
              ": cached_len must be in [1, max_len = ", options.max_len(), "], but got ", cached,
              "; leave it unset to cache every position");
  TORCH_CHECK(rotary_dim < 2 || cached <= detail::kMaxTableElements / (rotary_dim / 2), who,
              ": the cos/sin caches hold ", length, " * rotary_dim / 2 = ", cached, " * ",
              rotary_dim / 2,
              " elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); ",
              options.cached_len()
                  ? "lower cached_len (positions past it are computed on each call)"
                  : "set cached_len (e.g. 8192; positions past it are computed on each call) or "
                    "lower max_len");
  detail::check_rotary_arguments(options.cached_rows(), rotary_dim, options.base());
  TORCH_CHECK(!options.mrope_hw_alternating() ||
                  (!options.mrope_section().empty() && !options.mrope_interleaved()),
              who, ": mrope_hw_alternating (ERNIE 4.5-VL's assignment of the multimodal "
              "frequencies) needs mrope_section and excludes mrope_interleaved (Qwen3-VL's), but ",
              options.mrope_section().empty() ? "mrope_section is empty"
                                              : "mrope_interleaved is set too",
              "; pass mrope_section {t, h, w} with h == w, and one assignment");
  if (options.mrope_hw_alternating()) {
    detail::mrope_hw_alternating_axes(options.mrope_section(), rotary_dim / 2);
  } else if (!options.mrope_section().empty()) {
    detail::mrope_axes(options.mrope_section(), options.mrope_interleaved(), rotary_dim / 2);
  }
  const detail::RopeSpec spec = detail::rope_spec(options);
  RotaryModuleCall call;
  call.options = options;
  detail::RopeFrequencies frequencies = detail::rope_frequencies(spec, c10::nullopt);
  call.attention_factor = frequencies.attention_factor;
  call.inv_freq = std::move(frequencies.inv_freq);
  call.variant_attention_factor = frequencies.variant_attention_factor;
  call.switch_length = detail::rope_switch_length(spec);
  if (options.beyond_max_len() != BeyondMaxLen::kExtrapolate) {
    call.hint = detail::extrapolate_hint(python);
  }
  return call;
}

RotaryModuleState rotary_module_state(const RotaryModuleCall& call,
                                      c10::optional<at::ScalarType> caches_dtype) {
  const auto float64 = at::TensorOptions().dtype(at::kDouble);
  RotaryModuleState state;
  state.inv_freq = at::tensor(call.inv_freq, float64);
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  state.long_inv_freq = detail::rope_long_inv_freq(detail::rope_spec(call.options));
  if (caches_dtype.has_value()) {
    const detail::RopeFrequencies frequencies{call.inv_freq, call.attention_factor,
                                              call.variant_attention_factor};
    std::tie(state.cos, state.sin) = detail::rotary_rows(
        at::arange(call.options.cached_rows(), at::TensorOptions().dtype(at::kLong)), frequencies,
        *caches_dtype);
  }
  return state;
}

at::Tensor rotary_module_forward(const RotaryModuleCall& call, const RotaryModuleTensors& tensors,
                                 const at::Tensor& x, int64_t offset,
                                 const at::Tensor& positions) {
  const detail::CallerScope caller(kName, call.hint);
  const CallTables tables = call_tables(call, tensors, x, offset, positions);
  const RotaryEmbeddingOptions& options = call.options;
  const at::Tensor turned = apply_rotary(
      regrouped(options, rotated_channels(options, x)), tables.cos, tables.sin, offset,
      optional_tensor(tables.positions), options.pairing() == RotaryPairing::kInterleaved,
      options.heads_first(), options.inverse(), optional_tensor(tables.inv_freq),
      call.attention_factor);
  return with_passed_channels(options, x, turned);
}

std::tuple<at::Tensor, at::Tensor> rotary_module_forward_qk(const RotaryModuleCall& call,
                                                            const RotaryModuleTensors& tensors,
                                                            const at::Tensor& q,
                                                            const at::Tensor& k, int64_t offset,
                                                            const at::Tensor& positions,
                                                            bool in_place) {
  const detail::CallerScope caller(kName, call.hint);
  const RotaryEmbeddingOptions& options = call.options;
  check_heads(options, k);
  const CallTables tables = call_tables(call, tensors, q, offset, positions);
  const bool interleaved = options.pairing() == RotaryPairing::kInterleaved;
  if (in_place) {
    // (handles to the same tensors, or views of their rotated channels)
    at::Tensor q_ = rotated_channels(options, q);
    at::Tensor k_ = rotated_channels(options, k);
    // With deinterleave: pairs (2i, 2i + 1) turned where they lie (the operator checks q and k
    // before writing either), then regrouped into halves: the arithmetic of turning regrouped
    // copies.
    apply_rotary_qk_(q_, k_, tables.cos, tables.sin, offset, optional_tensor(tables.positions),
                     interleaved || options.deinterleave(), options.heads_first(),
                     options.inverse(), optional_tensor(tables.inv_freq), call.attention_factor);
    if (options.deinterleave()) {
      const int64_t rotary_dim = options.rotated_width();
      for (const at::Tensor* t : {&q_, &k_}) {
        at::Tensor part = t->narrow(-1, 0, rotary_dim);
        part.copy_(regrouped(options, part));
      }
    }
    return {q, k};
  }
  const auto turned = apply_rotary_qk(
      regrouped(options, rotated_channels(options, q)),
      regrouped(options, rotated_channels(options, k)), tables.cos, tables.sin, offset,
      optional_tensor(tables.positions), interleaved, options.heads_first(), options.inverse(),
      optional_tensor(tables.inv_freq), call.attention_factor);
  return {with_passed_channels(options, q, std::get<0>(turned)),
          with_passed_channels(options, k, std::get<1>(turned))};
}

void rotary_module_kv_cache(const RotaryModuleCall& call, const RotaryModuleTensors& tensors,
                            at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& index,
                            const at::Tensor& positions, bool paged, bool cache_heads_first) {
  const detail::CallerScope caller(kName, call.hint);
  const RotaryEmbeddingOptions& options = call.options;
  TORCH_CHECK(!options.deinterleave() && !options.rotate_last_channels() && !options.inverse(),
              kName, ": the fused KV-cache write rotates the first rotary_dim channels where they "
              "lie, but this module ",
              options.deinterleave()           ? "regroups them (deinterleave)"
              : options.rotate_last_channels() ? "rotates the last channels"
                                               : "rotates backwards (inverse)",
              "; rotate with forward_qk_ and write the cache with index_copy_ instead");
  TORCH_CHECK(q.defined() && index.defined(), kName,
              ": the KV-cache write needs q and the cache index (cache_seqlens or slot_mapping)");
  const bool interleaved = options.pairing() == RotaryPairing::kInterleaved;
  if (paged) {
    TORCH_CHECK(q.dim() == 3 && positions.defined(), kName,
                ": the paged KV-cache write takes q [T, H, head_dim] and positions [T], but got q ",
                q.sizes(), positions.defined() ? "" : " and no positions");
    // (a packed batch is one sequence of T tokens; multimodal [3, T] positions are [3, 1, T])
    const bool multimodal = positions.dim() == 2 && !options.mrope_section().empty();
    const CallTables tables = call_tables(call, tensors, q.unsqueeze(0), 0,
                                          multimodal ? positions.unsqueeze(1) : positions);
    rotary_paged_kv_cache_(q, k, v, k_cache, v_cache, tables.cos, tables.sin,
                           tables.positions.reshape({-1}), index, interleaved, cache_heads_first,
                           optional_tensor(tables.inv_freq), call.attention_factor);
    return;
  }
  // The caches' own rows at the slots (nothing computed, nothing allocated: CUDA-graph safe) when
  // they hold every position the module allows and its frequencies never change; else the
  // slots' positions, made on the device, for the module's rows.
  const bool plain = !call.switch_length && tensors.cos.size(0) >= options.max_len() &&
                     options.beyond_max_len() != BeyondMaxLen::kExtrapolate;
  at::Tensor rotation = positions;
  if (!rotation.defined() && !plain) {
    TORCH_CHECK(q.dim() == 4 && index.dim() == 1, kName,
                ": the KV-cache write takes q [B, L, H, head_dim] and cache_seqlens [B], but got "
                "q ",
                q.sizes(), " and cache_seqlens ", index.sizes());
    const int64_t length = q.size(options.heads_first() ? 2 : 1);
    rotation = index.to(at::kLong).view({-1, 1}) +
               at::arange(length, index.options().dtype(at::kLong));
  }
  const CallTables tables = call_tables(call, tensors, q, 0, rotation);
  rotary_kv_cache_(q, k, v, k_cache, v_cache, tables.cos, tables.sin, index,
                   optional_tensor(tables.positions), interleaved, options.heads_first(),
                   cache_heads_first, optional_tensor(tables.inv_freq), call.attention_factor);
}

namespace {

// --- the operators: posenc.nn's RotaryEmbedding names its options in JSON text --------------

using nlohmann::json;

// (`op`: the operator called, named in the messages)
RotaryEmbeddingOptions options_from_json(c10::string_view text, const char* op) {
  detail::check_json_limits(text, detail::kMaxOptionTextBytes, std::string(op) + ": module");
  const json module = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  TORCH_CHECK(module.is_object(), op, ": module must be a JSON object "
              "of a RotaryEmbedding's options (posenc.nn.RotaryEmbedding passes its own), but got '",
              std::string(text), "'");
  // (posenc.nn's reader of keyword arguments, as check_module_options reads the other modules';
  // null: the default, as posenc.nn sends its None)
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  OptionsReader read(module);
  RotaryEmbeddingOptions options(read.integer("head_dim", 0), read.integer("max_len", 0));
  const c10::optional<int64_t> cached_len = read.optional_integer("cached_len");
  const c10::optional<int64_t> rotary_dim = read.optional_integer("rotary_dim");
  const double base = read.number("base", options.base());
  options.base(base)
      .deinterleave(read.boolean("deinterleave", options.deinterleave()))
      .inverse(read.boolean("inverse", options.inverse()))
      .rotate_last_channels(
          read.boolean("rotate_last_channels", options.rotate_last_channels()))
      .heads_first(read.boolean("heads_first", options.heads_first()))
      .freq_factors(read.numbers("freq_factors", {}, /*nullable=*/true))
      .attention_factor_in_cos_sin(
          read.boolean("attention_factor_in_cos_sin", options.attention_factor_in_cos_sin()))
      .mrope_section(read.integers("mrope_section", {}, /*nullable=*/true))
      .mrope_interleaved(read.boolean("mrope_interleaved", options.mrope_interleaved()))
      .mrope_hw_alternating(read.boolean("mrope_hw_alternating", options.mrope_hw_alternating()))
      .pairing(read.choice("pairing", options.pairing()))
      .beyond_max_len(
          read.choice("beyond_max_len", options.beyond_max_len()));
  const json* rope = read.find("rope_parameters", /*nullable=*/true);
  read.finish();
  options.scaling(
      detail::rope_scaling_from_json(rope == nullptr ? std::string("{}") : rope->dump(), base));
  if (cached_len) {
    options.cached_len(*cached_len);
  }
  if (rotary_dim) {
    options.rotary_dim(*rotary_dim);
  }
  return options;
}

/// The call of a module's options text, read once per text (posenc.nn passes the same text on
/// every call of a module).
std::shared_ptr<const RotaryModuleCall> module_call(c10::string_view text, const char* op) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const RotaryModuleCall>> calls;
  const std::string key(text);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto found = calls.find(key);
    if (found != calls.end()) {
      return found->second;
    }
  }
  auto call = std::make_shared<const RotaryModuleCall>(
      rotary_module_call(options_from_json(text, op), kName, /*python=*/true));
  const std::lock_guard<std::mutex> lock(mutex);
  if (calls.size() >= 256) { // (a bound: modules come and go)
    calls.clear();
  }
  return calls.emplace(key, std::move(call)).first->second;
}

at::Tensor rotary_embedding_call(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                 const at::Tensor& inv_freq,
                                 const c10::optional<at::Tensor>& long_inv_freq,
                                 c10::string_view module, int64_t offset,
                                 const c10::optional<at::Tensor>& positions) {
  const auto call = module_call(module, "posenc::rotary_embedding_call");
  const at::Tensor none;
  return rotary_module_forward(*call, {cos, sin, inv_freq, long_inv_freq ? *long_inv_freq : none},
                               x, offset, positions ? *positions : none);
}

std::tuple<at::Tensor, at::Tensor> rotary_embedding_call_qk(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
    const at::Tensor& inv_freq, const c10::optional<at::Tensor>& long_inv_freq,
    c10::string_view module, int64_t offset, const c10::optional<at::Tensor>& positions) {
  const auto call = module_call(module, "posenc::rotary_embedding_call_qk");
  const at::Tensor none;
  return rotary_module_forward_qk(*call,
                                  {cos, sin, inv_freq, long_inv_freq ? *long_inv_freq : none}, q,
                                  k, offset, positions ? *positions : none, /*in_place=*/false);
}

void rotary_embedding_call_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     at::Tensor& k_cache, at::Tensor& v_cache,
                                     const at::Tensor& cos, const at::Tensor& sin,
                                     const at::Tensor& inv_freq,
                                     const c10::optional<at::Tensor>& long_inv_freq,
                                     c10::string_view module, const at::Tensor& index,
                                     const c10::optional<at::Tensor>& positions, bool paged,
                                     bool cache_heads_first) {
  const auto call = module_call(module, "posenc::rotary_embedding_call_kv_cache_");
  const at::Tensor none;
  rotary_module_kv_cache(*call, {cos, sin, inv_freq, long_inv_freq ? *long_inv_freq : none}, q, k,
                         v, k_cache, v_cache, index, positions ? *positions : none, paged,
                         cache_heads_first);
}

// The frequencies posenc.nn's module holds beside its caches, as the C++ module's (reset()).
std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_embedding_frequencies(
    c10::string_view module) {
  const auto call = module_call(module, "posenc::rotary_embedding_frequencies");
  const RotaryModuleState state = rotary_module_state(*call, c10::nullopt);
  const auto float64 = at::TensorOptions().dtype(at::kDouble);
  return {state.inv_freq,
          state.long_inv_freq.defined() ? state.long_inv_freq : at::empty({0}, float64),
          at::scalar_tensor(call->variant_attention_factor, float64)};
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeImplicitAutograd, m) {
  m.impl("rotary_embedding_call", &rotary_embedding_call);
  m.impl("rotary_embedding_call_qk", &rotary_embedding_call_qk);
  m.impl("rotary_embedding_call_kv_cache_", &rotary_embedding_call_kv_cache_);
}

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("rotary_embedding_frequencies", &rotary_embedding_frequencies);
}

} // namespace ops
} // namespace posenc
