// Hand-written CPU kernels: one pass over the data, float16/bfloat16 converted in registers (no
// float32 intermediate tensor), parallel over rows with at::parallel_for. Compiled with
// -ffp-contract=off so that every product and sum rounds exactly as in the composite kernels
// (../composite), which they are tested against. Layouts they do not cover (non-contiguous
// inputs, 16-bit tables) go to the composite kernels.

#include "ops/composite/kernels.h"
#include "ops/cpu/loops.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

// Rows per task: about 32k elements, like ATen's grain size.
int64_t grain_rows(int64_t width) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1));
}

// A fresh CPU tensor, allocated without a trip through the dispatcher (a decoding step is ~1 us).
at::Tensor empty_cpu(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::detail::empty_cpu(sizes, options);
}

SequenceRows sequence_rows(const TableCall& call, int64_t offset, bool batch_first) {
  const bool given = call.positions.defined();
  return {call.batch,
          call.length,
          batch_first,
          offset,
          given ? call.positions.data_ptr<int64_t>() : nullptr,
          given && call.positions.dim() == 2};
}

// One row: out = x * scale + t (t null: padding, zeros). Separate in-place versions keep the
// vectorizer from falling back to scalar code when out is x.
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void add_row(
    const scalar_t* x, scalar_t* out, const table_t* t, int64_t width, double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  if (t == nullptr) {
    for (int64_t c = 0; c < width; ++c) {
      out[c] = store<scalar_t>(scale == 1.0 ? load<acc_t>(x[c]) + acc_t(0)
                                            : acc_t(0) + s * load<acc_t>(x[c]));
    }
  } else if (scale == 1.0) {
    for (int64_t c = 0; c < width; ++c) {
      out[c] = store<scalar_t>(load<acc_t>(x[c]) + static_cast<acc_t>(t[c]));
    }
  } else { // rows + scale * x, as at::add(rows, x, scale)
    for (int64_t c = 0; c < width; ++c) {
      out[c] = store<scalar_t>(static_cast<acc_t>(t[c]) + s * load<acc_t>(x[c]));
    }
  }
}

template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void add_row_inplace(scalar_t* x, const table_t* t, int64_t width, double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  if (t == nullptr) {
    for (int64_t c = 0; c < width; ++c) {
      x[c] = store<scalar_t>(scale == 1.0 ? load<acc_t>(x[c]) + acc_t(0)
                                          : acc_t(0) + s * load<acc_t>(x[c]));
    }
  } else if (scale == 1.0) {
    for (int64_t c = 0; c < width; ++c) {
      x[c] = store<scalar_t>(load<acc_t>(x[c]) + static_cast<acc_t>(t[c]));
    }
  } else {
    for (int64_t c = 0; c < width; ++c) {
      x[c] = store<scalar_t>(static_cast<acc_t>(t[c]) + s * load<acc_t>(x[c]));
    }
  }
}

template <typename scalar_t, typename table_t>
void add_one_row(
    const scalar_t* x, scalar_t* out, const table_t* t, int64_t i, int64_t width, double scale) {
  if (x == out) {
    add_row_inplace(out + i * width, t, width, scale);
  } else {
    add_row(x + i * width, out + i * width, t, width, scale);
  }
}

