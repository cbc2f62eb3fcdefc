// Whatever comes in, posenc answers with a correct result or a c10::Error: concurrency, hostile
// checkpoints and TorchScript files, resource limits, and the encoding's numerical properties.

#include <posenc/export.h>
#include <posenc/io/state_dict.h>
#include <posenc/posenc.h>

#include "io/torch_save_reader.h"
#include "test_util.h"
#include "text_operators.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace F = posenc::functional;

namespace {

std::string temp_path(const std::string& stem) {
  return testing::TempDir() + stem + "_" + std::to_string(::getpid()) + ".pt";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Caps the process's address space at its current size plus `extra` bytes while it lives. A
// hostile file may declare a tensor of any size, and LibTorch's readers allocate what the file
// says (a flipped byte of a TorchScript file once asked Debian's LibTorch 1.13 for 24 GiB): under
// the cap such a file raises "can't allocate memory" instead of exhausting the machine. Relative to
// the current size, so that sanitizers' reserved shadow memory stays usable.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(size_t extra) {
    if (getrlimit(RLIMIT_AS, &saved_) != 0) {
      return;
    }
    size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages; // the first field: total program size, in pages
    const rlim_t wanted =
        static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + extra;
    if (pages > 0 && (saved_.rlim_cur == RLIM_INFINITY || wanted < saved_.rlim_cur)) {
      rlimit cap = saved_;
      cap.rlim_cur = wanted;
      active_ = setrlimit(RLIMIT_AS, &cap) == 0;
    }
  }
  ~AddressSpaceCap() {
    if (active_) {
      setrlimit(RLIMIT_AS, &saved_);
    }
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit saved_{};
  bool active_ = false;
};

// Runs `load` on every prefix (truncation) of `bytes` at `cuts` points and on `flips` copies with
// random bytes changed; each must succeed or throw, and `check(failed)` must hold afterwards.
// Readers that posenc owns must throw c10::Error; LibTorch's own readers (torch::load,
// torch::jit::load) throw other std::exception types too (torch::jit::ErrorReport from its
// TorchScript parser), so for them `any_exception` accepts any std::exception. Anything else (a
// crash, a non-standard throw) fails the test.
template <typename Load, typename Check>
void survive_hostile_copies(const std::string& bytes,
                            const std::string& path,
                            Load load,
                            Check check,
                            int cuts = 40,
                            int flips = 60,
                            bool any_exception = false) {
  std::mt19937 rng(1234);
  std::vector<std::string> copies;
  for (int i = 0; i < cuts; ++i) {
    copies.push_back(
        bytes.substr(0, bytes.size() * static_cast<size_t>(i) / static_cast<size_t>(cuts)));
  }
  for (int i = 0; i < flips; ++i) {
    std::string copy = bytes;
    for (int k = 0; k < 1 + i % 4; ++k) {
      copy[rng() % copy.size()] = static_cast<char>(rng());
    }
    copies.push_back(copy);
  }
  int failures = 0;
  const AddressSpaceCap cap(size_t{4} << 30);
  for (const auto& copy : copies) {
    write_bytes(path, copy);
    bool failed = true;
    try {
      load(path);
      failed = false;
    } catch (const c10::Error&) {
    } catch (const std::exception& e) {
      EXPECT_TRUE(any_exception) << "not a c10::Error: " << e.what();
    }
    failures += failed;
    check(failed);
  }
  std::remove(path.c_str());
  EXPECT_GE(failures, cuts); // every truncated copy fails, at least
}

} // namespace

// --- concurrency ---------------------------------------------------------------------------------

