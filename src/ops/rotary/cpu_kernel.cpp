// CPU kernels of the rotary family: one pass over the data, float16/bfloat16 converted in
// registers (no float32 intermediate tensor), parallel over rows with at::parallel_for. Compiled
// with -ffp-contract=off so that every product and sum rounds exactly as in the composite kernels
// (../composite), which they are tested against.

#include "ops/common/backend_entries.h"
#include "ops/rotary/cpu_rows.h"
#include "ops/common/cpu_helpers.h"
#include "ops/common/kernel_helpers.h"
#include "ops/rotary/backend_entries.h"
#include "ops/rotary/kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

template <typename scalar_t, typename table_t>
void rotary_loop(const scalar_t* x, scalar_t* out, const table_t* cos, const table_t* sin,
                 int64_t rows, int64_t head_dim, int64_t half, RotaryRows where, bool interleaved,
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

void run_rotary(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                bool inverse) {
  const int64_t rows = call.batch * call.length * call.heads;
  const RotaryRows where = RotaryRows::of(call);
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_apply_rotary_cpu", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          rotary_loop(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), c, sin.data_ptr<table_t>(),
                      rows, call.head_dim, call.half, where, interleaved, inverse);
        });
      });
}

// Rotates row (b, l, h) of one rotary_qk operand by the cos/sin row (null: padding, not rotated).
template <typename scalar_t, typename table_t>
void rotate_head(const OperandRows<scalar_t>& x, int64_t b, int64_t l, int64_t h,
                 const table_t* cos, const table_t* sin, int64_t half, bool interleaved,
                 bool inverse) {
  const bool in_place = x.in == x.out;
  const scalar_t* xi = x.in + x.in_rows.row(b, l, h);
  scalar_t* oi = x.out + x.out_rows.row(b, l, h);
  if (cos == nullptr) {
    if (!in_place) {
      std::copy(xi, xi + x.head_dim, oi);
    }
    return;
  }
  rotate_row(xi, oi, cos, sin, half, interleaved, inverse);
  if (!in_place) {
    std::copy(xi + 2 * half, xi + x.head_dim, oi + 2 * half);
  }
}

// [B, L, H, Dh]: one pass over the tokens, each token's cos/sin row read once for its query and
// key heads, which lie next to each other. [B, H, L, Dh] (heads_first): a token's heads lie a
// whole head apart (a page or more), so each operand is walked in its own order, (b, h, l), in
// runs of a head's consecutive rows (one rotate_rows call per run where the positions are
// consecutive: the cos/sin rows one after the other); the cos/sin rows (L x R/2 values) are read
// again per head, from cache. One token per sequence (a decoding step, L = 1) has its heads next
// to each other in either layout: the pass over the tokens.
void run_rotary_qk(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                   bool interleaved, bool inverse) {
  const int64_t tokens = call.batch * call.length;
  const RotaryRows where = RotaryRows::tokens_of(call);
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  const int64_t width = q.heads * q.head_dim + k.heads * k.head_dim;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, q.in.scalar_type(), "posenc_apply_rotary_qk_cpu", [&] {
        const auto q_rows = operand_rows<scalar_t>(q, call.heads_first);
        const auto k_rows = operand_rows<scalar_t>(k, call.heads_first);
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          const table_t* s = sin.data_ptr<table_t>();
          const auto rotate = [&](const OperandRows<scalar_t>& x, int64_t b, int64_t l,
                                  int64_t h) {
            const int64_t p = where.position_at(b, l);
            rotate_head(x, b, l, h, p < 0 ? nullptr : c + p * call.half,
                        p < 0 ? nullptr : s + p * call.half, call.half, interleaved, inverse);
          };
          if (call.heads_first && call.length > 1) {
            // Rows l0 .. l0 + n - 1 of head h of sequence b: consecutive cos/sin rows where the
            // positions are the offset's and every channel is the rotation's (or in place).
            const auto rotate_run = [&](const OperandRows<scalar_t>& x, int64_t b, int64_t h,
                                        int64_t l0, int64_t n) {
              if (where.positions != nullptr ||
                  (x.in != x.out && x.head_dim != 2 * call.half)) {
                for (int64_t l = l0; l < l0 + n; ++l) {
                  rotate(x, b, l, h);
                }
                return;
              }
              const int64_t p = where.position_at(b, l0);
              rotate_rows(x.in + x.in_rows.row(b, l0, h), x.out + x.out_rows.row(b, l0, h),
                          x.in_rows.length, x.out_rows.length, n, c + p * call.half,
                          s + p * call.half, call.half, call.half, interleaved, inverse);
            };
            for (const OperandRows<scalar_t>* x : {&q_rows, &k_rows}) {
              const int64_t rows = call.batch * x->heads * call.length;
              at::parallel_for(0, rows, grain_rows(x->head_dim), [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end;) {
                  const int64_t run = i / call.length; // (b, h)
                  const int64_t l0 = i - run * call.length;
                  const int64_t n = std::min(end - i, call.length - l0);
                  rotate_run(*x, run / x->heads, run % x->heads, l0, n);
                  i += n;
                }
              });
            }
            return;
          }
          // A token's heads of one operand in one call (rotate_rows); padding and the channels
          // past a partial rotation head by head (rotate_head).
          const auto rotate_token = [&](const OperandRows<scalar_t>& x, int64_t b, int64_t l,
                                        int64_t p) {
            if (p < 0 || (x.in != x.out && x.head_dim != 2 * call.half)) {
              for (int64_t h = 0; h < x.heads; ++h) {
                rotate(x, b, l, h);
              }
              return;
            }
            rotate_rows(x.in + x.in_rows.row(b, l, 0), x.out + x.out_rows.row(b, l, 0),
                        x.in_rows.head, x.out_rows.head, x.heads, c + p * call.half,
                        s + p * call.half, 0, call.half, interleaved, inverse);
          };
          at::parallel_for(0, tokens, grain_rows(width), [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
              const int64_t b = t / call.length;
              const int64_t l = t - b * call.length;
              const int64_t p = where.position_at(b, l);
              rotate_token(q_rows, b, l, p);
              rotate_token(k_rows, b, l, p);
            }
          });
        });
      });
}

} // namespace
} // namespace cpu

TORCH_LIBRARY_IMPL(posenc, CPU, m) {
  m.impl("apply_rotary", TORCH_FN((apply_rotary_kernel<cpu::run_rotary, cpu::empty_cpu>)));
  m.impl("apply_rotary_", TORCH_FN((apply_rotary_inplace_kernel<cpu::run_rotary, cpu::empty_cpu>)));
  m.impl("apply_rotary_qk",
         TORCH_FN((apply_rotary_qk_kernel<cpu::run_rotary_qk, cpu::empty_cpu>)));
  m.impl("apply_rotary_qk_",
         TORCH_FN((apply_rotary_qk_inplace_kernel<cpu::run_rotary_qk, cpu::empty_cpu>)));
}

} // namespace ops
} // namespace posenc
