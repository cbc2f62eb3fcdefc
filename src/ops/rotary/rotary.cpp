// The rotary family: rotating queries and keys by the angles of their positions. Schemas and C++
// entry points; kernels per backend beside them (*_kernel.*).

#include "detail/rope_types.h"
#include "ops/common/dispatch.h"
#include "ops/common/sym_length.h"

#include <posenc/ops/rotary.h>

#include <torch/library.h>

#include <tuple>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def(
      "apply_rotary(Tensor x, Tensor cos, Tensor sin, int offset=0, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool inverse=False, Tensor? inv_freq=None, "
      "float attention_factor=1.0) -> Tensor");
  m.def(
      "apply_rotary_(Tensor(a!) x, Tensor cos, Tensor sin, int offset=0, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool inverse=False, Tensor? inv_freq=None, "
      "float attention_factor=1.0) -> ()");
  m.def(
      "apply_rotary_qk(Tensor q, Tensor k, Tensor cos, Tensor sin, int offset=0, "
      "Tensor? positions=None, bool interleaved=False, bool heads_first=False, bool inverse=False, "
      "Tensor? inv_freq=None, float attention_factor=1.0) -> (Tensor, Tensor)");
  m.def(
      "apply_rotary_qk_(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin, int offset=0, "
      "Tensor? positions=None, bool interleaved=False, bool heads_first=False, bool inverse=False, "
      "Tensor? inv_freq=None, float attention_factor=1.0) -> ()");
  // A RotaryEmbedding module's call (ops/rotary/module.h), for posenc.nn's module: `module` is
  // its options as a JSON object (posenc.nn.RotaryEmbedding's arguments: head_dim, max_len,
  // cached_len, base, rotary_dim, pairing, deinterleave, inverse, heads_first, beyond_max_len,
  // rope_parameters, freq_factors, attention_factor_in_cos_sin, mrope_section,
  // mrope_interleaved); cos, sin, inv_freq and long_inv_freq are its tensors. Composite: the
  // call of apply_rotary / apply_rotary_qk its options and positions choose.
  m.def(
      "rotary_embedding_call(Tensor x, Tensor cos, Tensor sin, Tensor inv_freq, "
      "Tensor? long_inv_freq, str module, int offset=0, Tensor? positions=None) -> Tensor");
  m.def(
      "rotary_embedding_call_qk(Tensor q, Tensor k, Tensor cos, Tensor sin, Tensor inv_freq, "
      "Tensor? long_inv_freq, str module, int offset=0, Tensor? positions=None) "
      "-> (Tensor, Tensor)");
  // The module's fused KV-cache write (ops/kv_cache): q rotated in place, k and v written to a
  // contiguous cache at index = cache_seqlens, or (paged) a paged one at index = slot_mapping.
  // Composite: the rotary_kv_cache_ / rotary_paged_kv_cache_ call the options choose.
  m.def(
      "rotary_embedding_call_kv_cache_(Tensor(a!) q, Tensor k, Tensor v, Tensor(b!) k_cache, "
      "Tensor(c!) v_cache, Tensor cos, Tensor sin, Tensor inv_freq, Tensor? long_inv_freq, "
      "str module, Tensor index, Tensor? positions=None, bool paged=False, "
      "bool cache_heads_first=False) -> ()");
  // The float64 frequencies a RotaryEmbedding with these options (`module`, as above) holds, on
  // the host: inv_freq [R/2], longrope's long ones [R/2] (empty [0] for the other variants) and
  // the variant's attention factor (0-dim); checks the options. CompositeExplicitAutograd.
  m.def(
      "rotary_embedding_frequencies(str module) -> (Tensor inv_freq, Tensor long_inv_freq, "
      "Tensor attention_factor)");
  m.def(
      "multimodal_rotary_tables(Tensor cos, Tensor sin, Tensor positions, int[] mrope_section, "
      "bool interleaved=False, Tensor? inv_freq=None, float attention_factor=1.0) "
      "-> (Tensor, Tensor)");
  m.def(
      "rope_frequencies(int rotary_dim, float base=10000.0, str rope_parameters=\"{}\", "
      "float[]? freq_factors=None, int? seq_len=None, Tensor? positions=None, "
      "Tensor? frequencies=None, Device? device=None) -> (Tensor, Tensor)");
  m.def("rotary_tables(" POSENC_SYMINT
        " max_len, Tensor inv_freq, float attention_factor=1.0, "
        "ScalarType? dtype=None, Device? device=None) -> (Tensor, Tensor)");
}

