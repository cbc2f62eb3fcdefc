#pragma once

// PNG figures of posenc's encodings, drawn with cairo (the primitives are in plot/drawing.h): the
// sinusoidal table and the similarity between its positions, the channels of diffusers' 2-D
// sin-cos table, and the wavelengths of RoPE's scaling variants.

#include <posenc/options/vision.h>

#include <ATen/core/Tensor.h>

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

/// The channels a 2-D sin-cos figure shows by default for `embed_dim` (a multiple of 4): for each
/// half of the table (x, then y), sin and cos of the frequencies k = 0 and k = (embed_dim / 4) / 8
/// (at least 1; only k = 0 when embed_dim is 4).
std::vector<int64_t> default_sincos_2d_channels(int64_t embed_dim);

/// What channel `channel` of diffusers' 2-D table of width `embed_dim` encodes, e.g.
/// "ch 18: cos(w_2 x)" (x: the column coordinate, first half; y: the row coordinate, second half;
/// w_k = 10000^(-k / (embed_dim / 4))).
std::string sincos_2d_channel_name(int64_t embed_dim, int64_t channel);

/// The largest number of channels (panels) a 2-D sin-cos figure shows.
constexpr size_t kMaxSincos2dChannels = 32;

/// One panel per channel of `channels` of the 2-D sin-cos table of `table` (functional::
/// sincos_2d_table; no class tokens): the channel's value over the H x W patch grid (row i down,
/// column j across), viridis over [-1, 1], titled with sincos_2d_channel_name; four panels a row,
/// each `panel` pixels on its longer side, and a colour bar. The image is
/// `max(600, min(n, 4) * (panel + 50) + 130)` x `70 + rows * (panel + 60) + 10` pixels for n
/// channels.
/// Throws c10::Error for invalid table options, no channels, more than kMaxSincos2dChannels, or a
/// channel outside [0, embed_dim).
void write_sincos_2d_figure(const Sincos2dTableOptions& table, const std::vector<int64_t>& channels,
                            const std::string& path, int panel = 180);

/// The RoPE configuration whose spectrum is drawn (defaults: LLaMA 3.1's).
struct RopeSpectrumOptions {
  int64_t head_dim = 128;
  double theta = 500000.0;
  /// The context extension factor of the linear, YaRN and LLaMA 3 variants.
  double factor = 8.0;
  /// The pre-training context length (YaRN's and LLaMA 3's original_max_position_embeddings).
  int64_t original_max_len = 8192;
};

/// One line of a spectrum: a name and one wavelength (in positions) per frequency pair.
struct Spectrum {
  std::string name;
  std::vector<double> wavelengths;
};

/// The wavelengths 2 pi / inv_freq (functional::rotary_inv_freq) of default, linear, YaRN and
/// LLaMA 3 RoPE (low_freq_factor 1, high_freq_factor 4) for `options`, in that order; the
/// extended context is round(factor * original_max_len).
std::vector<Spectrum> rope_spectra(const RopeSpectrumOptions& options);

/// Wavelength against frequency pair index, one line per spectrum (log-scale y, legend), and a
/// dashed horizontal line at `context_length`. Throws c10::Error without spectra, for spectra of
/// different lengths or without pairs, or for wavelengths that are not finite and > 0.
void write_spectrum_figure(const std::vector<Spectrum>& spectra, double context_length,
                           const std::string& title, const std::string& path, int width = 1000,
                           int height = 560);

/// write_spectrum_figure of rope_spectra(options), the line at original_max_len.
void write_rope_spectrum_figure(const RopeSpectrumOptions& options, const std::string& path,
                                int width = 1000, int height = 560);

} // namespace plot
} // namespace posenc
