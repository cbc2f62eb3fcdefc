#pragma once

// The operators posenc.nn reaches with JSON text (a module's options, transformers' rope
// parameters), looked up once in the dispatcher and called as posenc.nn calls them: for the tests
// and the fuzzer that drive those front doors from C++.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <tuple>

namespace posenc_test {

/// inv_freq, long inv_freq (empty where none) and the attention factor of a RotaryEmbedding's
/// options text.
using RotaryFrequencies = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

/// posenc::check_module_options(module, options).
inline const auto& check_module_options_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("posenc::check_module_options", "")
                             .typed<void(c10::string_view, c10::string_view)>();
  return op;
}

/// posenc::rotary_embedding_frequencies(module).
inline const auto& rotary_frequencies_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("posenc::rotary_embedding_frequencies", "")
                             .typed<RotaryFrequencies(c10::string_view)>();
  return op;
}

/// posenc::rotary_embedding_call(x, cos, sin, inv_freq, long_inv_freq, module, offset, positions).
inline const auto& rotary_call_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("posenc::rotary_embedding_call", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const c10::optional<at::Tensor>&, c10::string_view,
                            int64_t, const c10::optional<at::Tensor>&)>();
  return op;
}

/// posenc::rotary_embedding_call_qk(q, k, cos, sin, inv_freq, long_inv_freq, module, offset,
/// positions).
inline const auto& rotary_call_qk_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("posenc::rotary_embedding_call_qk", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const c10::optional<at::Tensor>&, c10::string_view, int64_t,
              const c10::optional<at::Tensor>&)>();
  return op;
}

/// posenc::rope_frequencies(rotary_dim, base, rope_parameters, freq_factors, seq_len, positions,
/// frequencies, device).
inline const auto& rope_frequencies_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("posenc::rope_frequencies", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              int64_t, double, c10::string_view, c10::optional<at::ArrayRef<double>>,
              c10::optional<int64_t>, const c10::optional<at::Tensor>&,
              const c10::optional<at::Tensor>&, c10::optional<at::Device>)>();
  return op;
}

} // namespace posenc_test
