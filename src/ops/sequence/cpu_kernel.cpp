// CPU kernels of the positional-encoding family: one pass over the data, float16/bfloat16 converted
// in registers (no float32 intermediate tensor), parallel over rows with at::parallel_for. Compiled
// with -ffp-contract=off so that every product and sum rounds exactly as in the composite kernels
// (../composite), which they are tested against.

#include "ops/common/backend_entries.h"
#include "ops/common/cpu_helpers.h"
#include "ops/common/kernel_helpers.h"
#include "ops/sequence/backend_entries.h"
#include "ops/sequence/kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

// One row: out = x * scale + t (t null: padding, zeros), each element by the arithmetic the CUDA
// threads run (kernels::scaled_sum). Separate in-place versions keep the vectorizer from falling
// back to scalar code when out is x; the branches on scale are hoisted out of the loops.
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void add_row(const scalar_t* x, scalar_t* out, const table_t* t, int64_t width,
                             double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  if (t == nullptr) {
    if (scale == 1.0) {
      for (int64_t c = 0; c < width; ++c) {
        out[c] = store<scalar_t>(kernels::scaled_sum(load<acc_t>(x[c]), acc_t(0), s, true));
      }
    } else {
      for (int64_t c = 0; c < width; ++c) {
        out[c] = store<scalar_t>(kernels::scaled_sum(load<acc_t>(x[c]), acc_t(0), s, false));
      }
    }
  } else if (scale == 1.0) {
    for (int64_t c = 0; c < width; ++c) {
      out[c] = store<scalar_t>(
          kernels::scaled_sum(load<acc_t>(x[c]), static_cast<acc_t>(t[c]), s, true));
    }
  } else {
    for (int64_t c = 0; c < width; ++c) {
      out[c] = store<scalar_t>(
          kernels::scaled_sum(load<acc_t>(x[c]), static_cast<acc_t>(t[c]), s, false));
    }
  }
}

template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void add_row_inplace(scalar_t* x, const table_t* t, int64_t width, double scale) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  if (t == nullptr) {
    if (scale == 1.0) {
      for (int64_t c = 0; c < width; ++c) {
        x[c] = store<scalar_t>(kernels::scaled_sum(load<acc_t>(x[c]), acc_t(0), s, true));
      }
    } else {
      for (int64_t c = 0; c < width; ++c) {
        x[c] = store<scalar_t>(kernels::scaled_sum(load<acc_t>(x[c]), acc_t(0), s, false));
      }
    }
  } else if (scale == 1.0) {
    for (int64_t c = 0; c < width; ++c) {
      x[c] = store<scalar_t>(
          kernels::scaled_sum(load<acc_t>(x[c]), static_cast<acc_t>(t[c]), s, true));
    }
  } else {
    for (int64_t c = 0; c < width; ++c) {
      x[c] = store<scalar_t>(
          kernels::scaled_sum(load<acc_t>(x[c]), static_cast<acc_t>(t[c]), s, false));
    }
  }
}

template <typename scalar_t, typename table_t>
void add_one_row(const scalar_t* x, scalar_t* out, const table_t* t, int64_t i, int64_t width,
                 double scale) {
  if (x == out) {
    add_row_inplace(out + i * width, t, width, scale);
  } else {
    add_row(x + i * width, out + i * width, t, width, scale);
  }
}

// out[i, :] = x[i, :] * scale + table[position(i), :] (zeros for padding). out may be x.
template <typename scalar_t, typename table_t>
void add_rows_loop(const scalar_t* x, scalar_t* out, const table_t* table, int64_t width,
                   int64_t rows, SequenceRows where, double scale) {
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
  // One position for the whole batch. The table slice of a long sequence need not fit in L2, so
  // the positions are taken in blocks whose table rows do (1 MiB, a server core's L2): each
  // block's rows are read from memory once and reused for every sequence of the batch, while x and
  // out stream through memory in runs of a block's rows (B runs apart in the batch-first layout).
  // Long runs keep the hardware prefetchers streaming (blocks of 1 MiB of table rows ran bfloat16
  // in place 1.5x faster than blocks of 128 KiB at 8x2048x1024 on an AMD EPYC); a call has at
  // least as many blocks as threads.
  const int64_t batch = where.batch;
  const int64_t length = where.length;
  const auto position_of = [&](int64_t l) {
    return where.positions != nullptr ? where.positions[l] : where.offset + l;
  };
  if (!where.batch_first) { // [L, B, D]: the B rows of a position are adjacent
    at::parallel_for(
        0, length, std::max<int64_t>(1, grain_rows(width) / std::max<int64_t>(batch, 1)),
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
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t block = std::max<int64_t>(
      1, std::min((int64_t{1} << 20) / (width * static_cast<int64_t>(sizeof(table_t))),
                  (length + threads - 1) / threads));
  const int64_t blocks = (length + block - 1) / block;
  at::parallel_for(0, blocks,
                   std::max<int64_t>(1, grain_rows(width) / std::max<int64_t>(batch * block, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t k = begin; k < end; ++k) {
                       const int64_t first = k * block;
                       const int64_t last = std::min(length, first + block);
                       for (int64_t b = 0; b < batch; ++b) {
                         for (int64_t l = first; l < last; ++l) {
                           const int64_t p = position_of(l);
                           add_one_row(x, out, p < 0 ? nullptr : table + p * width, b * length + l,
                                       width, scale);
                         }
                       }
                     }
                   });
}

void run_add(const at::Tensor& x, at::Tensor& out, const TableCall& call) {
  const int64_t width = call.width;
  const int64_t rows = x.numel() == 0 ? 0 : x.numel() / width;
  const SequenceRows where = SequenceRows::of(call);
  const at::Tensor table = call.kernel_table();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_add_position_table_cpu", [&] {
        with_table_data(table, [&](const auto* t) {
          add_rows_loop(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), t, width, rows, where,
                        call.scale);
        });
      });
}

} // namespace
} // namespace cpu

TORCH_LIBRARY_IMPL(posenc, CPU, m) {
  m.impl("add_position_table", TORCH_FN((add_position_table_kernel<cpu::run_add, cpu::empty_cpu>)));
  m.impl("add_position_table_",
         TORCH_FN((add_position_table_inplace_kernel<cpu::run_add, cpu::empty_cpu>)));
  m.impl("add_position_table_out",
         TORCH_FN((add_position_table_out_kernel<cpu::run_add, cpu::empty_cpu>)));
}

} // namespace ops
} // namespace posenc
