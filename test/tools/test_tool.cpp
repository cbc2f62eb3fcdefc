// posenc_test_tool: the C++ side of the Python tests (test/python). Tensors travel through files
// written by torch.save / torch::pickle_save.
//
//   posenc_test_tool jit-run MODEL ARGS OUT
//       torch::jit::load(MODEL), call forward with the tuple stored in ARGS, save the result to
//       OUT.
//   posenc_test_tool load-pe --d-model D --max-len M [--base B] [--prefix P] [--non-strict] FILE
//   OUT
//       posenc::load_state_dict a PositionalEncoding from FILE (a Python state dict), save its pe.
//   posenc_test_tool export-learned --d-model D --max-len M [--seed S] OUT
//   posenc_test_tool export-token --vocab V --d-model D --max-len M [--learned] [--padding-idx P]
//   [--seed S] OUT
//       to_torchscript of a randomly initialized LearnedPositionalEmbedding /
//       TokenAndPositionEmbedding.
//   posenc_test_tool export-attention alibi|t5|rel-encoding|rel-attention|temperature
//   [--num-heads H] [--first-head F] [--heads N] [--d-model D] [--max-len M] [--num-buckets N]
//   [--max-distance M] [--causal] [--legacy] [--unscaled] [--floor-scale F] [--attn-scale A]
//   [--form llama4|ministral3] [--heads-first] [--seed S] OUT
//       to_torchscript of a randomly initialized ALiBi / RelativePositionBias /
//       RelPositionalEncoding / RelPositionMultiheadAttention, or an AttentionTemperature.
//   posenc_test_tool export-vision timesteps|embedder|axial|vision [--dim D] [--frequency-size F]
//   [--flip-sin-to-cos] [--shift S] [--scale S] [--max-period P] [--axes-dim A...] [--theta T]
//   [--ref-feat-shape H W] [--grid-offset O] [--xy] [--half-split] [--heads-first]
//   [--tokens-first] [--prefix P] [--seed S] OUT
//       to_torchscript of a Timesteps (embedding_dim D) / TimestepEmbedder (hidden_size D,
//       randomly initialized) / AxialRotaryEmbedding (axes_dim A, theta T) /
//       VisionRotaryEmbedding (dim D, temperature T).
//   posenc_test_tool t5-bias --num-heads H [--num-buckets N] [--max-distance M] [--causal]
//   --query-length Q --key-length K [--offset O] [--prefix P] FILE OUT
//       posenc::load_state_dict a RelativePositionBias from FILE (non-strict: a T5 attention
//       layer's other weights are ignored), save its bias [1, H, Q, K].
//   posenc_test_tool conformer-attention --d-model D --num-heads H [--prefix P] FILE INPUT OUT
//       load a RelPositionMultiheadAttention from FILE, attend the [B, L, D] tensor in INPUT to
//       itself with RelPositionalEncoding's relative positions (unscaled), save the output.
//   posenc_test_tool safetensors-copy IN OUT
//       posenc::read_safetensors(IN), then posenc::write_safetensors(OUT) of its tensors and
//       metadata.
//   posenc_test_tool safetensors-to-pickle IN OUT
//       posenc::read_safetensors(IN); save (tensors dict, metadata dict) to OUT.
//   posenc_test_tool save-module-safetensors learned|t5|token|conformer [--seed S] FILE OUT
//       posenc::save_safetensors of a randomly initialized module to FILE; its state dict (a dict)
//       to OUT.
//   posenc_test_tool load-module-safetensors learned|t5|token|conformer [--prefix P]
//   [--non-strict] FILE OUT
//       posenc::load_safetensors(FILE) into a module; its state dict (a dict) to OUT.
//   posenc_test_tool run-trained WEIGHTS ARGS OUT
//       load test_package.py's model (C++ modules of the posenc.nn ones there) from the
//       safetensors file WEIGHTS, run it on the tensor in ARGS, save the output.
//
// On a c10::Error the message goes to stderr and the exit status is 1.

#include <posenc/export.h>
#include <posenc/io/safetensors.h>
#include <posenc/io/state_dict.h>
#include <posenc/posenc.h>

#include <torch/script.h>
#include <torch/serialize.h>

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "cannot open ", path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_value(const c10::IValue& value, const std::string& path) {
  const std::vector<char> bytes = torch::pickle_save(value);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TORCH_CHECK(out.good(), "cannot write ", path);
}