// out[i, :] = x[i, :] * scale + table[position(i), :] (zeros for padding). out may be x.
template <typename scalar_t, typename table_t>
void add_rows_loop(const scalar_t* x,
                   scalar_t* out,
                   const table_t* table,
                   int64_t width,
                   int64_t rows,
                   SequenceRows where,
                   double scale) {
  if (width == 0 || rows == 0) {
    return; // nothing to add (and no block size to derive from a zero width)
  }
  if (where.per_sequence) {
    at::parallel_for(0, rows, grain_rows(width), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t p = where.position(i);
        add_one_row(x, out, p < 0 ? nullptr : table + p * width, i, width, scale);
      }
    });
    return;
  }
  // One position for the whole batch. The table slice of a long sequence does not fit in L2, so
  // the positions are taken in blocks whose table rows do (~128 KiB): each block's rows are read
  // from memory once and reused for every sequence of the batch, while x and out still stream
  // through memory in order (within a block, B rows apart only in the batch-first layout).
  const int64_t batch = where.batch;
  const int64_t length = where.length;
  const auto position_of = [&](int64_t l) {
    return where.positions != nullptr ? where.positions[l] : where.offset + l;
  };
  if (!where.batch_first) { // [L, B, D]: the B rows of a position are adjacent
    at::parallel_for(
        0,
        length,
        std::max<int64_t>(1, grain_rows(width) / std::max<int64_t>(batch, 1)),
        [&](int64_t begin, int64_t end) {
          for (int64_t l = begin; l < end; ++l) {
            const int64_t p = position_of(l);
            for (int64_t b = 0; b < batch; ++b) {
              add_one_row(x, out, p < 0 ? nullptr : table + p * width, l * batch + b, width, scale);
            }
          }
        });
    return;
  }
  const int64_t block =
      std::max<int64_t>(1, (int64_t{128} << 10) / (width * static_cast<int64_t>(sizeof(table_t))));
  const int64_t blocks = (length + block - 1) / block;
  at::parallel_for(
      0,
      blocks,
      std::max<int64_t>(1, grain_rows(width) / std::max<int64_t>(batch * block, 1)),
      [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          const int64_t first = k * block;
          const int64_t last = std::min(length, first + block);
          for (int64_t b = 0; b < batch; ++b) {
            for (int64_t l = first; l < last; ++l) {
              const int64_t p = position_of(l);
              add_one_row(
                  x, out, p < 0 ? nullptr : table + p * width, b * length + l, width, scale);
            }
          }
        }
      });
}

void run_add(const at::Tensor& x,
             at::Tensor& out,
             const TableCall& call,
             int64_t offset,
             bool batch_first,
             double scale) {
  const int64_t width = x.size(2);
  const int64_t rows = x.numel() == 0 ? 0 : x.numel() / width;
  const SequenceRows where = sequence_rows(call, offset, batch_first);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_add_position_table_cpu", [&] {
        if (call.table.scalar_type() == at::kFloat) {
          add_rows_loop(x.data_ptr<scalar_t>(),
                        out.data_ptr<scalar_t>(),
                        call.table.data_ptr<float>(),
                        width,
                        rows,
                        where,
                        scale);
        } else {
          add_rows_loop(x.data_ptr<scalar_t>(),
                        out.data_ptr<scalar_t>(),
                        call.table.data_ptr<double>(),
                        width,
                        rows,
                        where,
                        scale);
        }
      });
}

at::Tensor add_position_table_cpu(const at::Tensor& x,
                                  const at::Tensor& table,
                                  int64_t offset,
                                  bool batch_first,
                                  OptionalTensor positions,
                                  double scale) {
  const TableCall call = prepare_table_call(
      "posenc::add_position_table", x, table, offset, positions, batch_first, scale);
  if (!x.is_contiguous() || !hand_kernels_read(call.table)) {
    return composite::add_position_table(x, table, offset, batch_first, positions, scale);
  }
  at::Tensor out = empty_cpu(x.sizes(), x.options());
  run_add(x, out, call, offset, batch_first, scale);
  return out;
}

void add_position_table_inplace_cpu(at::Tensor& x,
                                    const at::Tensor& table,
                                    int64_t offset,
                                    bool batch_first,
                                    OptionalTensor positions,
                                    double scale) {
  const TableCall call = prepare_table_call(
      "posenc::add_position_table_", x, table, offset, positions, batch_first, scale);
  if (!x.is_contiguous() || !hand_kernels_read(call.table)) {
    composite::add_position_table_(x, table, offset, batch_first, positions, scale);
    return;
  }
  run_add(x, x, call, offset, batch_first, scale);
}

