#pragma once

// The positional-encoding family's kernel bodies, for the CPU and the CUDA kernels alike: the sum
// of one element (the arithmetic both backends run) and what one CUDA thread computes for
// add_position_table and its in-place and out variants (which N elements of which row, 16-byte
// loads and stores where the row width and the pointers allow, the position and its table row,
// padding). `run_add_grid` builds the thread body of a checked call and hands it to an executor:
// the CUDA launcher (../cuda/positional_encoding_kernel.cu) or the tests' emulated grid.

#include "ops/kernel_helpers.h"
#include "ops/kernels/launch.h"

#include <ATen/Dispatch.h>

#include <cstdint>
#include <type_traits>

namespace posenc {
namespace ops {
namespace kernels {

/// x * scale + t as the composite kernels round it: x + t when `unit` (scale 1), else
/// t + scale * x (at::add(rows, x, scale)). Padding adds t = 0.
template <typename acc_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE acc_t scaled_sum(acc_t x, acc_t t, acc_t scale, bool unit) {
  return unit ? x + t : t + scale * x;
}

/// One CUDA thread's item of add_position_table over `rows` contiguous rows of `width`: the N
/// elements (N | width, pointers 16-byte aligned when N > 1) starting at element item * N.
template <typename scalar_t, typename table_t, int N>
struct AddRowsBody {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const scalar_t* x;
  scalar_t* out;
  const table_t* table;
  int64_t rows;
  int64_t width;
  int64_t table_rows;
  SequenceRows where;
  acc_t scale;
  bool unit;

  int64_t work() const {
    return rows * (width / N);
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const int64_t per_row = width / N;
    const int64_t row = item / per_row;
    const int64_t column = (item - row * per_row) * N;
    const int64_t p = checked_position(where.position(row), table_rows);
    const Pack<scalar_t, N> in =
        *reinterpret_cast<const Pack<scalar_t, N>*>(x + row * width + column);
    Pack<scalar_t, N> result;
    POSENC_UNROLL
    for (int k = 0; k < N; ++k) {
      const acc_t t = p < 0 ? acc_t(0) : static_cast<acc_t>(table[p * width + column + k]);
      result.value[k] = store<scalar_t>(scaled_sum(load<acc_t>(in.value[k]), t, scale, unit));
    }
    *reinterpret_cast<Pack<scalar_t, N>*>(out + row * width + column) = result;
  }
};

/// Builds the thread body of a checked add_position_table call (x and out contiguous, out may be
/// x) for the widest access its width and pointers allow, and runs it with
/// `execute(body, work)`.
template <typename Execute>
void run_add_grid(const at::Tensor& x, at::Tensor& out, const TableCall& call,
                  const Execute& execute) {
  const int64_t width = call.width;
  const int64_t rows = x.numel() == 0 || width == 0 ? 0 : x.numel() / width;
  if (rows == 0) {
    return;
  }
  const at::Tensor table = call.kernel_table();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_add_position_table_grid", [&] {
        with_table_data(table, [&](const auto* t) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(t)>>;
          using acc_t = acc_type_t<scalar_t, table_t>;
          const scalar_t* in = x.data_ptr<scalar_t>();
          scalar_t* result = out.data_ptr<scalar_t>();
          const auto run = [&](auto width_tag) {
            constexpr int n = decltype(width_tag)::value;
            const AddRowsBody<scalar_t, table_t, n> body{in,
                                                         result,
                                                         t,
                                                         rows,
                                                         width,
                                                         table.numel() / width,
                                                         SequenceRows::of(call),
                                                         static_cast<acc_t>(call.scale),
                                                         call.scale == 1.0};
            execute(body, body.work());
          };
          switch (vector_width(sizeof(scalar_t), width, {in, result})) {
            case 8:
              run(std::integral_constant<int, 8>());
              break;
            case 4:
              run(std::integral_constant<int, 4>());
              break;
            case 2:
              run(std::integral_constant<int, 2>());
              break;
            default:
              run(std::integral_constant<int, 1>());
          }
        });
      });
}

} // namespace kernels
} // namespace ops
} // namespace posenc