c10::Dict<std::string, at::Tensor> to_dict(
    const torch::OrderedDict<std::string, at::Tensor>& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& item : tensors) {
    dict.insert(item.key(), item.value().detach());
  }
  return dict;
}

// The modules the safetensors round trips use (small, randomly initialized).
std::shared_ptr<torch::nn::Module> make_module(const std::string& kind) {
  if (kind == "learned") {
    return posenc::LearnedPositionalEmbedding(6, 10).ptr();
  }
  if (kind == "t5") {
    return posenc::RelativePositionBias(posenc::RelativePositionBiasOptions(4)).ptr();
  }
  if (kind == "token") {
    return posenc::TokenAndPositionEmbedding(
               posenc::TokenAndPositionEmbeddingOptions(20, 8, 12).positions(
                   posenc::PositionKind::kLearned))
        .ptr();
  }
  TORCH_CHECK(kind == "conformer", "unknown module kind '", kind, "'");
  return posenc::RelPositionMultiheadAttention(8, 2).ptr();
}


// The C++ twin of test_package.py's model (posenc.nn modules there): the same submodules, names
// and options, so a state dict trained in Python loads here.
struct TrainedModelImpl : torch::nn::Module {
  TrainedModelImpl()
      : embed(register_module("embed", torch::nn::Linear(8, 16))),
        positions(register_module("positions", posenc::PositionalEncoding(16, 64))),
        learned(register_module("learned", posenc::LearnedPositionalEmbedding(16, 64))),
        rope(register_module("rope", posenc::RotaryEmbedding(8, 64))),
        head(register_module("head", torch::nn::Linear(16, 4))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = learned(positions(embed(x)));
    const int64_t batch = h.size(0), length = h.size(1);
    const torch::Tensor q = rope(h.view({batch, length, 2, 8})).reshape({batch, length, 16});
    return head(torch::tanh(q));
  }

  torch::nn::Linear embed;
  posenc::PositionalEncoding positions;
  posenc::LearnedPositionalEmbedding learned;
  posenc::RotaryEmbedding rope;
  torch::nn::Linear head;
};
} // namespace