TEST(Reliability, ConcurrentForwardCallsOnOneModuleAgree) {
  torch::manual_seed(0);
  posenc::PositionalEncoding pe(posenc::PositionalEncodingOptions(16, 64).dropout(0.5));
  posenc::RotaryEmbedding rope(8, 64);
  posenc::LearnedPositionalEmbedding learned(16, 64);
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(30, 16, 64).padding_idx(0));
  pe->eval();
  learned->eval();
  embed->eval();
  const auto x = torch::randn({2, 12, 16});
  const auto q = torch::randn({2, 12, 2, 8});
  const auto ids = torch::randint(0, 30, {2, 12}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto expected_pe = pe(x, 5);
  const auto expected_rope = rope(q, 5);
  const auto expected_learned = learned->forward_positions(x, torch::arange(12).flip(0));
  const auto expected_embed = embed(ids, 3);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      torch::NoGradGuard guard;
      for (int i = 0; i < 200; ++i) {
        mismatches += !torch::equal(pe(x, 5), expected_pe);
        mismatches += !torch::equal(rope(q, 5), expected_rope);
        mismatches += !torch::equal(learned->forward_positions(x, torch::arange(12).flip(0)),
                                    expected_learned);
        mismatches += !torch::equal(embed(ids, 3), expected_embed);
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(mismatches.load(), 0);
}

// --- threads with distinct options ---------------------------------------------------------------
//
// Eight threads started together, each with options of its own, call the modules, the operators
// through the dispatcher (check_module_options, rotary_embedding_frequencies,
// rotary_embedding_call, rope_frequencies) and make mistakes of their own: every result must equal
// the one computed on one thread before, and every message too, so that a message naming another
// thread's module or value (the CallerScope is the thread's own) fails. These run under
// ThreadSanitizer in scripts/sanitize.sh, which reports any data race between them.

namespace {

constexpr int kThreads = 8;

// Runs body(t) on `kThreads` threads that start together (each waits until all have started), and
// joins them. body must not throw (failures are collected, not asserted, on the threads).
template <typename Body>
void run_together(Body body) {
  std::atomic<int> waiting{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      --waiting;
      while (waiting.load() > 0) {
        std::this_thread::yield();
      }
      body(t);
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
}

// The failures of each thread, reported after the threads have joined.
class ThreadFailures {
 public:
  ThreadFailures() : failures_(kThreads) {}
  void add(int thread, const std::string& what) {
    if (failures_[thread].size() < 5) { // (the first few tell the story)
      failures_[thread].push_back(what);
    }
    ++count_[thread];
  }
  void expect_none() const {
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(count_[t], 0) << "thread " << t << ": "
                              << (failures_[t].empty() ? "" : failures_[t].front());
      for (size_t i = 1; i < failures_[t].size(); ++i) {
        ADD_FAILURE() << "thread " << t << ": " << failures_[t][i];
      }
    }
  }

 private:
  std::vector<std::vector<std::string>> failures_;
  int count_[kThreads] = {};
};

// The outcome of a call on a tensor: the tensor, or the message of its c10::Error.
struct Outcome {
  torch::Tensor value;
  std::string message = "<no error>";
};

template <typename Call>
Outcome outcome(Call&& call) {
  Outcome result;
  try {
    result.value = call();
  } catch (const c10::Error& error) {
    result.message = error.what_without_backtrace();
  }
  return result;
}

// "" where `got` is `expected` (the same message, or a bit-identical tensor), else what differs.
std::string compare(const Outcome& got, const Outcome& expected, const std::string& what) {
  if (got.message != expected.message) {
    return what + ": message '" + got.message + "', expected '" + expected.message + "'";
  }
  if (got.value.defined() != expected.value.defined() ||
      (got.value.defined() && (got.value.sizes() != expected.value.sizes() ||
                               got.value.scalar_type() != expected.value.scalar_type() ||
                               !torch::equal(got.value, expected.value)))) {
    return what + ": a result other than the one computed on one thread";
  }
  return "";
}

using posenc_test::check_module_options_op;
using posenc_test::rope_frequencies_op;
using posenc_test::rotary_call_op;
using posenc_test::rotary_frequencies_op;
using posenc_test::RotaryFrequencies;

// The three frequency tensors of rotary_embedding_frequencies(text) side by side (inv_freq, the
// long ones, the attention factor), as one tensor to compare.
Outcome rotary_frequencies(const std::string& text) {
  return outcome([&] {
    const RotaryFrequencies f = rotary_frequencies_op().call(text);
    return torch::cat({std::get<0>(f), std::get<1>(f), std::get<2>(f).reshape({1})});
  });
}

Outcome module_options(const std::string& module, const std::string& text) {
  return outcome([&] {
    check_module_options_op().call(module, text);
    return torch::Tensor();
  });
}

// A RotaryEmbedding with a rope type of its own for thread t (head_dim 8, max_len 64), as C++
// options and as the options text posenc.nn sends.
struct ThreadRotary {
  posenc::RotaryEmbeddingOptions options{8, 64};
  std::string text;
};

ThreadRotary thread_rotary(int t) {
  using posenc::RopeScalingOptions;
  using posenc::RopeType;
  ThreadRotary rotary;
  const double base = 10000.0 + 1000.0 * t;
  rotary.options.base(base);
  std::string rope = R"({"rope_type": "default"})";
  switch (t) {
    case 1:
      rotary.options.scaling(RopeScalingOptions(RopeType::kLinear).factor(2.0));
      rope = R"({"rope_type": "linear", "factor": 2.0})";
      break;
    case 2: // the frequencies of calls past 16 positions are the call's own
      rotary.options.scaling(
          RopeScalingOptions(RopeType::kDynamic).factor(2.0).max_position_embeddings(16));
      rope = R"({"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16})";
      break;
    case 3:
      rotary.options.scaling(RopeScalingOptions(RopeType::kYarn)
                                 .factor(4.0)
                                 .original_max_position_embeddings(16)
                                 .max_position_embeddings(64));
      rope = R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, )"
             R"("max_position_embeddings": 64})";
      break;
    case 4: // long factors past 16 positions
      rotary.options.scaling(RopeScalingOptions(RopeType::kLongRope)
                                 .original_max_position_embeddings(16)
                                 .max_position_embeddings(64)
                                 .short_factor({1.0, 1.5, 2.0, 2.5})
                                 .long_factor({2.0, 3.0, 4.0, 5.0}));
      rope = R"({"rope_type": "longrope", "original_max_position_embeddings": 16, )"
             R"("max_position_embeddings": 64, "short_factor": [1.0, 1.5, 2.0, 2.5], )"
             R"("long_factor": [2.0, 3.0, 4.0, 5.0]})";
      break;
    case 5:
      rotary.options.scaling(RopeScalingOptions(RopeType::kLlama3)
                                 .factor(8.0)
                                 .low_freq_factor(1.0)
                                 .high_freq_factor(4.0)
                                 .original_max_position_embeddings(16));
      rope = R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, )"
             R"("high_freq_factor": 4.0, "original_max_position_embeddings": 16})";
      break;
    case 6: // partial rotary
      rotary.options.rotary_dim(4);
      break;
    case 7:
      rotary.options.pairing(posenc::RotaryPairing::kInterleaved).inverse(true);
      break;
    default:
      break;
  }
  std::ostringstream text;
  text << R"({"head_dim": 8, "max_len": 64, "base": )" << base;
  if (t == 6) {
    text << R"(, "rotary_dim": 4)";
  }
  if (t == 7) {
    text << R"(, "pairing": "interleaved", "inverse": true)";
  }
  text << R"(, "rope_parameters": )" << rope << "}";
  rotary.text = text.str();
  return rotary;
}

