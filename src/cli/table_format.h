#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace posenc {
namespace cli {

/// Formats a 2-D floating tensor the way PyTorch prints it in fixed-point notation, e.g.
/// `tensor([[ 0.0000,  1.0000],\n        [ 0.8415,  0.5403]])`: `decimals` digits after the
/// point, every value right-aligned to the widest one, no trailing newline.
std::string format_python(const at::Tensor& table, int decimals);

/// Formats a 2-D floating tensor as CSV: one row per line, values with `significant` significant
/// digits (9 round-trips float32).
std::string format_csv(const at::Tensor& table, int significant);

} // namespace cli
} // namespace posenc
