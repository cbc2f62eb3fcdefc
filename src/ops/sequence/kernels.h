#pragma once

// The positional-encoding family's kernel bodies, for the CPU and the CUDA kernels alike: the sum
// of one element (the arithmetic both backends run) and what one CUDA thread computes for
// add_position_table and its in-place and out variants (which N elements of which row, 16-byte
// loads and stores where the row width and the pointers allow, the position and its table row,
// padding). `run_add_grid` builds the thread body of a checked call and hands it to an executor:
// the CUDA launcher (cuda_kernel.cu) or the tests' emulated grid.

#include "ops/common/kernel_helpers.h"
#include "ops/common/launch.h"

#include <ATen/Dispatch.h>

#include <cstdint>
#include <initializer_list>
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

/// How a grid walks the B * L rows of a `[B, L, D]` (batch_first) or `[L, B, D]` call: `groups`
/// groups of `repeat` rows that share a position, and so a table row, which an item reads once
/// for all of them; row r of group g is row g * group_step + r * repeat_step. A large table read
/// once per batch row would cost as much traffic again as the input (it outgrows the cache);
/// where positions differ per sequence, or the call has too few groups to keep a GPU busy (a
/// decode step), a group is one row.
template <typename index_t>
struct RowGroups {
  index_t groups;
  index_t repeat;
  index_t group_step;
  index_t repeat_step;

  C10_HOST_DEVICE index_t row(index_t g, index_t r) const {
    return g * group_step + r * repeat_step;
  }
};

/// At least this many items (groups x accesses a row) before a grid reads a table row once for
/// the whole batch: the threads a large GPU runs at once (an H100: 132 SMs x 2048).
constexpr int64_t kBatchLoopItems = int64_t{1} << 18;

/// The row groups of a checked table call over `rows` rows of `per_row` accesses each, one row a
/// group below `min_items` items (host code).
inline RowGroups<int64_t> row_groups(const TableCall& call, int64_t rows, int64_t per_row,
                                     int64_t min_items) {
  if (call.per_sequence() || call.batch <= 1 || call.length * per_row < min_items) {
    return {rows, 1, 1, 0};
  }
  return call.batch_first ? RowGroups<int64_t>{call.length, call.batch, 1, call.length}
                          : RowGroups<int64_t>{call.length, call.batch, call.batch, 1};
}

/// The groups of `g` in another index type (their values fit it).
template <typename index_t>
RowGroups<index_t> narrow_groups(const RowGroups<int64_t>& g) {
  return {static_cast<index_t>(g.groups), static_cast<index_t>(g.repeat),
          static_cast<index_t>(g.group_step), static_cast<index_t>(g.repeat_step)};
}

/// The N values of a `[rows, width]` table from `column` of row p (p = -1, padding: zeros), read
/// as one access.
template <int N, typename table_t, typename index_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE Pack<table_t, N> table_values(const table_t* table, int64_t p,
                                                                index_t width, index_t column) {
  if (p >= 0) {
    return *reinterpret_cast<const Pack<table_t, N>*>(table + static_cast<index_t>(p) * width +
                                                      column);
  }
  Pack<table_t, N> zeros;
  POSENC_UNROLL
  for (int k = 0; k < N; ++k) {
    zeros.value[k] = table_t(0);
  }
  return zeros;
}

/// What an item of a row-group grid (N elements a row per item) starts from: its group, its first
/// column and the N table values of the group's position, checked against the table.
template <int N, typename table_t, typename index_t>
struct GroupItem {
  index_t group;
  index_t column;
  Pack<table_t, N> t;
};
template <int N, typename table_t, typename index_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE GroupItem<N, table_t, index_t> group_item(
    int64_t item, const RowGroups<index_t>& rows, index_t width, const SequenceRows& where,
    const table_t* table, int64_t table_rows) {
  const index_t per_row = width / N;
  const index_t index = static_cast<index_t>(item);
  const index_t group = index / per_row;
  const index_t column = (index - group * per_row) * N;
  const int64_t p = checked_position(where.position(rows.row(group, 0)), table_rows);
  return {group, column, table_values<N>(table, p, width, column)};
}