// An invalid option text of another module for each of eight, naming thread t's value.
std::pair<std::string, std::string> invalid_module_options(int module, int t) {
  const std::string v = std::to_string(t + 1);
  switch (module) {
    case 0:
      return {"PositionalEncoding", R"({"d_model": 8, "max_len": 16, "dropout": 1.)" + v + "}"};
    case 1:
      return {"LearnedPositionalEmbedding",
              R"({"d_model": 8, "max_len": 16, "init_std": -)" + v + "}"};
    case 2:
      return {"TokenAndPositionEmbedding",
              R"({"vocab_size": 10, "d_model": 4, "max_len": 8, "padding_idx": 1)" + v + "}"};
    case 3:
      return {"Timesteps", R"({"embedding_dim": 8, "scale": "inf", "max_period": )" + v + "}"};
    case 4:
      return {"ALiBi", R"({"num_heads": 4, "max_bias": 6)" + v + "4.5}"};
    case 5:
      return {"AttentionTemperature", R"({"floor_scale": -)" + v + "}"};
    case 6:
      return {"RelativePositionBias", R"({"num_heads": -)" + v + "}"};
    default:
      return {"VisionRotaryEmbedding", R"({"dim": 8, "num_prefix_tokens": -)" + v + "}"};
  }
}

// A valid option text of each of eight modules, with thread t's values.
std::pair<std::string, std::string> valid_module_options(int module, int t) {
  const std::string v = std::to_string(t + 1);
  switch (module) {
    case 0:
      return {"PositionalEncoding", R"({"d_model": )" + std::to_string(2 * t + 2) +
                                        R"(, "max_len": 16, "layout": "concatenated"})"};
    case 1:
      return {"LearnedPositionalEmbedding", R"({"d_model": 8, "max_len": )" + v + "}"};
    case 2:
      return {"TokenAndPositionEmbedding",
              R"({"vocab_size": 10, "d_model": 4, "max_len": 8, "padding_idx": )" +
                  std::to_string(t) + "}"};
    case 3:
      return {"Timesteps", R"({"embedding_dim": )" + std::to_string(2 * t + 4) + "}"};
    case 4:
      return {"ALiBi", R"({"num_heads": )" + v + "}"};
    case 5:
      return {"AttentionTemperature", R"({"floor_scale": )" + v + R"(, "form": "ministral3"})"};
    case 6:
      return {"RelativePositionBias", R"({"num_heads": )" + v + "}"};
    default:
      return {"VisionRotaryEmbedding", R"({"dim": )" + std::to_string(4 * t + 4) + "}"};
  }
}

} // namespace

