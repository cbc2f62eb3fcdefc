// posenc's CPU benchmarks. Every case is registered for each shape, dtype and thread count, so
// that one run measures posenc's paths next to the formulations they replace and the memory
// roofline (copy_ of the same bytes). Times are wall-clock (UseRealTime) per call.
//
//   add/<case>/<B>x<L>x<D>/<dtype>/threads:<n>       positions added to x [B, L, D]
//   token/<case>/<B>x<L>x<D>/<dtype>/threads:<n>     token embedding + positions (+ dropout)
//   rope/<case>/<B>x<L>x<H>x<Dh>/<dtype>/threads:<n> rotary embedding of [B, L, H, Dh]
//   rope_qk/<case>/8x2048x32q8kx128/<dtype>/threads:<n>  queries [8, 2048, 32, 128] and keys
//                                                  [8, 2048, 8, 128] (LLaMA-3-8B's GQA heads)
//   rope_decode/<case>/<B>x1x32q8kx128/<dtype>/threads:<n>  one decoding step of q and k
//   decode_checks/<case>/1x1x32q8kx128/float32/threads:1  that step's checks, each timed alone
//   attention_bias/<case>/<shape>/float32/threads:<n>  ALiBi's full bias [32, 2048, 2048], T5's
//                                                  bias [1, 8, 512, 512], rel_shift of scores
//                                                  [8, 4, 512, 1023], each next to the eager
//                                                  ATen formulation it replaces; ALiBi's and
//                                                  T5's row of one decoding step
//
// Run once more with THP_MEM_ALLOC_ENABLE=1 (PyTorch's CPU allocator then asks for transparent
// huge pages) to see what page faults cost the large out-of-place rows.

#include <posenc/posenc.h>

// posenc's own checks, timed one by one (decode_checks): internal headers, from src/
#include "detail/checks.h"
#include "ops/rotary/cpu_rows.h"
#include "ops/common/arguments.h"
#include "ops/rotary/arguments.h"

#include <torch/torch.h>

#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace {

struct Shape {
  int64_t batch, length, width;
  std::string name() const {
    return std::to_string(batch) + "x" + std::to_string(length) + "x" + std::to_string(width);
  }
};

const std::vector<Shape> kShapes = {{1, 1, 512}, {8, 2048, 1024}, {64, 512, 768}};
const std::vector<std::pair<torch::Dtype, std::string>> kDtypes = {{torch::kFloat, "float32"},
                                                                   {torch::kBFloat16, "bfloat16"}};
const std::vector<int> kThreads = {1, 2};

// A case: prepares its state once (outside the timing) and returns the call to time. Buffers a
// case writes into are created with zeros_like, so that their pages are faulted in before the
// timing starts (an untouched empty_like buffer would charge its first iteration ~2 us a page).
using Prepare = std::function<std::function<void()>(const Shape&, torch::Dtype)>;