/// One CUDA thread's item of add_position_table over contiguous rows of `width`: the N elements
/// from column (item % (width / N)) * N of each row of group item / (width / N), with their N
/// table values read once (N | width; x, out and the table aligned to N elements when N > 1),
/// with index_t arithmetic.
template <typename scalar_t, typename table_t, typename index_t, int N>
struct AddRowsBody {
  using acc_t = acc_type_t<scalar_t, table_t>;
  static constexpr int kWidth = N;
  static constexpr int kIndexBits = 8 * static_cast<int>(sizeof(index_t));
  const scalar_t* x;
  scalar_t* out;
  const table_t* table;
  RowGroups<index_t> rows;
  index_t width;
  int64_t table_rows;
  SequenceRows where;
  acc_t scale;
  bool unit;

  int64_t work() const {
    return static_cast<int64_t>(rows.groups) * (width / N);
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const auto [group, column, t] = group_item<N>(item, rows, width, where, table, table_rows);
    for (index_t r = 0; r < rows.repeat; ++r) {
      const index_t at = rows.row(group, r) * width + column;
      const Pack<scalar_t, N> in = *reinterpret_cast<const Pack<scalar_t, N>*>(x + at);
      Pack<scalar_t, N> result;
      POSENC_UNROLL
      for (int k = 0; k < N; ++k) {
        result.value[k] = store<scalar_t>(
            scaled_sum(load<acc_t>(in.value[k]), static_cast<acc_t>(t.value[k]), scale, unit));
      }
      *reinterpret_cast<Pack<scalar_t, N>*>(out + at) = result;
    }
  }
};

/// The widest access (1, 2, 4 or 8 elements, one 16-byte access of scalar_t at most) for rows of
/// `width`: a divisor of the width, with the element pointers aligned to it and `table` aligned
/// to that many of its own values (host code).
inline int row_vector_width(int64_t element_size, int64_t width,
                            std::initializer_list<const void*> pointers, const at::Tensor& table) {
  int n = vector_width(element_size, width, pointers);
  while (n > 1 && reinterpret_cast<uintptr_t>(table.data_ptr()) % (n * table.element_size()) != 0) {
    n /= 2; // still a divisor of the width, the element pointers still aligned to it
  }
  return n;
}

/// Builds the thread body of a checked add_position_table call (x and out contiguous, out may be
/// x) for the widest access its width and pointers allow and the narrowest index type its sizes
/// allow, and runs it with `execute(body, work)`.
/// `batch_loop_items`: row_groups' threshold (the tests lower it to run the batch loop at small
/// shapes).
template <typename Execute>
void run_add_grid(const at::Tensor& x, at::Tensor& out, const TableCall& call,
                  const Execute& execute, int64_t batch_loop_items = kBatchLoopItems) {
  const int64_t width = call.width;
  const int64_t rows = x.numel() == 0 || width == 0 ? 0 : x.numel() / width;
  if (rows == 0) {
    return;
  }
  const at::Tensor table = call.kernel_table();
  const bool narrow = fits_int32({x.numel(), table.numel()});
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_add_position_table_grid", [&] {
        with_table_data(table, [&](const auto* t) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(t)>>;
          using acc_t = acc_type_t<scalar_t, table_t>;
          const scalar_t* in = x.data_ptr<scalar_t>();
          scalar_t* result = out.data_ptr<scalar_t>();
          const int n = row_vector_width(sizeof(scalar_t), width, {in, result}, table);
          const RowGroups<int64_t> groups = row_groups(call, rows, width / n, batch_loop_items);
          with_vector_width<scalar_t>(n, [&](auto vector) {
            with_index_type(narrow, [&](auto index) {
              using index_t = decltype(index);
              const AddRowsBody<scalar_t, table_t, index_t, decltype(vector)::value> body{
                  in,
                  result,
                  t,
                  narrow_groups<index_t>(groups),
                  static_cast<index_t>(width),
                  table.numel() / width,
                  SequenceRows::of(call),
                  static_cast<acc_t>(call.scale),
                  call.scale == 1.0};
              execute(body, body.work());
            });
          });
        });
      });
}

} // namespace kernels
} // namespace ops
} // namespace posenc
