// A LLaMA-architecture decoder in LibTorch that loads what transformers' save_pretrained writes
// (config.json + model.safetensors) and computes what transformers' LlamaForCausalLM /
// Qwen2ForCausalLM compute: RMSNorm, grouped-query attention whose queries posenc rotates in place
// while it rotates the keys into the KV cache and copies the values there, one pass per layer and
// step (RotaryEmbedding::forward_kv_cache_; the rotary setup read from config.json by
// posenc::io::read_hf_rope_config: any rope type, partial rotation, yarn's attention factor), a
// SwiGLU MLP. The cache is contiguous ([B, H_kv, capacity, D], grown by doubling) or, with
// --paged, a pool of pages ([blocks, block_size, H_kv, D], vLLM's layout) written through a slot
// mapping and read back through each sequence's block table. Weights are loaded by
// posenc::load_safetensors under the names transformers gives them; the rotary embedding is then
// registered as the submodule `model.rotary_emb` (as in transformers, its tables are not in the
// checkpoint), so that model->to(device) moves it with the weights. With --dtype bfloat16 the
// weights, activations and cache are bfloat16 (the rotary tables stay float32: each rotated value
// is rounded once), as transformers' model.to(torch.bfloat16).
//
//   llama_decoder [--device cuda|auto] [--dtype bfloat16] [--paged] check MODEL_DIR...
//                                        compare with reference.safetensors (make_models.py)
//   llama_decoder [--threads N] [--device cuda] [--dtype bfloat16] [--paged] generate MODEL_DIR
//                 --prompt-length 128 --tokens 64
//                                        greedy generation, timed (tokens per second, JSON)

#include <posenc/io/hf_config.h>
#include <posenc/io/safetensors.h>
#include <posenc/modules/rotary_embedding.h>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

// What the decoder needs from config.json. The attention heads, head width and rotary embedding
// come from posenc's reader; the rest of the architecture from the same file, by transformers'
// names.
struct DecoderConfig {
  std::string model_type;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false, qkv_bias = false, o_bias = false, mlp_bias = false;
  posenc::io::HfRopeConfig attention;
};

DecoderConfig read_config(const std::string& directory) {
  const std::string path = directory + "/config.json";
  std::ifstream file(path);
  TORCH_CHECK(file, "llama_decoder: cannot read ", path);
  std::stringstream text;
  text << file.rdbuf();
  DecoderConfig config;
  config.attention = posenc::io::read_hf_rope_config(text.str(), path);
  const nlohmann::json json = nlohmann::json::parse(text.str());
  config.model_type = json.at("model_type").get<std::string>();
  TORCH_CHECK(config.model_type == "llama" || config.model_type == "qwen2",
              "llama_decoder: model_type must be \"llama\" or \"qwen2\", but ", path, " has \"",
              config.model_type, "\"");
  TORCH_CHECK(json.value("hidden_act", std::string("silu")) == "silu",
              "llama_decoder: hidden_act must be \"silu\" (SwiGLU), but ", path, " has ",
              json.at("hidden_act").dump());
  config.vocab_size = json.at("vocab_size").get<int64_t>();
  config.hidden_size = json.at("hidden_size").get<int64_t>();
  config.intermediate_size = json.at("intermediate_size").get<int64_t>();
  config.num_hidden_layers = json.at("num_hidden_layers").get<int64_t>();
  config.rms_norm_eps = json.value("rms_norm_eps", 1e-6);
  // Every layer attends to the whole sequence (no sliding window: Qwen2's use_sliding_window).
  TORCH_CHECK(!json.value("use_sliding_window", false), "llama_decoder: ", path,
              " has use_sliding_window: true; this decoder implements full attention only");
  if (json.contains("layer_types")) {
    for (const auto& type : json.at("layer_types")) {
      TORCH_CHECK(type == "full_attention", "llama_decoder: ", path, " has a layer of type ",
                  type.dump(), "; this decoder implements full attention only");
    }
  }
  const int64_t heads = config.attention.num_attention_heads;
  const int64_t kv_heads = config.attention.num_key_value_heads;
  TORCH_CHECK(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0, "llama_decoder: ", path,
              ": num_attention_heads (", heads, ") must be a multiple of num_key_value_heads (",
              kv_heads, ")");
  config.tie_word_embeddings = json.value("tie_word_embeddings", false);
  if (config.model_type == "llama") {
    config.qkv_bias = config.o_bias = json.value("attention_bias", false);
    config.mlp_bias = json.value("mlp_bias", false);
  } else { // Qwen2: biases on q, k and v only
    config.qkv_bias = true;
  }
  return config;
}