void register_case(const std::string& family,
                   const std::string& name,
                   const Prepare& prepare,
                   const std::vector<Shape>& shapes) {
  for (const auto& shape : shapes) {
    for (const auto& dtype : kDtypes) {
      for (const int threads : kThreads) {
        const std::string full = family + "/" + name + "/" + shape.name() + "/" + dtype.second +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(
            full.c_str(),
            [=](benchmark::State& state) {
              at::set_num_threads(threads);
              torch::NoGradGuard no_grad;
              torch::manual_seed(0);
              const std::function<void()> call = prepare(shape, dtype.first);
              for (auto _ : state) {
                call();
              }
              const double bytes =
                  2.0 * shape.batch * shape.length * shape.width * torch::elementSize(dtype.first);
              state.SetBytesProcessed(
                  static_cast<int64_t>(state.iterations() * bytes)); // read x + write out
            })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

// --- adding positions -------------------------------------------------------------------------

void register_add() {
  const auto input = [](const Shape& s, torch::Dtype dtype) {
    return torch::randn({s.batch, s.length, s.width}).to(dtype);
  };
  register_case(
      "add",
      "posenc_module",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        auto module = posenc::PositionalEncoding(s.width, 4096);
        module->eval();
        const auto x = input(s, dtype);
        return [module, x]() mutable { benchmark::DoNotOptimize(module(x)); };
      },
      kShapes);
  register_case(
      "add",
      "posenc_inplace",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        auto module = posenc::PositionalEncoding(
            posenc::PositionalEncodingOptions(s.width, 4096).inplace(true));
        module->eval();
        const auto x = input(s, dtype);
        return [module, x]() mutable { benchmark::DoNotOptimize(module(x)); };
      },
      kShapes);
  register_case(
      "add",
      "posenc_out",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        const auto table = posenc::functional::sinusoidal_table(4096, s.width).unsqueeze(0);
        const auto x = input(s, dtype);
        auto out = torch::zeros_like(x);
        return [table, x, out]() mutable { posenc::ops::add_position_table_out(out, x, table); };
      },
      kShapes);
  // The formulation a direct port of the Python module gives: a fresh output, type promotion to
  // float32 for bfloat16 inputs, a cast back.
  register_case(
      "add",
      "naive_cpp",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        const auto pe = posenc::functional::sinusoidal_table(4096, s.width).unsqueeze(0);
        const auto x = input(s, dtype);
        const int64_t length = s.length;
        return [pe, x, length]() {
          benchmark::DoNotOptimize((x + pe.slice(1, 0, length)).to(x.scalar_type()));
        };
      },
      kShapes);
  register_case(
      "add",
      "aten_add_out",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        const auto pe = posenc::functional::sinusoidal_table(4096, s.width).unsqueeze(0).to(dtype);
        const auto x = input(s, dtype);
        auto out = torch::zeros_like(x);
        const int64_t length = s.length;
        return [pe, x, out, length]() mutable { at::add_out(out, x, pe.slice(1, 0, length)); };
      },
      kShapes);
  register_case(
      "add",
      "roofline_copy",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        const auto x = input(s, dtype);
        auto out = torch::zeros_like(x);
        return [x, out]() mutable { out.copy_(x); };
      },
      kShapes);
}

// --- token embedding + positions + dropout
// --------------------------------------------------------

void register_token() {
  const std::vector<Shape> shapes = {{8, 2048, 1024}};
  const int64_t vocab = 32000;
  for (const bool train : {false, true}) {
    const std::string mode = train ? "train" : "eval";
    register_case(
        "token",
        "posenc_fused_" + mode,
        [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
          auto module = posenc::TokenAndPositionEmbedding(
              posenc::TokenAndPositionEmbeddingOptions(vocab, s.width, 4096).dropout(0.1));
          module->to(dtype);
          train ? module->train() : module->eval();
          const auto ids = torch::randint(0, vocab, {s.batch, s.length}, torch::kLong);
          return [module, ids]() mutable { benchmark::DoNotOptimize(module(ids)); };
        },
        shapes);
    // The eager chain: embedding, mul, add, dropout.
    register_case(
        "token",
        "eager_chain_" + mode,
        [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
          const auto weight = torch::randn({vocab, s.width}).to(dtype);
          const auto pe = posenc::functional::sinusoidal_table(4096, s.width).unsqueeze(0);
          const auto ids = torch::randint(0, vocab, {s.batch, s.length}, torch::kLong);
          const double scale = std::sqrt(static_cast<double>(s.width));
          const int64_t length = s.length;
          return [=]() {
            auto y = (torch::embedding(weight, ids) * scale + pe.slice(1, 0, length))
                         .to(weight.scalar_type());
            benchmark::DoNotOptimize(torch::dropout(y, 0.1, train));
          };
        },
        shapes);
  }
}

// --- rotary
// ---------------------------------------------------------------------------------------