void add_position_table_out_cpu(const at::Tensor& x,
                                const at::Tensor& table,
                                int64_t offset,
                                bool batch_first,
                                OptionalTensor positions,
                                double scale,
                                at::Tensor& out) {
  constexpr const char* who = "posenc::add_position_table_out";
  const TableCall call = prepare_table_call(who, x, table, offset, positions, batch_first, scale);
  prepare_out(who, out, x);
  if (!x.is_contiguous() || !out.is_contiguous() || !hand_kernels_read(call.table)) {
    composite::add_position_table_out(x, table, offset, batch_first, positions, scale, out);
    return;
  }
  run_add(x, out, call, offset, batch_first, scale);
}

// --- rotary ------------------------------------------------------------------------------------

// One row of Dh channels; pairs (k, k + half) or (2k, 2k + 1). out may be x: every pair is read
// before it is written.
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void rotate_row(const scalar_t* x,
                                scalar_t* out,
                                const table_t* cos,
                                const table_t* sin,
                                int64_t half,
                                bool interleaved,
                                bool inverse) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  for (int64_t k = 0; k < half; ++k) {
    const int64_t ia = interleaved ? 2 * k : k;
    const int64_t ib = interleaved ? 2 * k + 1 : k + half;
    const acc_t a = load<acc_t>(x[ia]);
    const acc_t b = load<acc_t>(x[ib]);
    const acc_t c = static_cast<acc_t>(cos[k]);
    const acc_t s = inverse ? -static_cast<acc_t>(sin[k]) : static_cast<acc_t>(sin[k]);
    out[ia] = store<scalar_t>(a * c - b * s);
    out[ib] = store<scalar_t>(a * s + b * c);
  }
}

template <typename scalar_t, typename table_t>
void rotary_loop(const scalar_t* x,
                 scalar_t* out,
                 const table_t* cos,
                 const table_t* sin,
                 int64_t rows,
                 int64_t head_dim,
                 int64_t half,
                 RotaryRows where,
                 bool interleaved,
                 bool inverse) {
  const bool in_place = x == out;
  at::parallel_for(0, rows, grain_rows(head_dim), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const scalar_t* xi = x + i * head_dim;
      scalar_t* oi = out + i * head_dim;
      const int64_t p = where.position(i);
      if (p < 0) { // padding: not rotated
        if (!in_place) {
          std::copy(xi, xi + head_dim, oi);
        }
        continue;
      }
      rotate_row(xi, oi, cos + p * half, sin + p * half, half, interleaved, inverse);
      if (!in_place) {
        std::copy(xi + 2 * half, xi + head_dim, oi + 2 * half);
      }
    }
  });
}

bool rotary_fast(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x.is_contiguous() && cos.is_contiguous() && sin.is_contiguous() &&
         (cos.scalar_type() == at::kFloat || cos.scalar_type() == at::kDouble);
}

void run_rotary(const at::Tensor& x,
                at::Tensor& out,
                const at::Tensor& cos,
                const at::Tensor& sin,
                const RotaryCall& call,
                int64_t offset,
                bool interleaved,
                bool heads_first,
                bool inverse) {
  const int64_t rows = call.batch * call.length * call.heads;
  const bool given = call.positions.defined();
  const RotaryRows where{call.length,
                         call.heads,
                         heads_first,
                         offset,
                         given ? call.positions.data_ptr<int64_t>() : nullptr,
                         given && call.positions.dim() == 2};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_apply_rotary_cpu", [&] {
        if (cos.scalar_type() == at::kFloat) {
          rotary_loop(x.data_ptr<scalar_t>(),
                      out.data_ptr<scalar_t>(),
                      cos.data_ptr<float>(),
                      sin.data_ptr<float>(),
                      rows,
                      call.head_dim,
                      call.half,
                      where,
                      interleaved,
                      inverse);
        } else {
          rotary_loop(x.data_ptr<scalar_t>(),
                      out.data_ptr<scalar_t>(),
                      cos.data_ptr<double>(),
                      sin.data_ptr<double>(),
                      rows,
                      call.head_dim,
                      call.half,
                      where,
                      interleaved,
                      inverse);
        }
      });
}