// The modules (PositionalEncoding, a RotaryEmbedding of another rope type per thread, ALiBi,
// AttentionTemperature) and the operators, each thread with its own options, and each making
// mistakes of its own: the same results and messages as on one thread.
TEST(Reliability, ThreadsWithDistinctOptionsAgreeWithOneThread) {
  torch::manual_seed(0);
  struct Work {
    std::vector<std::function<Outcome()>> calls; // (each also run on one thread first)
    std::vector<std::string> names;
    std::vector<Outcome> expected;
  };
  std::vector<posenc::PositionalEncoding> encodings;
  std::vector<posenc::RotaryEmbedding> rotaries;
  std::vector<posenc::ALiBi> alibis;
  std::vector<posenc::AttentionTemperature> temperatures;
  std::vector<ThreadRotary> texts;
  for (int t = 0; t < kThreads; ++t) {
    encodings.emplace_back(posenc::PositionalEncodingOptions(8 + 2 * t, 64)
                               .layout(t % 2 == 0 ? posenc::ChannelLayout::kInterleaved
                                                  : posenc::ChannelLayout::kConcatenated)
                               .beyond_max_len(posenc::BeyondMaxLen::kError));
    encodings.back()->eval();
    texts.push_back(thread_rotary(t));
    rotaries.emplace_back(texts.back().options);
    alibis.emplace_back(posenc::ALiBiOptions(2 + t).max_bias(4.0 + t));
    temperatures.emplace_back(
        posenc::AttentionTemperatureOptions().floor_scale(4.0 + t).attn_scale(0.1 + 0.01 * t));
  }
  std::vector<Work> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    Work& w = work[t];
    const auto add = [&](const std::string& name, std::function<Outcome()> call) {
      w.names.push_back(name);
      w.calls.push_back(std::move(call));
    };
    const auto x = torch::randn({2, 12, 8 + 2 * t});
    const auto wrong = torch::randn({2, 12, 9 + 2 * t});
    const auto q = torch::randn({1, 24, 2, 8});
    const auto query = torch::randn({1, 6, 2, 4});
    const auto wrong_heads = torch::randn({1, 4, 2, 10 + 2 * (t % 3)});
    auto pe = encodings[t];
    auto rope = rotaries[t];
    auto alibi = alibis[t];
    auto temperature = temperatures[t];
    const std::string text = texts[t].text;
    add("PositionalEncoding", [=]() mutable { return outcome([&] { return pe(x, t); }); });
    add("PositionalEncoding, wrong width",
        [=]() mutable { return outcome([&] { return pe(wrong); }); });
    add("PositionalEncoding, past max_len",
        [=]() mutable { return outcome([&] { return pe(x, 60 + t); }); });
    // 24 positions from offset t: past the dynamic / longrope switch at 16
    add("RotaryEmbedding", [=]() mutable { return outcome([&] { return rope(q, t); }); });
    add("RotaryEmbedding, past max_len",
        [=]() mutable { return outcome([&] { return rope(q, 50 + t); }); });
    add("RotaryEmbedding, wrong width",
        [=]() mutable { return outcome([&] { return rope(wrong_heads); }); });
    add("ALiBi", [=]() mutable { return outcome([&] { return alibi(5, 7 + t); }); });
    add("ALiBi, negative length",
        [=]() mutable { return outcome([&] { return alibi(-1 - t, 3); }); });
    add("AttentionTemperature",
        [=]() mutable { return outcome([&] { return temperature(query, 100 * t); }); });
    add("AttentionTemperature, negative offset",
        [=]() mutable { return outcome([&] { return temperature(query, -1 - t); }); });
    // the operators: RotaryEmbedding's text (rope type t), its frequencies and its call with the
    // module's caches, valid and invalid texts of eight modules, rope_frequencies
    add("rotary_embedding_frequencies", [=]() mutable { return rotary_frequencies(text); });
    add("rotary_embedding_call", [=]() mutable {
      return outcome([&] {
        const RotaryFrequencies f = rotary_frequencies_op().call(text);
        const c10::optional<at::Tensor> long_inv_freq =
            std::get<1>(f).numel() > 0 ? c10::optional<at::Tensor>(std::get<1>(f)) : c10::nullopt;
        return rotary_call_op().call(q, rope->cos, rope->sin, std::get<0>(f), long_inv_freq, text,
                                     t, c10::nullopt);
      });
    });
    add("rotary_embedding_frequencies, invalid", [=]() mutable {
      return rotary_frequencies(R"({"head_dim": 8, "max_len": 64, "rotary_dim": )" +
                                std::to_string(10 + 2 * t) + "}");
    });
    for (int m = 0; m < 8; ++m) {
      const auto valid = valid_module_options(m, t);
      const auto invalid = invalid_module_options(m, t);
      add("check_module_options " + valid.second,
          [=]() mutable { return module_options(valid.first, valid.second); });
      add("check_module_options " + invalid.second,
          [=]() mutable { return module_options(invalid.first, invalid.second); });
    }
    const std::string rope_parameters = R"({"rope_type": "yarn", "factor": )" +
                                        std::to_string(2 + t) +
                                        R"(, "original_max_position_embeddings": 16, )"
                                        R"("max_position_embeddings": 64})";
    add("rope_frequencies", [=]() mutable {
      return outcome([&] {
        return std::get<0>(rope_frequencies_op().call(8, 10000.0, rope_parameters, c10::nullopt,
                                                      c10::nullopt, c10::nullopt, c10::nullopt,
                                                      c10::nullopt));
      });
    });
    add("rope_frequencies, invalid", [=]() mutable {
      return outcome([&] {
        return std::get<0>(rope_frequencies_op().call(
            8, 10000.0, R"({"rope_type": "yarn", "factor": -)" + std::to_string(t + 1) + "}",
            c10::nullopt, c10::nullopt, c10::nullopt, c10::nullopt, c10::nullopt));
      });
    });
    torch::NoGradGuard no_grad;
    for (const auto& call : w.calls) {
      w.expected.push_back(call());
    }
  }
  // What one thread computed: results where the options are valid, and messages that name the
  // module (or operator) and the thread's own value where they are not.
  for (int t = 0; t < kThreads; ++t) {
    const Work& w = work[t];
    ASSERT_EQ(w.expected.size(), 31u);
    EXPECT_EQ(w.expected[0].message, "<no error>");
    EXPECT_EQ(w.expected[1].message.rfind("PositionalEncoding: ", 0), 0u) << w.expected[1].message;
    EXPECT_EQ(w.expected[2].message.rfind("PositionalEncoding: ", 0), 0u) << w.expected[2].message;
    EXPECT_EQ(w.expected[3].message, "<no error>");
    EXPECT_EQ(w.expected[4].message.rfind("RotaryEmbedding: ", 0), 0u) << w.expected[4].message;
    EXPECT_EQ(w.expected[5].message.rfind("RotaryEmbedding: ", 0), 0u) << w.expected[5].message;
    EXPECT_EQ(w.expected[6].message, "<no error>");
    EXPECT_EQ(w.expected[7].message.rfind("ALiBi: ", 0), 0u) << w.expected[7].message;
    EXPECT_EQ(w.expected[8].message, "<no error>");
    EXPECT_EQ(w.expected[9].message.rfind("AttentionTemperature: ", 0), 0u)
        << w.expected[9].message;
    EXPECT_EQ(w.expected[10].message, "<no error>");
    EXPECT_EQ(w.expected[11].message, "<no error>");
    // the module's own call rotates as the operator does
    EXPECT_TRUE(torch::equal(w.expected[11].value, w.expected[3].value)) << "thread " << t;
    EXPECT_EQ(w.expected[12].message.rfind("RotaryEmbedding: ", 0), 0u) << w.expected[12].message;
    EXPECT_NE(w.expected[12].message.find(std::to_string(10 + 2 * t)), std::string::npos)
        << w.expected[12].message;
    for (int m = 0; m < 8; ++m) {
      const Outcome& valid = w.expected[13 + 2 * m];
      const Outcome& invalid = w.expected[14 + 2 * m];
      const std::string module = invalid_module_options(m, t).first;
      EXPECT_EQ(valid.message, "<no error>") << w.names[13 + 2 * m];
      EXPECT_EQ(invalid.message.rfind(module + ": ", 0), 0u) << invalid.message;
    }
    EXPECT_EQ(w.expected[29].message, "<no error>");
    EXPECT_NE(w.expected[30].message.find("posenc::rope_frequencies"), std::string::npos)
        << w.expected[30].message;
  }
  // Eight threads, each going through its calls in an order of its own (at any moment they are in
  // different modules and operators), several times.
  ThreadFailures failures;
  run_together([&](int t) {
    torch::NoGradGuard no_grad;
    const Work& w = work[t];
    const size_t n = w.calls.size();
    for (int round = 0; round < 6; ++round) {
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (k * (2 * t + 1) + static_cast<size_t>(round + t)) % n;
        try {
          const std::string differs = compare(w.calls[i](), w.expected[i], w.names[i]);
          if (!differs.empty()) {
            failures.add(t, differs);
          }
        } catch (const std::exception& error) {
          failures.add(t, w.names[i] + ": " + error.what());
        }
      }
    }
  });
  failures.expect_none();
}