void register_rope() {
  // [B, L, H, Dh] = [8, 2048, 16, 64]: registered as a Shape of B x L x (H * Dh).
  const std::vector<Shape> shapes = {{8, 2048, 1024}};
  const auto qk = [](const Shape& s, torch::Dtype dtype) {
    return torch::randn({s.batch, s.length, 16, s.width / 16}).to(dtype);
  };
  register_case(
      "rope",
      "posenc_fused",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        auto module = posenc::RotaryEmbedding(s.width / 16, 4096);
        const auto q = qk(s, dtype);
        return [module, q]() mutable { benchmark::DoNotOptimize(module(q)); };
      },
      shapes);
  register_case(
      "rope",
      "posenc_fused_inplace",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        auto tables = posenc::functional::rotary_tables(4096, s.width / 16);
        auto q = qk(s, dtype);
        return
            [tables, q]() mutable { posenc::ops::apply_rotary_(q, tables.first, tables.second); };
      },
      shapes);
  // HF LLaMA's formulation: q * cos + rotate_half(q) * sin, cos/sin repeated over both halves.
  register_case(
      "rope",
      "eager_rotate_half",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        auto tables = posenc::functional::rotary_tables(4096, s.width / 16);
        const auto cos = torch::cat({tables.first, tables.first}, -1)
                             .narrow(0, 0, s.length)
                             .view({1, s.length, 1, -1})
                             .to(dtype);
        const auto sin = torch::cat({tables.second, tables.second}, -1)
                             .narrow(0, 0, s.length)
                             .view({1, s.length, 1, -1})
                             .to(dtype);
        const auto q = qk(s, dtype);
        const int64_t half = s.width / 32;
        return [=]() {
          const auto rotated = torch::cat({-q.narrow(-1, half, half), q.narrow(-1, 0, half)}, -1);
          benchmark::DoNotOptimize(q * cos + rotated * sin);
        };
      },
      shapes);
  register_case(
      "rope",
      "roofline_copy",
      [=](const Shape& s, torch::Dtype dtype) -> std::function<void()> {
        const auto q = qk(s, dtype);
        auto out = torch::zeros_like(q);
        return [q, out]() mutable { out.copy_(q); };
      },
      shapes);
}

// --- queries and keys of one attention call ----------------------------------------------------

// The roofline of a q+k call: copy_ of q and k into buffers of their shapes.
std::function<void()> copy_qk(const torch::Tensor& q, const torch::Tensor& k) {
  auto q_out = torch::zeros_like(q);
  auto k_out = torch::zeros_like(k);
  return [q, k, q_out, k_out]() mutable {
    q_out.copy_(q);
    k_out.copy_(k);
  };
}