at::Tensor apply_rotary_cpu(const at::Tensor& x,
                            const at::Tensor& cos,
                            const at::Tensor& sin,
                            int64_t offset,
                            OptionalTensor positions,
                            bool interleaved,
                            bool heads_first,
                            bool inverse) {
  const RotaryCall call =
      prepare_rotary_call("posenc::apply_rotary", x, cos, sin, offset, positions, heads_first);
  if (!rotary_fast(x, cos, sin)) {
    return composite::apply_rotary(
        x, cos, sin, offset, positions, interleaved, heads_first, inverse);
  }
  at::Tensor out = empty_cpu(x.sizes(), x.options());
  run_rotary(x, out, cos, sin, call, offset, interleaved, heads_first, inverse);
  return out;
}

void apply_rotary_inplace_cpu(at::Tensor& x,
                              const at::Tensor& cos,
                              const at::Tensor& sin,
                              int64_t offset,
                              OptionalTensor positions,
                              bool interleaved,
                              bool heads_first,
                              bool inverse) {
  const RotaryCall call =
      prepare_rotary_call("posenc::apply_rotary_", x, cos, sin, offset, positions, heads_first);
  if (!rotary_fast(x, cos, sin)) {
    composite::apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
    return;
  }
  run_rotary(x, x, cos, sin, call, offset, interleaved, heads_first, inverse);
}

// --- token embedding + positions + dropout ------------------------------------------------------

// One row without dropout: out = w * scale + t (t null: padding).
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void token_row(
    const scalar_t* w, const table_t* t, scalar_t* out, int64_t width, double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  for (int64_t c = 0; c < width; ++c) {
    const acc_t tc = t != nullptr ? static_cast<acc_t>(t[c]) : acc_t(0);
    const acc_t wc = load<acc_t>(w[c]);
    out[c] = store<scalar_t>(scale == 1.0 ? wc + tc : tc + s * wc);
  }
}

// murmur3's 32-bit finalizer: a bijection of 32-bit words with full avalanche.
inline uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// One row with dropout. Element c keeps its value when mix32(row_seed + c * golden) < threshold
// (probability threshold / 2^32 = 1 - p): a counter-based draw, so the row vectorizes, and the
// mask does not depend on how rows are split between threads.
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void token_row_dropout(const scalar_t* w,
                                       const table_t* t,
                                       scalar_t* out,
                                       bool* mask,
                                       int64_t width,
                                       double scale,
                                       uint32_t row_seed,
                                       uint64_t threshold,
                                       double inverse_keep) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  const acc_t ik = static_cast<acc_t>(inverse_keep);
  for (int64_t c = 0; c < width; ++c) {
    const acc_t tc = t != nullptr ? static_cast<acc_t>(t[c]) : acc_t(0);
    const acc_t wc = load<acc_t>(w[c]);
    const acc_t value = scale == 1.0 ? wc + tc : tc + s * wc;
    const bool kept =
        static_cast<uint64_t>(mix32(row_seed + static_cast<uint32_t>(c) * 0x9e3779b9u)) < threshold;
    mask[c] = kept;
    out[c] = store<scalar_t>(kept ? value * ik : acc_t(0));
  }
}