// More distinct RotaryEmbedding option texts than the operators' cache keeps (256), valid and
// invalid, read by eight threads at once, each text by several of them: the cache is emptied while
// threads read and insert, and every result and message is still the one of one thread.
TEST(Reliability, ThreadsRaceThroughTheOptionTextCache) {
  constexpr int kTextsPerThread = 40; // 320 texts in all
  std::vector<std::string> texts;
  for (int i = 0; i < kThreads * kTextsPerThread; ++i) {
    std::ostringstream text;
    const int head_dim = 4 + 2 * (i % 5);
    text << R"({"head_dim": )" << head_dim << R"(, "max_len": )" << 16 + i;
    if (i % 4 == 3) { // invalid: a base of its own below 1
      text << R"(, "base": -)" << i;
    } else {
      text << R"(, "base": )" << 10000 + 7 * i;
    }
    if (i % 3 == 1) {
      text << R"(, "rope_parameters": {"rope_type": "linear", "factor": )" << 1 + i % 7 << "}";
    } else if (i % 3 == 2) {
      text << R"(, "rope_parameters": {"rope_type": "yarn", "factor": )" << 2 + i % 5
           << R"(, "original_max_position_embeddings": 8})";
    }
    text << "}";
    texts.push_back(text.str());
  }
  std::vector<Outcome> expected;
  for (const std::string& text : texts) {
    expected.push_back(rotary_frequencies(text));
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i % 4 == 3) {
      EXPECT_EQ(expected[i].message.rfind("RotaryEmbedding: base must be", 0), 0u)
          << expected[i].message;
      EXPECT_NE(expected[i].message.find("-" + std::to_string(i)), std::string::npos)
          << expected[i].message;
    } else {
      EXPECT_EQ(expected[i].message, "<no error>") << texts[i];
    }
  }
  // The module options of other modules at the same time, through the same reader.
  ThreadFailures failures;
  run_together([&](int t) {
    const size_t n = texts.size();
    for (int round = 0; round < 2; ++round) {
      for (size_t k = 0; k < n / 2; ++k) {
        // each thread reads 160 texts from a place and in strides of its own: threads read a
        // text at different times, one for the first time while another finds it kept
        const size_t i = (static_cast<size_t>(t) * n / kThreads + k * (2 * t + 1) + round) % n;
        try {
          const std::string differs = compare(rotary_frequencies(texts[i]), expected[i], texts[i]);
          if (!differs.empty()) {
            failures.add(t, differs);
          }
          if (k % 16 == 0) {
            const auto invalid = invalid_module_options(static_cast<int>(k / 16) % 8, t);
            const Outcome checked = module_options(invalid.first, invalid.second);
            if (checked.message.rfind(invalid.first + ": ", 0) != 0) {
              failures.add(t, invalid.second + ": " + checked.message);
            }
          }
        } catch (const std::exception& error) {
          failures.add(t, texts[i] + ": " + error.what());
        }
      }
    }
  });
  failures.expect_none();
}