// transformers' RMSNorm: normalized in float32, scaled by the weight in the input's dtype.
struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t size, double eps) : eps(eps) {
    weight = register_parameter("weight", torch::ones({size}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor x32 = x.to(torch::kFloat);
    return weight *
           (x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
  }
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// How the decoder keeps its KV cache (the command line's --paged, --block-size).
struct CacheLayout {
  bool paged = false;
  int64_t block_size = 16;
};

// One layer's keys and values. Contiguous: [B, Hkv, capacity, D], positions 0 .. length - 1
// filled. Paged: pages [blocks, block_size, Hkv, D]; sequence b's position p lives in page
// block_table[b][p / block_size], row p % block_size.
struct KVCache {
  torch::Tensor keys, values;
  int64_t length = 0;
  torch::Tensor block_table; // [B, pages per sequence], int64, on the host
};

// The pages of a paged cache: room for `capacity` positions of each of `batch` sequences, its
// pages handed out in an interleaved order (sequence b's i-th page is block i * batch + b,
// reversed), as a server's allocator leaves them scattered; what `cache` holds is moved over.
void grow_paged(KVCache& cache, const torch::Tensor& like, int64_t batch, int64_t capacity,
                int64_t kv_heads, int64_t head_dim, int64_t block_size) {
  const int64_t pages = (capacity + block_size - 1) / block_size;
  const int64_t blocks = pages * batch;
  torch::Tensor table =
      (blocks - 1 - (torch::arange(pages, torch::kLong).unsqueeze(0) * batch +
                     torch::arange(batch, torch::kLong).unsqueeze(1)));
  torch::Tensor keys = like.new_zeros({blocks, block_size, kv_heads, head_dim});
  torch::Tensor values = like.new_zeros({blocks, block_size, kv_heads, head_dim});
  if (cache.keys.defined()) {
    const int64_t old_pages = cache.block_table.size(1);
    const torch::Tensor from = cache.block_table.reshape({-1}).to(like.device());
    const torch::Tensor to = table.narrow(1, 0, old_pages).reshape({-1}).to(like.device());
    keys.index_copy_(0, to, cache.keys.index_select(0, from));
    values.index_copy_(0, to, cache.values.index_select(0, from));
  }
  cache.keys = keys;
  cache.values = values;
  cache.block_table = table;
}

struct AttentionImpl : torch::nn::Module {
  AttentionImpl(const DecoderConfig& config, const CacheLayout& layout)
      : layout(layout),
        heads(config.attention.num_attention_heads),
        kv_heads(config.attention.num_key_value_heads),
        head_dim(config.attention.options.head_dim()) {
    const int64_t hidden = config.hidden_size;
    q_proj = register_module(
        "q_proj", torch::nn::Linear(
                      torch::nn::LinearOptions(hidden, heads * head_dim).bias(config.qkv_bias)));
    k_proj = register_module(
        "k_proj", torch::nn::Linear(
                      torch::nn::LinearOptions(hidden, kv_heads * head_dim).bias(config.qkv_bias)));
    v_proj = register_module(
        "v_proj", torch::nn::Linear(
                      torch::nn::LinearOptions(hidden, kv_heads * head_dim).bias(config.qkv_bias)));
    o_proj = register_module(
        "o_proj",
        torch::nn::Linear(torch::nn::LinearOptions(heads * head_dim, hidden).bias(config.o_bias)));
  }

  // x [B, L, hidden] at positions cache.length .. cache.length + L - 1.
  torch::Tensor forward(const torch::Tensor& x, posenc::RotaryEmbedding& rope, KVCache& cache) {
    const int64_t batch = x.size(0), length = x.size(1), offset = cache.length;
    torch::Tensor q = q_proj(x).view({batch, length, heads, head_dim});
    const torch::Tensor k = k_proj(x).view({batch, length, kv_heads, head_dim});
    const torch::Tensor v = v_proj(x).view({batch, length, kv_heads, head_dim});
    const int64_t total = offset + length;
    torch::Tensor keys, values; // [B, Hkv, total, D]
    if (layout.paged) {
      const int64_t pages = cache.block_table.defined() ? cache.block_table.size(1) : 0;
      if (pages * layout.block_size < total) {
        grow_paged(cache, x, batch, std::max<int64_t>(2 * total, 64), kv_heads, head_dim,
                   layout.block_size);
      }
      // Token (b, l) at position offset + l goes to its page's row (vLLM's slot_mapping).
      const torch::Tensor positions = torch::arange(offset, total, torch::kLong);
      const torch::Tensor slots =
          (cache.block_table.index_select(1, positions.div(layout.block_size, "floor")) *
               layout.block_size +
           positions.remainder(layout.block_size))
              .reshape({-1});
      torch::Tensor packed = q.view({batch * length, heads, head_dim});
      rope->forward_paged_kv_cache_(packed, k.reshape({batch * length, kv_heads, head_dim}),
                                    v.reshape({batch * length, kv_heads, head_dim}), cache.keys,
                                    cache.values, positions.repeat({batch}).to(x.device()),
                                    slots.to(x.device()));
      // Each sequence's pages in order, its first `total` rows (the attention reads them back).
      const torch::Tensor table = cache.block_table.to(x.device());
      const auto gather = [&](const torch::Tensor& pool) {
        return pool.index_select(0, table.reshape({-1}))
            .view({batch, -1, kv_heads, head_dim})
            .narrow(1, 0, total)
            .transpose(1, 2);
      };
      keys = gather(cache.keys);
      values = gather(cache.values);
    } else {
      if (!cache.keys.defined() || cache.keys.size(2) < total) {
        // Grow the cache (doubling), keeping what it holds.
        const int64_t capacity = std::max<int64_t>(2 * total, 64);
        torch::Tensor grown_keys = x.new_empty({batch, kv_heads, capacity, head_dim});
        torch::Tensor grown_values = x.new_empty({batch, kv_heads, capacity, head_dim});
        if (offset > 0) {
          grown_keys.narrow(2, 0, offset).copy_(cache.keys.narrow(2, 0, offset));
          grown_values.narrow(2, 0, offset).copy_(cache.values.narrow(2, 0, offset));
        }
        cache.keys = grown_keys;
        cache.values = grown_values;
      }
      // q rotated where it lies, k rotated into its slots and v copied there, in one pass.
      const torch::Tensor seqlens = torch::full({batch}, offset, x.options().dtype(torch::kLong));
      rope->forward_kv_cache_(q, k, v, cache.keys, cache.values, seqlens, /*positions=*/{},
                              /*cache_heads_first=*/true);
      keys = cache.keys.narrow(2, 0, total);
      values = cache.values.narrow(2, 0, total);
    }
    cache.length = total;
    const int64_t groups = heads / kv_heads;

    // Query head h reads key/value head h / groups (transformers' repeat_kv), without copying the
    // cache: the queries of one key head are one [groups * L, D] matrix.
    const torch::Tensor queries =
        q.permute({0, 2, 1, 3}).reshape({batch, kv_heads, groups * length, head_dim});
    torch::Tensor scores = torch::matmul(queries, keys.transpose(2, 3)) *
                           (1.0 / std::sqrt(static_cast<double>(head_dim)));
    if (length > 1) { // causal: query i (position offset + i) sees keys 0 .. offset + i
      const torch::Tensor key_positions = torch::arange(total, x.options().dtype(torch::kLong));
      const torch::Tensor query_positions =
          torch::arange(offset, offset + length, x.options().dtype(torch::kLong));
      const torch::Tensor hidden_keys =
          key_positions.view({1, total}) > query_positions.view({length, 1});
      scores = scores.view({batch, kv_heads, groups, length, total})
                   .masked_fill(hidden_keys, -std::numeric_limits<float>::infinity())
                   .view({batch, kv_heads, groups * length, total});
    }
    const torch::Tensor weights = torch::softmax(scores, -1, torch::kFloat).to(x.scalar_type());
    const torch::Tensor output = torch::matmul(weights, values) // [B, Hkv, groups * L, D]
                                     .view({batch, heads, length, head_dim})
                                     .transpose(1, 2)
                                     .reshape({batch, length, heads * head_dim});
    return o_proj(output);
  }

  CacheLayout layout;
  int64_t heads, kv_heads, head_dim;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(Attention);

struct MLPImpl : torch::nn::Module {
  explicit MLPImpl(const DecoderConfig& config) {
    const auto linear = [&](int64_t in, int64_t out) {
      return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(config.mlp_bias));
    };
    gate_proj = register_module("gate_proj", linear(config.hidden_size, config.intermediate_size));
    up_proj = register_module("up_proj", linear(config.hidden_size, config.intermediate_size));
    down_proj = register_module("down_proj", linear(config.intermediate_size, config.hidden_size));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return down_proj(torch::nn::functional::silu(gate_proj(x)) * up_proj(x));
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

struct DecoderLayerImpl : torch::nn::Module {
  DecoderLayerImpl(const DecoderConfig& config, const CacheLayout& layout)
      : self_attn(register_module("self_attn", Attention(config, layout))),
        mlp(register_module("mlp", MLP(config))),
        input_layernorm(
            register_module("input_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps))),
        post_attention_layernorm(register_module(
            "post_attention_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps))) {}
  torch::Tensor forward(const torch::Tensor& x, posenc::RotaryEmbedding& rope, KVCache& cache) {
    const torch::Tensor h = x + self_attn(input_layernorm(x), rope, cache);
    return h + mlp(post_attention_layernorm(h));
  }
  Attention self_attn;
  MLP mlp;
  RMSNorm input_layernorm, post_attention_layernorm;
};
TORCH_MODULE(DecoderLayer);

// transformers' LlamaModel: the parameters under the names save_pretrained writes.
struct BackboneImpl : torch::nn::Module {
  BackboneImpl(const DecoderConfig& config, const CacheLayout& layout)
      : embed_tokens(register_module("embed_tokens",
                                     torch::nn::Embedding(config.vocab_size, config.hidden_size))),
        layers(register_module("layers", torch::nn::ModuleList())),
        norm(register_module("norm", RMSNorm(config.hidden_size, config.rms_norm_eps))) {
    for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
      layers->push_back(DecoderLayer(config, layout));
    }
  }
  torch::nn::Embedding embed_tokens;
  torch::nn::ModuleList layers;
  RMSNorm norm;
};
TORCH_MODULE(Backbone);

// LlamaForCausalLM / Qwen2ForCausalLM with a KV cache: forward(ids) continues the sequence.
struct CausalLMImpl : torch::nn::Module {
  CausalLMImpl(const DecoderConfig& config, const CacheLayout& layout)
      : model(register_module("model", Backbone(config, layout))),
        // The rotary embedding holds no weights of the checkpoint (its tables are computed): it is
        // registered once the weights are loaded (register_rotary), so that
        // load_safetensors(strict) sees exactly transformers' keys.
        rope(config.attention.options) {
    if (!config.tie_word_embeddings) {
      lm_head = register_module(
          "lm_head",
          torch::nn::Linear(
              torch::nn::LinearOptions(config.hidden_size, config.vocab_size).bias(false)));
    }
  }

  // The rotary embedding as the submodule model.rotary_emb (transformers' name), so that to()
  // moves its tables with the weights.
  void register_rotary() {
    model->register_module("rotary_emb", rope);
  }

  void reset_cache() {
    caches.assign(model->layers->size(), KVCache{});
  }

  // ids [B, L] -> logits [B, L, vocab] (float32), continuing from the cache.
  torch::Tensor forward(const torch::Tensor& ids) {
    if (caches.size() != model->layers->size()) {
      reset_cache();
    }
    torch::Tensor h = model->embed_tokens(ids.to(model->embed_tokens->weight.device()));
    for (size_t i = 0; i < model->layers->size(); ++i) {
      h = model->layers[i]->as<DecoderLayer>()->forward(h, rope, caches[i]);
    }
    h = model->norm(h);
    return (lm_head ? lm_head(h) : torch::nn::functional::linear(h, model->embed_tokens->weight))
        .cpu();
  }

  // Greedy decoding: `tokens` new tokens after `prompt` [1, L]; returns prompt and tokens [1, L +
  // tokens].
  torch::Tensor generate(const torch::Tensor& prompt, int64_t tokens) {
    reset_cache();
    torch::Tensor sequence = prompt;
    torch::Tensor next = forward(prompt).select(1, -1).argmax(-1, /*keepdim=*/true);
    for (int64_t i = 0; i < tokens; ++i) {
      sequence = torch::cat({sequence, next}, 1);
      if (i + 1 < tokens) {
        next = forward(next).select(1, -1).argmax(-1, /*keepdim=*/true);
      }
    }
    return sequence;
  }

  Backbone model;
  torch::nn::Linear lm_head{nullptr};
  posenc::RotaryEmbedding rope;
  std::vector<KVCache> caches;
};
TORCH_MODULE(CausalLM);

CausalLM load(const std::string& directory, const CacheLayout& layout, const torch::Device& device,
              torch::Dtype dtype, DecoderConfig* config_out = nullptr) {
  const DecoderConfig config = read_config(directory);
  CausalLM model(config, layout);
  posenc::load_safetensors(*model, directory + "/model.safetensors"); // strict: every key, no other
  model->register_rotary();
  model->to(device, dtype);
  model->eval();
  if (config_out) {
    *config_out = config;
  }
  return model;
}

// The root mean square of a - b (float64).
double rms(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).pow(2).mean().sqrt().item<double>();
}

// Compares logits of the reference prompts, in one forward and through the cache a token a step
// (a stated tolerance), and, in float32, greedy tokens (exactly).
bool check(const std::string& directory, const CacheLayout& layout, const torch::Device& device,
           torch::Dtype dtype) {
  DecoderConfig config;
  CausalLM model = load(directory, layout, device, dtype, &config);
  const posenc::SafetensorsFile reference =
      posenc::read_safetensors(directory + "/reference.safetensors");
  const torch::Tensor prompts = reference.tensors["prompts"];
  const torch::Tensor expected_logits = reference.tensors["logits"];
  const torch::Tensor expected_tokens = reference.tensors["generated"];
  torch::NoGradGuard no_grad;

  const int64_t prompt_length = reference.tensors["prompt_length"].item<int64_t>();

  // The prompts in one forward, then again through the cache: their first prompt_length tokens at
  // once, the others one a step (teacher-forced decoding steps: each step's rotation and KV-cache
  // write, which greedy generation in bfloat16 does not pin down).
  model->reset_cache();
  const torch::Tensor whole = model->forward(prompts);
  TORCH_CHECK(whole.scalar_type() == dtype, "llama_decoder: the logits are ", whole.scalar_type(),
              ", but the model was asked for ", dtype);
  model->reset_cache();
  std::vector<torch::Tensor> steps{model->forward(prompts.narrow(1, 0, prompt_length))};
  for (int64_t t = prompt_length; t < prompts.size(1); ++t) {
    steps.push_back(model->forward(prompts.narrow(1, t, 1)));
  }
  const torch::Tensor stepped = torch::cat(steps, 1);
  const double scale = expected_logits.abs().max().item<double>();
  const auto judge = [&](const torch::Tensor& computed, std::ostream& report) {
    const torch::Tensor logits = computed.to(torch::kFloat);
    TORCH_CHECK(logits.sizes() == expected_logits.sizes(), "llama_decoder: logits ",
                logits.sizes(), ", but transformers' are ", expected_logits.sizes());
    if (dtype == torch::kFloat) {
      // float32 throughout on both sides; the matrix products sum in different orders (posenc's
      // example multiplies the queries of one key head as one matrix, transformers repeats the
      // keys), so logits agree to a few float32 ulps of their accumulations: 1e-5 of the largest.
      const double difference = (logits - expected_logits).abs().max().item<double>();
      report << "max |posenc - transformers| = " << difference;
      return difference <= 1e-5 * scale;
    }
    // bfloat16: both round every activation to bfloat16 at the same places (the projections'
    // outputs, the normalized states, the attention weights after a float32 softmax), but in
    // different orders, so neither equals the other; each is measured by its distance from the
    // float32 logits. posenc's may not be farther than transformers' own bfloat16 model's (its
    // rotary frequencies kept float32, make_models.py), within 25%: how much the RMS distance of
    // two equally rounded computations moves with their summation orders on these models (posenc
    // rounds each rotated value once, from float32 tables, where transformers rotates with
    // bfloat16 cos/sin in bfloat16 operations).
    TORCH_CHECK(reference.tensors.contains("logits_bfloat16"), "llama_decoder: ", directory,
                "/reference.safetensors has no logits_bfloat16; write it again with make_models.py");
    const double ours = rms(logits, expected_logits);
    const double theirs = rms(reference.tensors["logits_bfloat16"], expected_logits);
    report << "RMS distance from transformers' float32 logits " << ours
           << " (transformers' bfloat16 model: " << theirs << ")";
    return ours <= 1.25 * theirs;
  };
  std::ostringstream whole_report;
  std::ostringstream stepped_report;
  const bool whole_equal = judge(whole, whole_report);
  const bool stepped_equal = judge(stepped, stepped_report);
  const bool logits_equal = whole_equal && stepped_equal;

  const int64_t new_tokens = expected_tokens.size(1) - prompt_length;
  const auto start = std::chrono::steady_clock::now();
  const torch::Tensor generated =
      model->generate(expected_tokens.narrow(1, 0, prompt_length), new_tokens);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool tokens_equal = torch::equal(generated, expected_tokens);
  // (bfloat16's greedy tokens may part from the float32 model's where two logits lie within its
  // rounding: reported, not required)
  const int64_t same_tokens = generated.eq(expected_tokens).sum().item<int64_t>() - prompt_length;

  std::cout << directory << ": " << config.model_type << " on " << device << ", "
            << c10::toString(dtype) << ", " << (layout.paged ? "paged" : "contiguous")
            << " KV cache, rope " << model->rope->options.scaling().type() << ", rotary_dim "
            << model->rope->options.rotary_dim().value_or(model->rope->options.head_dim()) << " of "
            << model->rope->options.head_dim() << "\n  logits " << whole.sizes()
            << ", largest " << scale << ": in one forward " << whole_report.str()
            << (whole_equal ? "" : "  MISMATCH") << "; through the cache, " << prompt_length
            << " tokens then one a step, " << stepped_report.str()
            << (stepped_equal ? "" : "  MISMATCH")
            << "\n  greedy generation of " << new_tokens << " tokens: ";
  if (dtype == torch::kFloat) {
    std::cout << (tokens_equal ? "equal to transformers'" : "DIFFERENT from transformers'");
  } else {
    std::cout << same_tokens << " of " << new_tokens << " equal to transformers' float32 model's";
  }
  std::cout << " (" << new_tokens / seconds << " tokens/s)\n";
  if (dtype == torch::kFloat && !tokens_equal) {
    std::cout << "  posenc:       " << generated << "\n  transformers: " << expected_tokens << "\n";
  }
  return logits_equal && (tokens_equal || dtype != torch::kFloat);
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"A LLaMA-architecture decoder with posenc's rotary embedding"};
  app.require_subcommand(1);
  std::vector<std::string> directories;
  CLI::App* check_command =
      app.add_subcommand("check", "compare with transformers' reference.safetensors");
  check_command
      ->add_option("models", directories, "model directories (config.json, model.safetensors)")
      ->required();
  std::string directory;
  int64_t prompt_length = 128, tokens = 64, threads = 0, repeats = 3;
  CLI::App* generate_command =
      app.add_subcommand("generate", "time greedy generation (tokens per second, JSON)");
  generate_command->add_option("model", directory, "model directory")->required();
  generate_command->add_option("--prompt-length", prompt_length, "prompt tokens")
      ->check(CLI::PositiveNumber);
  generate_command->add_option("--tokens", tokens, "tokens generated")->check(CLI::PositiveNumber);
  generate_command->add_option("--repeats", repeats, "timed generations (the best is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "intra-op threads (default: LibTorch's)")
      ->check(CLI::NonNegativeNumber);
  std::string device_name = "cpu";
  app.add_option("--device", device_name,
                 "cpu, cuda, or auto (cuda where LibTorch sees a GPU): the model, its cache and its "
                 "rotary tables")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  std::string dtype_name = "float32";
  app.add_option("--dtype", dtype_name,
                 "the model's weights, activations and KV cache: float32 or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  CacheLayout layout;
  app.add_flag("--paged", layout.paged, "keep the KV cache in pages (vLLM's layout)");
  app.add_option("--block-size", layout.block_size, "tokens per page of the paged cache")
      ->check(CLI::PositiveNumber);
  check_command->fallthrough(); // the options above also after the subcommand
  generate_command->fallthrough();
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) {
      at::set_num_threads(static_cast<int>(threads));
    }
    const torch::Device device(
        device_name == "auto" ? (torch::cuda::is_available() ? "cuda" : "cpu") : device_name);
    TORCH_CHECK(!device.is_cuda() || torch::cuda::is_available(),
                "llama_decoder: --device cuda, but LibTorch sees no CUDA device");
    const torch::Dtype dtype = dtype_name == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
    if (check_command->parsed()) {
      bool all = true;
      for (const std::string& model : directories) {
        all = check(model, layout, device, dtype) && all;
      }
      return all ? 0 : 1;
    }
    DecoderConfig config;
    CausalLM model = load(directory, layout, device, dtype, &config);
    torch::NoGradGuard no_grad;
    torch::manual_seed(0);
    const torch::Tensor prompt =
        torch::randint(config.vocab_size, {1, prompt_length}, torch::kLong);
    model->generate(prompt, 2); // warm-up
    double best = std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      model->generate(prompt, tokens);
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::cout << "{\"implementation\": \"posenc C++\", \"device\": \"" << device
              << "\", \"dtype\": \"" << dtype_name << "\", \"paged\": " << (layout.paged ? "true" : "false")
              << ", \"prompt_length\": " << prompt_length
              << ", \"tokens\": " << tokens << ", \"threads\": " << at::get_num_threads()
              << ", \"seconds\": " << best << ", \"tokens_per_second\": " << tokens / best << "}\n";
    return 0;
  } catch (const c10::Error& error) {
    std::cerr << error.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
}