void register_rope_qk() {
  constexpr int64_t kBatch = 8;
  constexpr int64_t kLength = 2048;
  constexpr int64_t kQHeads = 32;
  constexpr int64_t kKHeads = 8;
  constexpr int64_t kHeadDim = 128;
  using Call = std::function<void()>;
  using Make = std::function<Call(torch::Dtype)>;
  const auto q_of = [=](torch::Dtype dtype) {
    return torch::randn({kBatch, kLength, kQHeads, kHeadDim}).to(dtype);
  };
  const auto k_of = [=](torch::Dtype dtype) {
    return torch::randn({kBatch, kLength, kKHeads, kHeadDim}).to(dtype);
  };
  const auto module_case = [=](posenc::RopeScalingOptions scaling) -> Make {
    return [=](torch::Dtype dtype) -> Call {
      posenc::RotaryEmbedding rope(
          posenc::RotaryEmbeddingOptions(kHeadDim, 8192).base(500000.0).scaling(scaling));
      const auto q = q_of(dtype);
      const auto k = k_of(dtype);
      return [rope, q, k]() mutable { benchmark::DoNotOptimize(rope->forward_qk(q, k)); };
    };
  };
  const auto original = [](posenc::RopeType type) {
    return posenc::RopeScalingOptions(type).original_max_position_embeddings(4096);
  };
  std::vector<double> short_factor(kHeadDim / 2, 1.0);
  std::vector<double> long_factor(kHeadDim / 2, 4.0);
  const std::vector<std::pair<std::string, Make>> cases = {
      {"posenc_qk", module_case(posenc::RopeScalingOptions())},
      {"posenc_qk_llama3", module_case(original(posenc::RopeType::kLlama3).factor(8.0))},
      {"posenc_qk_yarn", module_case(original(posenc::RopeType::kYarn).factor(2.0))},
      {"posenc_qk_longrope", module_case(original(posenc::RopeType::kLongRope)
                                             .short_factor(short_factor)
                                             .long_factor(long_factor))},
      {"posenc_qk_dynamic", module_case(posenc::RopeScalingOptions(posenc::RopeType::kDynamic)
                                            .factor(2.0)
                                            .max_position_embeddings(4096))},
      // Every row of the call computed from the frequencies (cached_len 1): the cost of
      // positions past a module's cache (e.g. a 10M-position context) against the cached rows.
      {"posenc_qk_uncached",
       [=](torch::Dtype dtype) -> Call {
         posenc::RotaryEmbedding rope(
             posenc::RotaryEmbeddingOptions(kHeadDim, 8192).base(500000.0).cached_len(1));
         const auto q = q_of(dtype);
         const auto k = k_of(dtype);
         return [rope, q, k]() mutable { benchmark::DoNotOptimize(rope->forward_qk(q, k)); };
       }},
      {"posenc_two_calls",
       [=](torch::Dtype dtype) -> Call {
         posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(kHeadDim, 8192));
         const auto q = q_of(dtype);
         const auto k = k_of(dtype);
         return [rope, q, k]() mutable {
           benchmark::DoNotOptimize(rope(q));
           benchmark::DoNotOptimize(rope(k));
         };
       }},
      {"posenc_qk_inplace",
       [=](torch::Dtype dtype) -> Call {
         const auto tables = posenc::functional::rotary_tables(8192, kHeadDim);
         auto q = q_of(dtype);
         auto k = k_of(dtype);
         return [tables, q, k]() mutable {
           posenc::ops::apply_rotary_qk_(q, k, tables.first, tables.second);
         };
       }},
      // In place on the q and k views of one fused projection [B, L, Hq + 2 Hk, Dh].
      {"posenc_qk_inplace_fused_qkv",
       [=](torch::Dtype dtype) -> Call {
         const auto tables = posenc::functional::rotary_tables(8192, kHeadDim);
         const auto qkv =
             torch::randn({kBatch, kLength, kQHeads + 2 * kKHeads, kHeadDim}).to(dtype);
         auto q = qkv.narrow(2, 0, kQHeads);
         auto k = qkv.narrow(2, kQHeads, kKHeads);
         return [tables, q, k]() mutable {
           posenc::ops::apply_rotary_qk_(q, k, tables.first, tables.second);
         };
       }},
      // HF transformers' apply_rotary_pos_emb: q * cos + rotate_half(q) * sin and the same for k,
      // cos/sin [L, Dh] (both halves) in the input's dtype, broadcast over batch and heads.
      {"hf_eager_apply_rotary_pos_emb",
       [=](torch::Dtype dtype) -> Call {
         const auto tables = posenc::functional::rotary_tables(8192, kHeadDim);
         const auto cos = torch::cat({tables.first, tables.first}, -1)
                              .narrow(0, 0, kLength)
                              .view({1, kLength, 1, kHeadDim})
                              .to(dtype);
         const auto sin = torch::cat({tables.second, tables.second}, -1)
                              .narrow(0, 0, kLength)
                              .view({1, kLength, 1, kHeadDim})
                              .to(dtype);
         const auto q = q_of(dtype);
         const auto k = k_of(dtype);
         return [=]() {
           const auto rotate_half = [](const torch::Tensor& x) {
             const int64_t half = x.size(-1) / 2;
             return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
           };
           benchmark::DoNotOptimize(q * cos + rotate_half(q) * sin);
           benchmark::DoNotOptimize(k * cos + rotate_half(k) * sin);
         };
       }},
      {"roofline_copy", [=](torch::Dtype dtype) { return copy_qk(q_of(dtype), k_of(dtype)); }},
      // What any out-of-place operator pays before it computes: fresh outputs like q and k, each
      // 4 KiB page written once, by the call's threads (the page faults, the kernel's zeroing,
      // the unmapping when freed).
      {"fresh_allocation",
       [=](torch::Dtype dtype) -> Call {
         const auto q = q_of(dtype);
         const auto k = k_of(dtype);
         return [q, k]() {
           constexpr int64_t kPage = 4096;
           for (const torch::Tensor* like : {&q, &k}) {
             torch::Tensor out = torch::empty_like(*like);
             auto* bytes = static_cast<volatile char*>(out.data_ptr());
             at::parallel_for(0, out.nbytes() / kPage, 256, [&](int64_t begin, int64_t end) {
               for (int64_t page = begin; page < end; ++page) {
                 bytes[page * kPage] = 0;
               }
             });
             benchmark::DoNotOptimize(out);
           }
         };
       }},
  };
  for (const auto& c : cases) {
    for (const auto& dtype : kDtypes) {
      for (const int threads : kThreads) {
        const std::string name = "rope_qk/" + c.first + "/8x2048x32q8kx128/" + dtype.second +
                                 "/threads:" + std::to_string(threads);
        const Make make = c.second;
        const torch::Dtype type = dtype.first;
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& state) {
              at::set_num_threads(threads);
              torch::NoGradGuard no_grad;
              torch::manual_seed(0);
              const Call call = make(type);
              for (auto _ : state) {
                call();
              }
              const double bytes = 2.0 * kBatch * kLength * (kQHeads + kKHeads) * kHeadDim *
                                   torch::elementSize(type);
              state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
            })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

// --- one decoding step: queries and keys of one token ------------------------------------------

// q [B, 1, 32, 128], k [B, 1, 8, 128] at batch 1 and 64, on 1 and 2 threads (a step's tokens are
// split over the threads, each token's 40 heads rotated in one pass), one C++ call per step with
// every check on: a cached row (position 4000 of an 8192-row cache), the same position computed
// from the frequencies (cached_len 1), the last position of Llama 4 Scout's 10,485,760 (8192 cached
// rows), and copy_ of q and k.
void register_rope_decode() {
  using Call = std::function<void()>;
  constexpr int64_t kQHeads = 32;
  constexpr int64_t kKHeads = 8;
  constexpr int64_t kHeadDim = 128;
  constexpr int64_t kContext = 10485760;
  const auto module_case = [=](int64_t max_len, int64_t cached_len, int64_t offset) {
    return [=](int64_t batch, torch::Dtype dtype) -> Call {
      posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(kHeadDim, max_len)
                                       .base(500000.0)
                                       .cached_len(cached_len));
      auto q = torch::randn({batch, 1, kQHeads, kHeadDim}).to(dtype);
      auto k = torch::randn({batch, 1, kKHeads, kHeadDim}).to(dtype);
      return [rope, q, k, offset]() mutable { rope->forward_qk_(q, k, offset); };
    };
  };
  const std::vector<std::pair<std::string, std::function<Call(int64_t, torch::Dtype)>>> cases = {
      {"posenc_qk_inplace_cached", module_case(8192, 8192, 4000)},
      {"posenc_qk_inplace_computed", module_case(8192, 1, 4000)},
      {"posenc_qk_inplace_10M_last", module_case(kContext, 8192, kContext - 1)},
      {"roofline_copy",
       [=](int64_t batch, torch::Dtype dtype) {
         return copy_qk(torch::randn({batch, 1, kQHeads, kHeadDim}).to(dtype),
                        torch::randn({batch, 1, kKHeads, kHeadDim}).to(dtype));
       }},
  };
  for (const auto& c : cases) {
    for (const int64_t batch : {int64_t{1}, int64_t{64}}) {
      for (const auto& dtype : kDtypes) {
        for (const int threads : kThreads) {
          const std::string name = "rope_decode/" + c.first + "/" + std::to_string(batch) +
                                   "x1x32q8kx128/" + dtype.second +
                                   "/threads:" + std::to_string(threads);
          const auto make = c.second;
          const torch::Dtype type = dtype.first;
          benchmark::RegisterBenchmark(name.c_str(),
                                       [=](benchmark::State& state) {
                                         at::set_num_threads(threads);
                                         torch::NoGradGuard no_grad;
                                         torch::manual_seed(0);
                                         const Call call = make(batch, type);
                                         for (auto _ : state) {
                                           call();
                                         }
                                       })
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

// --- what the checks of one decoding step cost
// ----------------------------------------------------

// q [1, 1, 32, 128], k [1, 1, 8, 128] at position 4000 of an 8192-row cache, float32, 1 thread:
// the module's call, the operator's (apply_rotary_qk_: the checks and the kernel, without the
// module's own), and each check of the path timed alone, as the operator runs it: its arguments
// (shapes, dtypes, devices, the offset against the cache), the overlap of q and k with each other
// and with what they are computed from, the position range, the frequencies of computed rows
// (finite angles, copied to the host) and, for the add path, the scale; and the kernel's row loop
// alone, called directly.
void register_decode_checks() {
  using Call = std::function<void()>;
  constexpr int64_t kHeadDim = 128;
  constexpr int64_t kOffset = 4000;
  constexpr const char* kOp = "posenc::apply_rotary_qk_";
  struct Step {
    posenc::RotaryEmbedding rope{
        posenc::RotaryEmbeddingOptions(kHeadDim, 8192).base(500000.0).cached_len(8192)};
    torch::Tensor q = torch::randn({1, 1, 32, kHeadDim});
    torch::Tensor k = torch::randn({1, 1, 8, kHeadDim});
  };
  const std::vector<std::pair<std::string, std::function<Call(const std::shared_ptr<Step>&)>>>
      cases = {
          {"module_call",
           [](const std::shared_ptr<Step>& s) -> Call {
             return [s]() { s->rope->forward_qk_(s->q, s->k, kOffset); };
           }},
          {"operator_call",
           [](const std::shared_ptr<Step>& s) -> Call {
             return [s]() {
               posenc::ops::apply_rotary_qk_(s->q, s->k, s->rope->cos, s->rope->sin, kOffset);
             };
           }},
          {"kernel",
           [](const std::shared_ptr<Step>& s) -> Call {
             // the operator's kernel alone: the CPU row loop over the token's 32 query heads and
             // 8 key heads by the cos/sin row of position 4000 (what run_rotary_qk runs for one
             // token, without the dispatch, the checks and at::parallel_for)
             return [s]() {
               const int64_t half = kHeadDim / 2;
               const float* cos = s->rope->cos.data_ptr<float>() + kOffset * half;
               const float* sin = s->rope->sin.data_ptr<float>() + kOffset * half;
               float* q = s->q.data_ptr<float>();
               float* k = s->k.data_ptr<float>();
               posenc::ops::cpu::rotate_rows(q, q, kHeadDim, kHeadDim, 32, cos, sin, 0, half,
                                             false, false);
               posenc::ops::cpu::rotate_rows(k, k, kHeadDim, kHeadDim, 8, cos, sin, 0, half,
                                             false, false);
               benchmark::ClobberMemory();
             };
           }},
          {"check_arguments",
           [](const std::shared_ptr<Step>& s) -> Call {
             return [s]() {
               const posenc::detail::CallerScope caller(kOp);
               benchmark::DoNotOptimize(posenc::ops::prepare_rotary_qk_call(
                   s->q, s->k, s->rope->cos, s->rope->sin, kOffset, c10::nullopt, false,
                   c10::nullopt, 1.0));
             };
           }},
          {"check_overlap",
           [](const std::shared_ptr<Step>& s) -> Call {
             return [s]() {
               const posenc::detail::CallerScope caller(kOp);
               const torch::Tensor& cos = s->rope->cos;
               const torch::Tensor& sin = s->rope->sin;
               posenc::ops::check_no_overlap(s->q, "q", {{"k", s->k}, {"cos", cos}, {"sin", sin}});
               posenc::ops::check_no_overlap(s->k, "k", {{"cos", cos}, {"sin", sin}});
               at::assert_no_internal_overlap(s->q);
               at::assert_no_internal_overlap(s->k);
             };
           }},
          {"check_range",
           [](const std::shared_ptr<Step>& s) -> Call {
             return [s]() {
               const posenc::detail::CallerScope caller(kOp);
               posenc::detail::check_offset(kOffset, 1, s->rope->cos.size(0));
               benchmark::ClobberMemory();
             };
           }},
          {"check_frequencies",
           [](const std::shared_ptr<Step>& s) -> Call {
             const torch::Tensor inv_freq = s->rope->inv_freq(8192);
             return [s, inv_freq]() {
               const posenc::detail::CallerScope caller(kOp);
               benchmark::DoNotOptimize(
                   posenc::ops::given_frequencies(inv_freq, s->rope->cos, 1.0));
             };
           }},
          {"check_scale",
           [](const std::shared_ptr<Step>&) -> Call {
             return []() {
               const posenc::detail::CallerScope caller("posenc::add_position_table_");
               posenc::detail::check_scale(1.0, torch::kFloat);
               benchmark::ClobberMemory();
             };
           }},
      };
  for (const auto& c : cases) {
    const std::string name = "decode_checks/" + c.first + "/1x1x32q8kx128/float32/threads:1";
    const auto make = c.second;
    benchmark::RegisterBenchmark(name.c_str(),
                                 [=](benchmark::State& state) {
                                   at::set_num_threads(1);
                                   torch::NoGradGuard no_grad;
                                   torch::manual_seed(0);
                                   const Call call = make(std::make_shared<Step>());
                                   for (auto _ : state) {
                                     call();
                                   }
                                 })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

// --- attention biases ---------------------------------------------------------------------------

void register_attention_bias() {
  using Call = std::function<void()>;
  constexpr int64_t kHeads = 32;
  constexpr int64_t kLength = 2048;
  constexpr int64_t kT5Heads = 8;
  constexpr int64_t kT5Length = 512;
  const std::string alibi_shape = "32x2048x2048";
  const std::string t5_shape = "1x8x512x512";
  const std::string shift_shape = "8x4x512x1023";
  const std::vector<std::tuple<std::string, std::string, std::function<Call()>>> cases = {
      {"alibi_full_posenc", alibi_shape,
       [=]() -> Call {
         const auto slopes = posenc::ops::alibi_slopes(kHeads);
         return [=]() {
           benchmark::DoNotOptimize(posenc::ops::alibi_bias(slopes, kLength, kLength));
         };
       }},
      // -slope * |j - i| from broadcast aranges, as attention code writes it
      {"alibi_full_eager", alibi_shape,
       [=]() -> Call {
         const auto slopes = posenc::ops::alibi_slopes(kHeads);
         return [=]() {
           const auto position = torch::arange(kLength);
           const auto distance = (position.view({1, -1}) - position.view({-1, 1})).abs();
           benchmark::DoNotOptimize(-(slopes.view({kHeads, 1, 1}) * distance));
         };
       }},
      {"t5_bias_posenc", t5_shape,
       [=]() -> Call {
         const auto weight = torch::randn({32, kT5Heads});
         return [=]() {
           benchmark::DoNotOptimize(
               posenc::ops::relative_position_bias(weight, kT5Length, kT5Length));
         };
       }},
      // T5's compute_bias: the bucket of every (query, key) pair, then the embedding lookup
      {"t5_bias_per_pair", t5_shape,
       [=]() -> Call {
         const auto weight = torch::randn({32, kT5Heads});
         return [=]() {
           const auto position = torch::arange(kT5Length);
           const auto relative = position.view({1, -1}) - position.view({-1, 1});
           const auto buckets = posenc::ops::relative_position_bucket(relative);
           benchmark::DoNotOptimize(
               torch::embedding(weight, buckets).permute({2, 0, 1}).unsqueeze(0));
         };
       }},
      // One decoding step: the row of the query at position 2047 over 2048 keys (ALiBi,
      // 32 heads) and over 512 keys at 511 (T5, 8 heads), every check on.
      {"alibi_decode_posenc", "32x1x2048",
       [=]() -> Call {
         const auto slopes = posenc::ops::alibi_slopes(kHeads);
         return [=]() {
           benchmark::DoNotOptimize(posenc::ops::alibi_bias(slopes, 1, kLength, kLength - 1));
         };
       }},
      {"t5_bias_decode_posenc", "1x8x1x512",
       [=]() -> Call {
         const auto weight = torch::randn({32, kT5Heads});
         return [=]() {
           benchmark::DoNotOptimize(
               posenc::ops::relative_position_bias(weight, 1, kT5Length, true, 128, kT5Length - 1));
         };
       }},
      {"rel_shift_posenc", shift_shape,
       [=]() -> Call {
         const auto scores = torch::randn({8, 4, 512, 1023});
         return [=]() { benchmark::DoNotOptimize(posenc::ops::rel_shift(scores)); };
       }},
      // Transformer-XL / ESPnet: pad a zero column, view as [.., P + 1, Lq], drop the first row
      {"rel_shift_zero_pad", shift_shape,
       [=]() -> Call {
         const auto scores = torch::randn({8, 4, 512, 1023});
         return [=]() {
           const auto padded =
               torch::cat({torch::zeros({8, 4, 512, 1}), scores}, -1).view({8, 4, 1024, 512});
           benchmark::DoNotOptimize(
               padded.narrow(2, 1, 1023).reshape({8, 4, 512, 1023}).narrow(-1, 0, 512).contiguous());
         };
       }},
  };
  for (const auto& c : cases) {
    for (const int threads : kThreads) {
      const std::string name = "attention_bias/" + std::get<0>(c) + "/" + std::get<1>(c) +
                               "/float32/threads:" + std::to_string(threads);
      const auto prepare = std::get<2>(c);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& state) {
                                     at::set_num_threads(threads);
                                     torch::NoGradGuard no_grad;
                                     torch::manual_seed(0);
                                     const Call call = prepare();
                                     for (auto _ : state) {
                                       call();
                                     }
                                   })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

} // namespace

int main(int argc, char** argv) {
  register_add();
  register_token();
  register_rope();
  register_rope_qk();
  register_rope_decode();
  register_decode_checks();
  register_attention_bias();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::AddCustomContext("libtorch", TORCH_VERSION);
  benchmark::AddCustomContext("posenc", POSENC_VERSION);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