// --- hostile files
// ---------------------------------------------------------------------------------

TEST(Reliability, HostileModuleCheckpointsLeaveModuleUnchanged) {
  // Saved to a stream, so that the damaged copies are the same every run (see
  // HostileTorchScriptFilesGiveErrors).
  std::ostringstream saved;
  torch::save(posenc::PositionalEncoding(8, 16), saved);
  const std::string bytes = saved.str();
  posenc::PositionalEncoding pe(8, 16);
  torch::Tensor before;
  // LibTorch does not verify the archive's checksums, so a changed byte inside the table's data
  // can load: the file then says other values. Whatever it says, posenc's checks hold (shape,
  // finite values, the registered buffer); and a load that fails changes nothing.
  survive_hostile_copies(
      bytes,
      temp_path("module_hostile"),
      [&](const std::string& path) {
        before = pe->pe.clone();
        torch::load(pe, path);
      },
      [&](bool failed) {
        EXPECT_EQ(pe->pe.sizes(), (std::vector<int64_t>{1, 16, 8}));
        EXPECT_TRUE(pe->pe.isfinite().all().item<bool>());
        EXPECT_TRUE(pe->pe.is_same(pe->named_buffers()["pe"]));
        if (failed) {
          EXPECT_TRUE(torch::equal(pe->pe, before));
        }
      },
      40,
      60,
      /*any_exception=*/true);
}

TEST(Reliability, WrongShapeAndDtypeCheckpoints) {
  posenc::RotaryEmbedding rope(8, 16);
  const auto cos = rope->cos.clone();
  const std::string path = temp_path("rope_other");
  torch::save(posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(8, 16).rotary_dim(4)), path);
  EXPECT_POSENC_ERROR(
      torch::load(rope, path),
      "RotaryEmbedding: the checkpoint's cos has shape [16, 2], but this module's is [16, 4]");
  EXPECT_TRUE(torch::equal(rope->cos, cos));
  posenc::PositionalEncoding integer_table(4, 4);
  integer_table->pe.set_data(torch::zeros({1, 4, 4}, torch::kInt));
  torch::save(integer_table, path);
  posenc::PositionalEncoding pe(4, 4);
  EXPECT_POSENC_ERROR(
      torch::load(pe, path),
      "the checkpoint's pe dtype must be float16, bfloat16, float32 or float64, but got Int");
  std::remove(path.c_str());
}

TEST(Reliability, HostileStateDictsGiveErrorsNotCrashes) {
  const std::string source = temp_path("state_source");
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("pe", F::sinusoidal_table(16, 8).unsqueeze(0));
  dict.insert("other", torch::randn({3, 5}));
  const std::vector<char> pickled = torch::pickle_save(c10::IValue(dict));
  const std::string bytes(pickled.begin(), pickled.end());
  posenc::PositionalEncoding pe(8, 16);
  torch::Tensor before;
  survive_hostile_copies(
      bytes,
      temp_path("state_hostile"),
      [&](const std::string& path) {
        before = pe->pe.clone();
        posenc::load_state_dict(*pe, path, posenc::LoadStateDictOptions().strict(false));
      },
      [&](bool failed) {
        EXPECT_EQ(pe->pe.sizes(), (std::vector<int64_t>{1, 16, 8}));
        EXPECT_TRUE(pe->pe.isfinite().all().item<bool>());
        if (failed) {
          EXPECT_TRUE(torch::equal(pe->pe, before));
        }
      });
}

TEST(Reliability, ReaderRejectsMalformedPickles) {
  // A zip with a data.pkl whose pickle is nonsense in a few ways. The last two are a list and a
  // dict that contain themselves (found by the fuzzer: the reader leaked such cycles; the
  // sanitizer build's leak checker fails this test if it does again).
  for (const std::string& pickle : {std::string("\x80\x02}q\x00(X\x02\x00\x00\x00peq\x01", 15),
                                    std::string("\x80\x02.", 3),
                                    std::string("\x80\x02h\x05.", 5),
                                    std::string("\x80\x02(((((((u.", 11),
                                    std::string("\x80\x02X\xff\xff\xff\x7f", 7),
                                    std::string("\x80\x02]q\x00h\x00a.", 9),
                                    std::string("\x80\x02}q\x00X\x01\x00\x00\x00kh\x00s.", 15)}) {
    std::ostringstream buffer;
    {
      caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
        buffer.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
        return size;
      });
      writer.writeRecord("data.pkl", pickle.data(), pickle.size());
      writer.writeEndOfFile();
    }
    std::istringstream in(buffer.str());
    EXPECT_THROW(posenc::detail::read_torch_save_state_dict(in, "malformed"), c10::Error)
        << pickle.size();
  }
}