namespace ops {

using RotarySignature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                   OptionalTensor, bool, bool, bool, OptionalTensor, double);
using RotaryInplaceSignature = void(at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                    OptionalTensor, bool, bool, bool, OptionalTensor, double);

using RotaryQkSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
    OptionalTensor, bool, bool, bool, OptionalTensor, double);
using RotaryQkInplaceSignature = void(at::Tensor&, at::Tensor&, const at::Tensor&,
                                      const at::Tensor&, int64_t, OptionalTensor, bool, bool, bool,
                                      OptionalTensor, double);

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool interleaved,
                        bool heads_first, bool inverse, OptionalTensor inv_freq,
                        double attention_factor) {
  static const auto op = typed_op<RotarySignature>("posenc::apply_rotary");
  return op.call(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                 attention_factor);
}

at::Tensor& apply_rotary_(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t offset, OptionalTensor positions, bool interleaved,
                          bool heads_first, bool inverse, OptionalTensor inv_freq,
                          double attention_factor) {
  static const auto op = typed_op<RotaryInplaceSignature>("posenc::apply_rotary_");
  op.call(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
          attention_factor);
  return x;
}

std::tuple<at::Tensor, at::Tensor> apply_rotary_qk(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& cos, const at::Tensor& sin,
                                                   int64_t offset, OptionalTensor positions,
                                                   bool interleaved, bool heads_first,
                                                   bool inverse, OptionalTensor inv_freq,
                                                   double attention_factor) {
  static const auto op = typed_op<RotaryQkSignature>("posenc::apply_rotary_qk");
  return op.call(q, k, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                 attention_factor);
}

void apply_rotary_qk_(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                      int64_t offset, OptionalTensor positions, bool interleaved,
                      bool heads_first, bool inverse, OptionalTensor inv_freq,
                      double attention_factor) {
  static const auto op = typed_op<RotaryQkInplaceSignature>("posenc::apply_rotary_qk_");
  op.call(q, k, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
          attention_factor);
}

std::tuple<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    at::IntArrayRef mrope_section, bool interleaved, OptionalTensor inv_freq,
    double attention_factor) {
  static const auto op = typed_op<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, at::IntArrayRef, bool,
      OptionalTensor, double)>("posenc::multimodal_rotary_tables");
  return op.call(cos, sin, positions, mrope_section, interleaved, inv_freq, attention_factor);
}

std::tuple<at::Tensor, at::Tensor> rope_frequencies(const RopeFrequenciesArguments& arguments) {
  static const auto op = typed_op<std::tuple<at::Tensor, at::Tensor>(
      int64_t, double, c10::string_view, c10::optional<at::ArrayRef<double>>,
      c10::optional<int64_t>, OptionalTensor, OptionalTensor, c10::optional<at::Device>)>(
      "posenc::rope_frequencies");
  const auto optional = [](const at::Tensor& tensor) {
    return tensor.defined() ? c10::optional<at::Tensor>(tensor) : c10::nullopt;
  };
  const std::vector<double>& divisors = arguments.freq_factors;
  return op.call(arguments.rotary_dim, arguments.base,
                 detail::rope_scaling_to_json(arguments.scaling),
                 divisors.empty() ? c10::optional<at::ArrayRef<double>>()
                                  : c10::optional<at::ArrayRef<double>>(divisors),
                 arguments.seq_len, optional(arguments.positions), optional(arguments.frequencies),
                 arguments.device);
}

std::tuple<at::Tensor, at::Tensor> rotary_tables(int64_t max_len, const at::Tensor& inv_freq,
                                                 double attention_factor,
                                                 c10::optional<at::ScalarType> dtype,
                                                 c10::optional<at::Device> device) {
  static const auto op =
      typed_op<std::tuple<at::Tensor, at::Tensor>(int64_t, const at::Tensor&, double,
                                                  c10::optional<at::ScalarType>,
                                                  c10::optional<at::Device>)>(
          "posenc::rotary_tables");
  return op.call(max_len, inv_freq, attention_factor, dtype, device);
}

} // namespace ops
} // namespace posenc
