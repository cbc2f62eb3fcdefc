#include <posenc/modules/encoding_base.h>
#include <posenc/modules/vision.h>

#include "detail/checks.h"
#include "detail/vision.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <c10/util/Exception.h>

#include <ios>
#include <utility>

namespace posenc {

TimestepEmbeddingOptions::TimestepEmbeddingOptions(int64_t embedding_dim)
    : embedding_dim_(embedding_dim) {}
TimestepEmbedderOptions::TimestepEmbedderOptions(int64_t hidden_size) : hidden_size_(hidden_size) {}
Sincos2dTableOptions::Sincos2dTableOptions(int64_t embed_dim, std::vector<int64_t> grid_size)
    : embed_dim_(embed_dim), grid_size_(std::move(grid_size)) {}

namespace {
detail::TimestepSpec spec_of(const TimestepEmbeddingOptions& options) {
  detail::TimestepSpec spec;
  spec.embedding_dim = options.embedding_dim();
  spec.flip_sin_to_cos = options.flip_sin_to_cos();
  spec.downscale_freq_shift = options.downscale_freq_shift();
  spec.scale = options.scale();
  spec.max_period = options.max_period();
  return spec;
}

// DiT's embedding: cos first, frequencies exp(-ln(max_period) k / half)
TimestepEmbeddingOptions dit_frequencies(const TimestepEmbedderOptions& options) {
  return TimestepEmbeddingOptions(options.frequency_embedding_size())
      .flip_sin_to_cos(true)
      .downscale_freq_shift(0.0)
      .max_period(options.max_period());
}
} // namespace

// ---- Timesteps ----

TimestepsImpl::TimestepsImpl(const TimestepEmbeddingOptions& options_) : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void TimestepsImpl::reset() {
  detail::check_timestep_spec(kName, spec_of(options));
}

void TimestepsImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "posenc::Timesteps(embedding_dim=" << options.embedding_dim()
         << (options.flip_sin_to_cos() ? ", flip_sin_to_cos=true" : "")
         << detail::non_default("downscale_freq_shift", options.downscale_freq_shift(), 1.0)
         << detail::non_default("scale", options.scale(), 1.0);
  if (options.max_period() != 10000) {
    stream << ", max_period=" << options.max_period();
  }
  stream << ")";
}

torch::Tensor TimestepsImpl::forward(const torch::Tensor& timesteps) {
  const detail::CallerScope caller(kName);
  return functional::timestep_embedding(timesteps, options);
}

// ---- DiT's TimestepEmbedder ----

TimestepEmbedderImpl::TimestepEmbedderImpl(const TimestepEmbedderOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void TimestepEmbedderImpl::reset() {
  TORCH_CHECK(options.hidden_size() >= 1, kName, ": hidden_size must be >= 1, but got ",
              options.hidden_size());
  detail::check_timestep_spec(kName, spec_of(dit_frequencies(options)));
  mlp = register_module(
      "mlp", torch::nn::Sequential(
                 torch::nn::Linear(options.frequency_embedding_size(), options.hidden_size()),
                 torch::nn::SiLU(), torch::nn::Linear(options.hidden_size(), options.hidden_size())));
}

void TimestepEmbedderImpl::pretty_print(std::ostream& stream) const {
  stream << "posenc::TimestepEmbedder(hidden_size=" << options.hidden_size()
         << ", frequency_embedding_size=" << options.frequency_embedding_size() << ")";
}

torch::Tensor TimestepEmbedderImpl::forward(const torch::Tensor& timesteps) {
  const detail::CallerScope caller(kName);
  const torch::Tensor& weight = mlp->ptr<torch::nn::LinearImpl>(0)->weight;
  TORCH_CHECK(!timesteps.defined() || timesteps.device() == weight.device(), kName,
              ": expected the timesteps on the module's device (", weight.device(),
              "), but got timesteps on ", timesteps.device(), "; move them with .to(",
              weight.device(), ")");
  const torch::Tensor frequencies =
      functional::timestep_embedding(timesteps, dit_frequencies(options));
  return mlp->forward(frequencies.to(weight.scalar_type()));
}

} // namespace posenc