// Dropout keys come from one 64-bit draw of the default CPU generator per call: reproducible under
// torch::manual_seed and independent of the thread count.
template <typename scalar_t, typename table_t>
void token_loop(const int64_t* tokens,
                const scalar_t* weight,
                const table_t* table,
                scalar_t* out,
                bool* mask,
                int64_t width,
                int64_t rows,
                SequenceRows where,
                double scale,
                double dropout,
                uint64_t key) {
  const double keep = 1.0 - dropout;
  const double inverse_keep = keep > 0.0 ? 1.0 / keep : 0.0;
  const uint64_t threshold = static_cast<uint64_t>(keep * 4294967296.0);
  at::parallel_for(0, rows, grain_rows(width), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const scalar_t* wi = weight + tokens[i] * width;
      const int64_t p = where.position(i);
      const table_t* ti = p < 0 ? nullptr : table + p * width;
      scalar_t* oi = out + i * width;
      if (mask == nullptr) {
        token_row(wi, ti, oi, width, scale);
        continue;
      }
      const uint64_t row = static_cast<uint64_t>(i);
      const uint32_t row_seed =
          mix32(static_cast<uint32_t>(row) ^
                mix32(static_cast<uint32_t>(row >> 32) + static_cast<uint32_t>(key >> 32))) ^
          static_cast<uint32_t>(key);
      token_row_dropout(
          wi, ti, oi, mask + i * width, width, scale, mix32(row_seed), threshold, inverse_keep);
    }
  });
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_cpu(const at::Tensor& tokens,
                                                                    const at::Tensor& weight,
                                                                    const at::Tensor& table,
                                                                    int64_t offset,
                                                                    bool batch_first,
                                                                    OptionalTensor positions,
                                                                    double scale,
                                                                    int64_t padding_idx,
                                                                    double dropout,
                                                                    bool train) {
  const TableCall call = prepare_token_call("posenc::token_and_position_embedding",
                                            tokens,
                                            weight,
                                            table,
                                            offset,
                                            positions,
                                            batch_first,
                                            scale,
                                            dropout);
  if (!tokens.is_contiguous() || !weight.is_contiguous() || !hand_kernels_read(call.table)) {
    return composite::token_and_position_embedding(
        tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train);
  }
  const int64_t width = weight.size(1);
  at::Tensor out = empty_cpu({tokens.size(0), tokens.size(1), width}, weight.options());
  const bool drop = train && dropout > 0.0;
  at::Tensor mask =
      at::empty(drop ? out.sizes() : at::IntArrayRef{0}, weight.options().dtype(at::kBool));
  uint64_t key = 0;
  if (drop) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    key = generator.get<at::CPUGeneratorImpl>()->random64();
  }
  const SequenceRows where = sequence_rows(call, offset, batch_first);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, weight.scalar_type(), "posenc_token_and_position_cpu", [&] {
        bool* mask_data = drop ? mask.data_ptr<bool>() : nullptr;
        if (call.table.scalar_type() == at::kFloat) {
          token_loop(tokens.data_ptr<int64_t>(),
                     weight.data_ptr<scalar_t>(),
                     call.table.data_ptr<float>(),
                     out.data_ptr<scalar_t>(),
                     mask_data,
                     width,
                     tokens.numel(),
                     where,
                     scale,
                     dropout,
                     key);
        } else {
          token_loop(tokens.data_ptr<int64_t>(),
                     weight.data_ptr<scalar_t>(),
                     call.table.data_ptr<double>(),
                     out.data_ptr<scalar_t>(),
                     mask_data,
                     width,
                     tokens.numel(),
                     where,
                     scale,
                     dropout,
                     key);
        }
      });
  return {out, mask};
}

} // namespace
} // namespace cpu

TORCH_LIBRARY_IMPL(posenc, CPU, m) {
  m.impl("add_position_table", TORCH_FN(cpu::add_position_table_cpu));
  m.impl("add_position_table_", TORCH_FN(cpu::add_position_table_inplace_cpu));
  m.impl("add_position_table_out", TORCH_FN(cpu::add_position_table_out_cpu));
  m.impl("apply_rotary", TORCH_FN(cpu::apply_rotary_cpu));
  m.impl("apply_rotary_", TORCH_FN(cpu::apply_rotary_inplace_cpu));
  m.impl("token_and_position_embedding", TORCH_FN(cpu::token_and_position_embedding_cpu));
}

} // namespace ops
} // namespace posenc