TEST(Reliability, HostileTorchScriptFilesGiveErrors) {
  // Saved to a stream, not a file: a file's archive is named after the file (here the process id),
  // which would shift every byte, and with them which bytes the seeded damage hits, from run to
  // run. The same copies each run (Debian's LibTorch 1.13 crashes inside torch::jit::load on some
  // damaged archives, whatever the module).
  std::ostringstream saved;
  posenc::to_torchscript(posenc::PositionalEncoding(8, 16)).save(saved);
  const std::string bytes = saved.str();
  int loaded = 0;
  survive_hostile_copies(
      bytes,
      temp_path("ts_hostile"),
      [&](const std::string& path) {
        auto module = torch::jit::load(path);
        // A file that still loads must still compute sensibly or raise.
        const auto y = module.forward({torch::zeros({1, 4, 8})}).toTensor();
        EXPECT_EQ(y.sizes(), (std::vector<int64_t>{1, 4, 8}));
        ++loaded;
      },
      [](bool) {},
      30,
      30,
      /*any_exception=*/true);
  EXPECT_LT(loaded, 60);
}

// --- resource limits
// --------------------------------------------------------------------------------

TEST(Reliability, AbsurdSizesAreRejectedBeforeAllocating) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_POSENC_ERROR(posenc::PositionalEncoding(big, big),
                      "is over posenc's limit of 2^28 elements");
  EXPECT_POSENC_ERROR(posenc::LearnedPositionalEmbedding(4096, big),
                      "is over posenc's limit of 2^28 elements");
  EXPECT_POSENC_ERROR(posenc::RotaryEmbedding(128, big), "is over posenc's limit of 2^28 elements");
  EXPECT_POSENC_ERROR(posenc::TokenAndPositionEmbedding(big, 1024, 16),
                      "TokenAndPositionEmbedding: a token table of vocab_size * d_model");
  EXPECT_POSENC_ERROR(
      F::sinusoidal_table(std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max()),
      "is over posenc's limit");
  EXPECT_POSENC_ERROR(
      posenc::ops::sinusoidal_table(16, 8, 10000.0, std::numeric_limits<int64_t>::max()),
      "offset + max_len must fit in int64");
}

// Sizes near 2^62-2^63 are refused with a message that names the argument, before any
// arithmetic on them could wrap around int64 (they used to give a wrong result, "vector::reserve",
// std::bad_alloc or PyTorch's symbolic-size messages).
TEST(Reliability, SizesThatWouldOverflowAreRefusedByName) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  // M-RoPE sections that sum to rotary_dim / 2 only by wrapping around
  EXPECT_POSENC_ERROR(posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(8, 16).mrope_section(
                          {max, max, 6})),
                      "mrope_section must hold three non-negative numbers of frequencies");
  EXPECT_POSENC_ERROR(
      posenc::ops::multimodal_rotary_tables(torch::zeros({4, 4}), torch::zeros({4, 4}),
                                            torch::zeros({3, 1, 2}, torch::kLong), {max, max, 6}),
      "mrope_section must hold three non-negative numbers of frequencies");
  EXPECT_POSENC_ERROR(posenc::ops::alibi_slopes(int64_t{1} << 62),
                      "num_heads must be in [1, 2^28] (posenc's limit of heads), but got "
                      "4611686018427387904");
  EXPECT_POSENC_ERROR(posenc::RelativePositionBias(
                          posenc::RelativePositionBiasOptions(int64_t{1} << 31).num_buckets(32)),
                      "a bias table of num_buckets * num_heads = 32 * 2147483648");
  EXPECT_POSENC_ERROR(posenc::RelativePositionBias(
                          posenc::RelativePositionBiasOptions(8).max_distance(int64_t{1} << 62)),
                      "max_distance must be <= 2^27");
  EXPECT_POSENC_ERROR(posenc::ops::context_parallel_positions(int64_t{1} << 62, 1, 0),
                      "positions, over posenc's limit of 2^28");
  EXPECT_POSENC_ERROR(posenc::ops::context_parallel_positions(max - 1, (int64_t{1} << 62) + 1, 0,
                                                              /*zigzag=*/true),
                      "world_size must be <= 2^28");
  EXPECT_POSENC_ERROR(posenc::ops::packed_positions(torch::tensor({int64_t{0}, int64_t{1} << 40}),
                                                    int64_t{1} << 40),
                      "total (the number of packed tokens) must be in [0, 2^28]");
  EXPECT_POSENC_ERROR(
      posenc::ops::alibi_bias(torch::ones({int64_t{1} << 20}), int64_t{1} << 30, int64_t{1} << 30),
      "the bias' heads * query_length * key_length = 1048576 * 1073741824 * 1073741824");
  EXPECT_POSENC_ERROR(posenc::ops::relative_position_bias(torch::zeros({32, 8}), max, max),
                      "num_heads * query_length * key_length");
  EXPECT_POSENC_ERROR(
      posenc::RotaryEmbedding(posenc::RotaryEmbeddingOptions(8, 16).scaling(
          posenc::RopeScalingOptions(posenc::RopeType::kLongRope)
              .original_max_position_embeddings(max)
              .short_factor({1, 1, 1, 1})
              .long_factor({2, 2, 2, 2}))),
      "original_max_position_embeddings must be <= 2^53");
  // a stride-0 view of cos/sin claiming 2^62 frequency pairs
  const torch::Tensor wide = torch::zeros({1, 1}).expand({1, int64_t{1} << 62});
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary(torch::zeros({1, 2, 1, 8}), wide, wide),
                      "[max_len, R/2] tables of the same shape (R/2 <= 2^28)");
}

