// A small transformer classifier that needs word order: is the first token of a sequence smaller
// than the last one? Token embeddings alone cannot tell first from last; posenc's
// TokenAndPositionEmbedding in front of torch::nn::TransformerEncoder can.

#include <posenc/posenc.h>

#include <torch/torch.h>

#include <cstdio>

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl(int64_t vocab, int64_t d_model, int64_t max_len)
      : embed(register_module("embed",
                              posenc::TokenAndPositionEmbedding(
                                  posenc::TokenAndPositionEmbeddingOptions(vocab, d_model, max_len)
                                      .scale(1.0)            // LibTorch embeddings start at N(0, 1)
                                      .batch_first(false)))) // the layout TransformerEncoder takes
        ,
        encoder(register_module("encoder",
                                torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                                    torch::nn::TransformerEncoderLayerOptions(d_model, 4)
                                        .dim_feedforward(64)
                                        .dropout(0.0),
                                    2)))),
        head(register_module("head", torch::nn::Linear(d_model, 2))) {}

  // ids [L, B] -> logits [B, 2]
  torch::Tensor forward(const torch::Tensor& ids) {
    return head(encoder(embed(ids)).mean(0));
  }

  posenc::TokenAndPositionEmbedding embed;
  torch::nn::TransformerEncoder encoder;
  torch::nn::Linear head;
};
TORCH_MODULE(Classifier);

int main() {
  torch::manual_seed(0);
  const int64_t vocab = 20, length = 10, batch = 64;
  Classifier model(vocab, 32, length);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(2e-3));
  const auto make_batch = [&](int64_t n) {
    const auto ids = torch::randint(vocab, {length, n}, torch::kLong);
    return std::make_pair(ids, (ids[0] < ids[length - 1]).to(torch::kLong));
  };
  for (int step = 1; step <= 300; ++step) {
    const auto [ids, labels] = make_batch(batch);
    const auto loss = torch::nn::functional::cross_entropy(model(ids), labels);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    if (step % 100 == 0) {
      std::printf("step %d  loss %.4f\n", step, loss.item<double>());
    }
  }
  model->eval();
  torch::NoGradGuard no_grad;
  const auto [ids, labels] = make_batch(2000);
  const double accuracy = model(ids).argmax(1).eq(labels).to(torch::kDouble).mean().item<double>();
  std::printf("held-out accuracy %.1f%% (a model without positions: about 50%%)\n",
              100.0 * accuracy);
  return accuracy > 0.8 ? 0 : 1;
}