int main(int argc, char** argv) {
  CLI::App app{"C++ side of posenc's Python tests"};
  app.require_subcommand(1);

  std::string model_path, args_path, out_path;
  CLI::App* jit_run =
      app.add_subcommand("jit-run", "Run a TorchScript file's forward on saved arguments");
  jit_run->add_option("model", model_path)->required();
  jit_run->add_option("args", args_path)->required();
  jit_run->add_option("out", out_path)->required();
  jit_run->callback([&] {
    torch::jit::Module module = torch::jit::load(model_path);
    module.eval();
    const c10::IValue args = torch::pickle_load(read_bytes(args_path));
    TORCH_CHECK(args.isTuple(), "jit-run: ARGS must hold a tuple of forward arguments");
    std::vector<c10::IValue> inputs = args.toTupleRef().elements().vec();
    write_value(module.forward(inputs), out_path);
  });

  int64_t d_model = 0, max_len = 0;
  double base = 10000.0;
  std::string prefix, checkpoint;
  bool non_strict = false;
  CLI::App* load_pe =
      app.add_subcommand("load-pe", "Load a PositionalEncoding from a Python state dict");
  load_pe->add_option("--d-model", d_model)->required();
  load_pe->add_option("--max-len", max_len)->required();
  load_pe->add_option("--base", base);
  load_pe->add_option("--prefix", prefix);
  load_pe->add_flag("--non-strict", non_strict);
  load_pe->add_option("file", checkpoint)->required();
  load_pe->add_option("out", out_path)->required();
  load_pe->callback([&] {
    posenc::PositionalEncoding module(
        posenc::PositionalEncodingOptions(d_model, max_len).base(base));
    module->pe.fill_(-7.0); // so that values not loaded are visible
    posenc::load_state_dict(
        *module, checkpoint, posenc::LoadStateDictOptions().prefix(prefix).strict(!non_strict));
    write_value(module->pe, out_path);
  });

  int64_t seed = 0, vocab = 0, padding_idx = -1;
  bool learned = false;
  CLI::App* export_learned =
      app.add_subcommand("export-learned", "Export a LearnedPositionalEmbedding");
  export_learned->add_option("--d-model", d_model)->required();
  export_learned->add_option("--max-len", max_len)->required();
  export_learned->add_option("--seed", seed);
  export_learned->add_option("out", out_path)->required();
  export_learned->callback([&] {
    torch::manual_seed(seed);
    posenc::to_torchscript(posenc::LearnedPositionalEmbedding(d_model, max_len)).save(out_path);
  });
  CLI::App* export_token = app.add_subcommand("export-token", "Export a TokenAndPositionEmbedding");
  export_token->add_option("--vocab", vocab)->required();
  export_token->add_option("--d-model", d_model)->required();
  export_token->add_option("--max-len", max_len)->required();
  export_token->add_option("--padding-idx", padding_idx);
  export_token->add_flag("--learned", learned);
  export_token->add_option("--seed", seed);
  export_token->add_option("out", out_path)->required();
  export_token->callback([&] {
    torch::manual_seed(seed);
    posenc::TokenAndPositionEmbeddingOptions options(vocab, d_model, max_len);
    options.positions(learned ? posenc::PositionKind::kLearned : posenc::PositionKind::kSinusoidal);
    if (padding_idx >= 0) {
      options.padding_idx(padding_idx);
    }
    posenc::to_torchscript(posenc::TokenAndPositionEmbedding(options)).save(out_path);
  });

  int64_t num_heads = 0, num_buckets = 32, max_distance = 128, query_length = 0,
          key_length = 0, offset = 0;
  bool causal = false;

  std::string kind;
  int64_t first_head = 0, heads = -1;
  bool legacy = false, unscaled = false, temperature_heads_first = false;
  double floor_scale = 8192.0, attn_scale = 0.1;
  std::string form = "llama4";
  CLI::App* export_attention =
      app.add_subcommand("export-attention", "Export an attention-bias module");
  export_attention->add_option("kind", kind)
      ->required()
      ->check(CLI::IsMember({"alibi", "t5", "rel-encoding", "rel-attention", "temperature"}));
  export_attention->add_option("--num-heads", num_heads);
  export_attention->add_option("--first-head", first_head);
  export_attention->add_option("--heads", heads);
  export_attention->add_option("--d-model", d_model);
  export_attention->add_option("--max-len", max_len);
  export_attention->add_option("--num-buckets", num_buckets);
  export_attention->add_option("--max-distance", max_distance);
  export_attention->add_flag("--causal", causal);
  export_attention->add_flag("--legacy", legacy);
  export_attention->add_flag("--unscaled", unscaled);
  export_attention->add_option("--floor-scale", floor_scale);
  export_attention->add_option("--attn-scale", attn_scale);
  export_attention->add_option("--form", form)->check(CLI::IsMember({"llama4", "ministral3"}));
  export_attention->add_flag("--heads-first", temperature_heads_first);
  export_attention->add_option("--seed", seed);
  export_attention->add_option("out", out_path)->required();
  export_attention->callback([&] {
    torch::manual_seed(seed);
    if (kind == "alibi") {
      posenc::ALiBiOptions options(num_heads);
      options.first_head(first_head);
      if (heads >= 0) {
        options.heads(heads);
      }
      posenc::to_torchscript(posenc::ALiBi(options)).save(out_path);
    } else if (kind == "t5") {
      posenc::to_torchscript(
          posenc::RelativePositionBias(posenc::RelativePositionBiasOptions(num_heads)
                                           .num_buckets(num_buckets)
                                           .max_distance(max_distance)
                                           .bidirectional(!causal)))
          .save(out_path);
    } else if (kind == "rel-encoding") {
      posenc::to_torchscript(
          posenc::RelPositionalEncoding(posenc::RelPositionalEncodingOptions(d_model)
                                            .max_len(max_len)
                                            .legacy(legacy)
                                            .scale_input(!unscaled)))
          .save(out_path);
    } else if (kind == "temperature") {
      posenc::to_torchscript(
          posenc::AttentionTemperature(
              posenc::AttentionTemperatureOptions()
                  .floor_scale(floor_scale)
                  .attn_scale(attn_scale)
                  .form(form == "llama4" ? posenc::AttentionTemperatureForm::kLlama4
                                         : posenc::AttentionTemperatureForm::kMinistral3)
                  .heads_first(temperature_heads_first)))
          .save(out_path);
    } else {
      posenc::to_torchscript(posenc::RelPositionMultiheadAttention(d_model, num_heads))
          .save(out_path);
    }
  });
  std::string vision_kind;
  int64_t dim = 0, frequency_size = 256, max_period = 10000, prefix_tokens = 1;
  double shift = 1.0, scale = 1.0, theta = 10000.0, grid_offset = 0.0;
  bool flip = false, xy = false, half_split = false, heads_first = false, tokens_first = false;
  std::vector<int64_t> axes_dim, ref_feat_shape;
  CLI::App* export_vision =
      app.add_subcommand("export-vision", "Export a vision or diffusion module");
  export_vision->add_option("kind", vision_kind)
      ->required()
      ->check(CLI::IsMember({"timesteps", "embedder", "axial", "vision"}));
  export_vision->add_option("--dim", dim);
  export_vision->add_option("--frequency-size", frequency_size);
  export_vision->add_flag("--flip-sin-to-cos", flip);
  export_vision->add_option("--shift", shift);
  export_vision->add_option("--scale", scale);
  export_vision->add_option("--max-period", max_period);
  export_vision->add_option("--axes-dim", axes_dim);
  export_vision->add_option("--theta", theta);
  export_vision->add_option("--ref-feat-shape", ref_feat_shape)->expected(2);
  export_vision->add_option("--grid-offset", grid_offset);
  export_vision->add_flag("--xy", xy);
  export_vision->add_flag("--half-split", half_split);
  export_vision->add_flag("--heads-first", heads_first);
  export_vision->add_flag("--tokens-first", tokens_first);
  export_vision->add_option("--prefix", prefix_tokens);
  export_vision->add_option("--seed", seed);
  export_vision->add_option("out", out_path)->required();
  export_vision->callback([&] {
    torch::manual_seed(seed);
    const posenc::RotaryPairing pairing =
        half_split ? posenc::RotaryPairing::kHalfSplit : posenc::RotaryPairing::kInterleaved;
    if (vision_kind == "timesteps") {
      posenc::to_torchscript(posenc::Timesteps(posenc::TimestepEmbeddingOptions(dim)
                                                   .flip_sin_to_cos(flip)
                                                   .downscale_freq_shift(shift)
                                                   .scale(scale)
                                                   .max_period(max_period)))
          .save(out_path);
    } else if (vision_kind == "embedder") {
      posenc::to_torchscript(posenc::TimestepEmbedder(posenc::TimestepEmbedderOptions(dim)
                                                          .frequency_embedding_size(frequency_size)
                                                          .max_period(max_period)))
          .save(out_path);
    } else if (vision_kind == "axial") {
      posenc::to_torchscript(
          posenc::AxialRotaryEmbedding(posenc::AxialRotaryEmbeddingOptions(axes_dim)
                                           .theta(theta)
                                           .pairing(pairing)
                                           .heads_first(heads_first)))
          .save(out_path);
    } else {
      posenc::to_torchscript(
          posenc::VisionRotaryEmbedding(
              posenc::VisionRotaryEmbeddingOptions(dim)
                  .temperature(theta)
                  .ref_feat_shape(ref_feat_shape)
                  .grid_offset(grid_offset)
                  .grid_indexing(xy ? posenc::GridIndexing::kXY : posenc::GridIndexing::kIJ)
                  .pairing(pairing)
                  .num_prefix_tokens(prefix_tokens)
                  .heads_first(!tokens_first)))
          .save(out_path);
    }
  });
  CLI::App* t5_bias =
      app.add_subcommand("t5-bias", "Load a RelativePositionBias from a T5 layer's state dict");
  t5_bias->add_option("--num-heads", num_heads)->required();
  t5_bias->add_option("--num-buckets", num_buckets);
  t5_bias->add_option("--max-distance", max_distance);
  t5_bias->add_flag("--causal", causal);
  t5_bias->add_option("--query-length", query_length)->required();
  t5_bias->add_option("--key-length", key_length)->required();
  t5_bias->add_option("--offset", offset);
  t5_bias->add_option("--prefix", prefix);
  t5_bias->add_option("file", checkpoint)->required();
  t5_bias->add_option("out", out_path)->required();
  t5_bias->callback([&] {
    posenc::RelativePositionBias module(posenc::RelativePositionBiasOptions(num_heads)
                                            .num_buckets(num_buckets)
                                            .max_distance(max_distance)
                                            .bidirectional(!causal));
    module->relative_attention_bias->weight.data().fill_(-7.0); // values not loaded show
    posenc::load_state_dict(*module, checkpoint,
                            posenc::LoadStateDictOptions().prefix(prefix).strict(false));
    torch::NoGradGuard no_grad;
    write_value(module(query_length, key_length, offset), out_path);
  });

  std::string input_path;
  CLI::App* conformer = app.add_subcommand(
      "conformer-attention", "Load a RelPositionMultiheadAttention and attend an input");
  conformer->add_option("--d-model", d_model)->required();
  conformer->add_option("--num-heads", num_heads)->required();
  conformer->add_option("--prefix", prefix);
  conformer->add_option("file", checkpoint)->required();
  conformer->add_option("input", input_path)->required();
  conformer->add_option("out", out_path)->required();
  conformer->callback([&] {
    posenc::RelPositionMultiheadAttention attention(d_model, num_heads);
    posenc::load_state_dict(*attention, checkpoint, posenc::LoadStateDictOptions().prefix(prefix));
    attention->eval();
    const torch::Tensor x = torch::pickle_load(read_bytes(input_path)).toTensor();
    posenc::RelPositionalEncoding encoding(
        posenc::RelPositionalEncodingOptions(d_model).max_len(x.size(1)).scale_input(false));
    torch::NoGradGuard no_grad;
    const torch::Tensor pos_emb = std::get<1>(encoding->forward(x));
    write_value(attention(x, x, x, pos_emb), out_path);
  });

  std::string module_kind;
  CLI::App* st_copy =
      app.add_subcommand("safetensors-copy", "Read a safetensors file and write it again");
  st_copy->add_option("in", checkpoint)->required();
  st_copy->add_option("out", out_path)->required();
  st_copy->callback([&] {
    const posenc::SafetensorsFile file = posenc::read_safetensors(checkpoint);
    posenc::write_safetensors(out_path, file.tensors, file.metadata);
  });
  CLI::App* st_pickle =
      app.add_subcommand("safetensors-to-pickle", "Read a safetensors file, pickle its contents");
  st_pickle->add_option("in", checkpoint)->required();
  st_pickle->add_option("out", out_path)->required();
  st_pickle->callback([&] {
    const posenc::SafetensorsFile file = posenc::read_safetensors(checkpoint);
    c10::Dict<std::string, std::string> metadata;
    for (const auto& item : file.metadata) {
      metadata.insert(item.first, item.second);
    }
    write_value(c10::ivalue::Tuple::create({to_dict(file.tensors), metadata}), out_path);
  });
  CLI::App* st_save = app.add_subcommand("save-module-safetensors",
                                         "save_safetensors of a randomly initialized module");
  st_save->add_option("kind", module_kind)->required();
  st_save->add_option("--seed", seed);
  st_save->add_option("file", checkpoint)->required();
  st_save->add_option("out", out_path)->required();
  st_save->callback([&] {
    torch::manual_seed(seed);
    const auto module = make_module(module_kind);
    posenc::save_safetensors(*module, checkpoint);
    write_value(to_dict(posenc::state_dict(*module)), out_path);
  });
  CLI::App* st_load =
      app.add_subcommand("load-module-safetensors", "load_safetensors into a module");
  st_load->add_option("kind", module_kind)->required();
  st_load->add_option("--prefix", prefix);
  st_load->add_flag("--non-strict", non_strict);
  st_load->add_option("file", checkpoint)->required();
  st_load->add_option("out", out_path)->required();
  st_load->callback([&] {
    const auto module = make_module(module_kind);
    posenc::load_safetensors(*module, checkpoint,
                             posenc::LoadStateDictOptions().prefix(prefix).strict(!non_strict));
    write_value(to_dict(posenc::state_dict(*module)), out_path);
  });

  std::string weights_path;
  CLI::App* run_trained = app.add_subcommand(
      "run-trained", "Load test_package.py's trained model from safetensors and run it");
  run_trained->add_option("weights", weights_path)->required();
  run_trained->add_option("args", args_path)->required();
  run_trained->add_option("out", out_path)->required();
  run_trained->callback([&] {
    TrainedModelImpl model;
    posenc::load_safetensors(model, weights_path);
    model.eval();
    const c10::IValue args = torch::pickle_load(read_bytes(args_path));
    TORCH_CHECK(args.isTuple(), "run-trained: ARGS must hold a tuple (x,)");
    torch::NoGradGuard no_grad;
    write_value(model.forward(args.toTupleRef().elements().at(0).toTensor()), out_path);
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const c10::Error& e) {
    std::cerr << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
