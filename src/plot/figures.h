#pragma once

// PNG figures of the sinusoidal encoding, drawn with cairo.

#include <ATen/core/Tensor.h>

#include <array>

#include <cstdint>
#include <string>
#include <vector>

namespace posenc {
namespace plot {

/// Heatmap of a `[positions, dimensions]` table: dimension on x, position on y (position 0 at the
/// top), viridis colours over [-1, 1], colour bar, axis labels and title. Throws c10::Error if the
/// file cannot be written.
void write_encoding_heatmap(const at::Tensor& table, const std::string& path, int width = 1000,
                            int height = 540);

/// Two panels: the matrix of dot products PE(p) . PE(q), and the curves PE(p) . PE(p + k) against
/// the distance k for several starting positions p, which coincide: the similarity of two
/// positions depends only on their distance.
void write_similarity_figure(const at::Tensor& table, const std::string& path, int width = 1200,
                             int height = 500);

/// Both figures of the `[max_len, d_model]` sinusoidal table, written into `directory` as
/// positional_encoding.png and position_similarity.png. Returns the paths.
std::vector<std::string> write_encoding_figures(const std::string& directory, int64_t max_len,
                                                int64_t d_model);

/// Creates `directory` and its missing parents, like `mkdir -p`; throws c10::Error if it cannot.
/// (POSIX calls, not std::filesystem: pip's LibTorch exports broken copies of std::filesystem's
/// symbols that a program linked with it would call, pytorch/pytorch#133437.)
void make_directories(const std::string& directory);

/// The viridis colour map at t in [0, 1] as 8-bit RGB (clamped outside).
std::array<uint8_t, 3> viridis(double t);

} // namespace plot
} // namespace posenc