// --- numerical properties
// ------------------------------------------------------------------------------

class Properties : public posenc_test::SeededTest {};

TEST_F(Properties, SineCosinePairsHaveUnitNorm) {
  for (const int64_t d : {2, 6, 64, 511}) {
    const auto positions = torch::randint(0, 1000000, {200}, torch::kLong);
    const auto rows = posenc::ops::add_positional_encoding(
        torch::zeros({1, 200, d}, torch::kDouble), 0, 10000.0, true, positions.unsqueeze(0))[0];
    const int64_t pairs = d / 2;
    const auto norms = rows.narrow(1, 0, 2 * pairs).reshape({200, pairs, 2}).pow(2).sum(-1);
    EXPECT_LT((norms - 1).abs().max().item<double>(), 1e-13) << d;
  }
}

TEST_F(Properties, DotProductDependsOnlyOnDistance) {
  const auto table =
      F::sinusoidal_table(3000, 128, F::SinusoidalTableFuncOptions().dtype(torch::kDouble));
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t k = torch::randint(0, 500, {1}).item<int64_t>();
    const int64_t p = torch::randint(0, 2400, {1}).item<int64_t>();
    const int64_t q = torch::randint(0, 2400, {1}).item<int64_t>();
    EXPECT_NEAR(table[p].dot(table[p + k]).item<double>(),
                table[q].dot(table[q + k]).item<double>(),
                1e-10);
  }
}

// PE(p + k) = R(k) PE(p), with R(k) a block-diagonal rotation that does not depend on p.
TEST_F(Properties, ShiftIsARotation) {
  const int64_t d = 16;
  const auto table =
      F::sinusoidal_table(5000, d, F::SinusoidalTableFuncOptions().dtype(torch::kDouble));
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t k = torch::randint(1, 1000, {1}).item<int64_t>();
    const int64_t p = torch::randint(0, 4000, {1}).item<int64_t>();
    auto rotated = torch::zeros({d}, torch::kDouble);
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = static_cast<double>(k) * std::pow(10000.0, -2.0 * i / d);
      const double s = table[p][2 * i].item<double>();
      const double c = table[p][2 * i + 1].item<double>();
      rotated[2 * i] = s * std::cos(angle) + c * std::sin(angle);     // sin(a + b)
      rotated[2 * i + 1] = c * std::cos(angle) - s * std::sin(angle); // cos(a + b)
    }
    EXPECT_LT((rotated - table[p + k]).abs().max().item<double>(), 1e-9);
  }
}

TEST_F(Properties, NanAndInfPropagate) {
  posenc::PositionalEncoding pe(8, 16);
  posenc::RotaryEmbedding rope(8, 16);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto dtype : {torch::kHalf, torch::kBFloat16, torch::kFloat, torch::kDouble}) {
    auto x = torch::randn({1, 4, 8}).to(dtype);
    x[0][1][2] = nan;
    x[0][2][3] = inf;
    x[0][3][4] = -inf;
    const auto y = pe(x);
    EXPECT_TRUE(std::isnan(y[0][1][2].item<double>())) << dtype;
    EXPECT_EQ(y[0][2][3].item<double>(), inf);
    EXPECT_EQ(y[0][3][4].item<double>(), -inf);
    EXPECT_EQ(y.isnan().sum().item<int64_t>(), 1);
    auto q = torch::randn({1, 4, 1, 8}).to(dtype);
    q[0][1][0][0] = nan;
    const auto r = rope(q, 3);
    EXPECT_TRUE(std::isnan(r[0][1][0][0].item<double>()));
    EXPECT_TRUE(std::isnan(r[0][1][0][4].item<double>())); // its half-split partner
    EXPECT_EQ(r.isnan().sum().item<int64_t>(), 2);
  }
}

TEST_F(Properties, ResultsAreBitIdenticalAcrossRunsAndThreadCounts) {
  posenc::RotaryEmbedding rope(64, 4096);
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(100, 64, 4096).dropout(0.3));
  embed->train();
  const auto q = torch::randn({4, 512, 4, 64});
  const auto ids = torch::randint(0, 100, {4, 512}, torch::kLong);
  const int threads = at::get_num_threads();
  std::vector<torch::Tensor> rope_results;
  std::vector<torch::Tensor> embed_results;
  for (const int n : {1, 2, 1}) {
    at::set_num_threads(n);
    torch::manual_seed(42);
    torch::NoGradGuard no_grad;
    rope_results.push_back(rope(q, 100));
    embed_results.push_back(embed(ids));
  }
  at::set_num_threads(threads);
  for (size_t i = 1; i < rope_results.size(); ++i) {
    EXPECT_TRUE(torch::equal(rope_results[i], rope_results[0]));
    EXPECT_TRUE(torch::equal(embed_results[i], embed_results[0]));
  }
}
