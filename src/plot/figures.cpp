#include "plot/figures.h"

#include "plot/drawing.h"

#include <posenc/functional/positional_encoding.h>
#include <posenc/functional/rotary_embedding.h>
#include <posenc/functional/vision.h>

#include <ATen/ops/matmul.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include <sys/stat.h>

namespace posenc {
namespace plot {

using draw::axes;
using draw::Axis;
using draw::canvas;
using draw::Colour;
using draw::colour_bar;
using draw::Context;
using draw::heatmap;
using draw::legend;
using draw::LegendEntry;
using draw::polyline;
using draw::Rect;
using draw::save;
using draw::Surface;
using draw::text;

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

void check_table(const at::Tensor& table) {
  TORCH_CHECK(table.defined() && table.dim() == 2 && table.size(0) >= 2 && table.size(1) >= 1,
              "plot: expected a [positions, dimensions] table with at least 2 positions, but got ",
              table.defined() ? table.sizes() : at::IntArrayRef{});
}

} // namespace

void write_encoding_heatmap(const at::Tensor& table, const std::string& path, int width,
                            int height) {
  check_table(table);
  Context cr(nullptr, &cairo_destroy);
  Surface surface = canvas(width, height, cr);
  const Rect plot{80, 50, width - 230.0, height - 110.0};
  heatmap(cr.get(), table, plot, -1.0, 1.0);
  axes(cr.get(), plot, {0, static_cast<double>(table.size(1)), "embedding dimension i"},
       {0, static_cast<double>(table.size(0)), "position pos", false, /*flipped=*/true});
  colour_bar(cr.get(), {plot.x + plot.w + 30, plot.y, 20, plot.h}, -1.0, 1.0, "PE(pos, i)");
  text(cr.get(),
       "Sinusoidal positional encoding (" + std::to_string(table.size(0)) + " positions x " +
           std::to_string(table.size(1)) + " dimensions)",
       width / 2.0, 16, 16, 0.5, 0.0);
  save(surface.get(), path);
}

void write_similarity_figure(const at::Tensor& table, const std::string& path, int width,
                             int height) {
  check_table(table);
  const at::Tensor pe = table.to(at::kDouble);
  const at::Tensor similarity = at::matmul(pe, pe.t()); // [P, P]
  const int64_t positions = pe.size(0);
  const double top = similarity.max().item<double>();
  const double bottom = similarity.min().item<double>();
  Context cr(nullptr, &cairo_destroy);
  Surface surface = canvas(width, height, cr);
  text(cr.get(), "Dot products between positions: they depend only on the distance", width / 2.0,
       14, 16, 0.5, 0.0);

  // Left: the matrix PE(p) . PE(q).
  const double side = std::min(height - 110.0, width * 0.42);
  const Rect left{80, 50, side, side};
  heatmap(cr.get(), similarity, left, bottom, top);
  axes(cr.get(), left, {0, static_cast<double>(positions), "position q"},
       {0, static_cast<double>(positions), "position p", false, /*flipped=*/true});
  colour_bar(cr.get(), {left.x + left.w + 20, left.y, 16, left.h}, bottom, top, "PE(p) . PE(q)");

  // Right: PE(p) . PE(p + k) against k, for several p.
  const Rect right{left.x + left.w + 210, 50, width - (left.x + left.w + 210) - 30, side};
  const int64_t span = positions / 2;
  const Axis distance{0, static_cast<double>(span), "distance k"};
  const Axis dot{bottom, top, "PE(p) . PE(p + k)"};
  axes(cr.get(), right, distance, dot);
  const Colour colours[4] = {
      {0.27, 0.0, 0.33}, {0.19, 0.41, 0.56}, {0.21, 0.72, 0.47}, {0.99, 0.6, 0.1}};
  const int64_t starts[4] = {0, positions / 8, positions / 4, positions / 2 - 1};
  std::vector<LegendEntry> entries;
  for (int s = 0; s < 4; ++s) {
    const int64_t p = starts[s];
    std::vector<double> ks, values;
    for (int64_t k = 0; k < span && p + k < positions; ++k) {
      ks.push_back(static_cast<double>(k));
      values.push_back(similarity[p][p + k].item<double>());
    }
    const double width = 4.0 - 0.8 * s; // thinner on top, so that coinciding curves stay visible
    polyline(cr.get(), right, distance, dot, ks, values, colours[s], width);
    entries.push_back({"p = " + std::to_string(p), colours[s], width});
  }
  legend(cr.get(), right.x + right.w - 100, right.y + 6, entries, 12);
  save(surface.get(), path);
}

std::vector<int64_t> default_sincos_2d_channels(int64_t embed_dim) {
  TORCH_CHECK(embed_dim >= 4 && embed_dim % 4 == 0,
              "plot: the 2-D sin-cos table needs an embed_dim that is a positive multiple of 4, "
              "but got ",
              embed_dim);
  const int64_t quarter = embed_dim / 4;
  std::vector<int64_t> frequencies{0};
  if (quarter > 1) {
    frequencies.push_back(std::max<int64_t>(1, quarter / 8));
  }
  std::vector<int64_t> channels;
  for (const int64_t half : {int64_t{0}, embed_dim / 2}) { // x, then y
    for (const int64_t k : frequencies) {
      channels.push_back(half + k);           // sin
      channels.push_back(half + quarter + k); // cos
    }
  }
  return channels;
}

std::string sincos_2d_channel_name(int64_t embed_dim, int64_t channel) {
  TORCH_CHECK(channel >= 0 && channel < embed_dim, "plot: channel ", channel,
              " is outside the table's channels [0, ", embed_dim, "); choose channels below ",
              embed_dim);
  const int64_t quarter = embed_dim / 4;
  const int64_t within = channel % (2 * quarter);
  return "ch " + std::to_string(channel) + ": " + (within < quarter ? "sin" : "cos") + "(w_" +
         std::to_string(within % quarter) + " " + (channel < 2 * quarter ? "x" : "y") + ")";
}

void write_sincos_2d_figure(const Sincos2dTableOptions& options,
                            const std::vector<int64_t>& channels, const std::string& path,
                            int panel) {
  TORCH_CHECK(!channels.empty() && channels.size() <= kMaxSincos2dChannels,
              "plot: the 2-D sin-cos figure shows 1 to ", kMaxSincos2dChannels,
              " channels (one panel each), but got ", channels.size());
  TORCH_CHECK(panel >= 40 && panel <= 1000, "plot: panels must be 40 to 1000 pixels, but got ",
              panel);
  const int64_t embed_dim = options.embed_dim();
  std::vector<std::string> names;
  for (const int64_t channel : channels) {
    names.push_back(sincos_2d_channel_name(embed_dim, channel)); // checks the channel
  }
  Sincos2dTableOptions grid_only = options;
  grid_only.cls_token(false).extra_tokens(0);
  const at::Tensor table = functional::sincos_2d_table(grid_only); // [H * W, D]
  const auto& size = options.grid_size();
  const int64_t rows_h = size[0];
  const int64_t cols_w = size.size() == 2 ? size[1] : size[0];
  const double longer = static_cast<double>(std::max(rows_h, cols_w));
  const double pw = panel * cols_w / longer;
  const double ph = panel * rows_h / longer;

  const int n = static_cast<int>(channels.size());
  const int per_row = std::min(n, 4);
  const int rows = (n + per_row - 1) / per_row;
  const int width = std::max(600, per_row * (panel + 50) + 130); // 600: room for the caption
  const int height = 70 + rows * (panel + 60) + 10;
  Context cr(nullptr, &cairo_destroy);
  Surface surface = canvas(width, height, cr);
  const std::string scale = draw::number(options.interpolation_scale());
  text(cr.get(),
       "2-D sin-cos table (" + std::to_string(rows_h) + " x " + std::to_string(cols_w) +
           " patches, embed_dim " + std::to_string(embed_dim) + ")",
       width / 2.0, 12, 16, 0.5, 0.0);
  text(cr.get(),
       "x = j * " + std::to_string(options.base_size()) + " / " + std::to_string(cols_w) + " / " +
           scale + " (column j),  y = i * " + std::to_string(options.base_size()) + " / " +
           std::to_string(rows_h) + " / " + scale + " (row i),  w_k = 10000^(-k / " +
           std::to_string(embed_dim / 4) + ")",
       width / 2.0, 36, 12, 0.5, 0.0);
  const Axis x{0, static_cast<double>(cols_w), "", false, false, 10};
  const Axis y{0, static_cast<double>(rows_h), "", false, /*flipped=*/true, 10};
  for (int p = 0; p < n; ++p) {
    const Rect r{50.0 + (p % per_row) * (panel + 50.0), 70.0 + 24 + (p / per_row) * (panel + 60.0),
                 pw, ph};
    const at::Tensor values =
        table.select(1, channels[static_cast<size_t>(p)]).view({rows_h, cols_w});
    heatmap(cr.get(), values, r, -1.0, 1.0);
    axes(cr.get(), r, x, y);
    text(cr.get(), names[static_cast<size_t>(p)], r.x + pw / 2, r.y - 6, 13, 0.5, 1.0);
  }
  const double bar_x = 50.0 + per_row * (panel + 50.0) - 20;
  colour_bar(cr.get(), {bar_x, 94, 16, rows * (panel + 60.0) - 60}, -1.0, 1.0, "value");
  save(surface.get(), path);
}

std::vector<Spectrum> rope_spectra(const RopeSpectrumOptions& options) {
  namespace F = functional;
  const double context = options.factor * static_cast<double>(options.original_max_len);
  TORCH_CHECK(context >= 1.0 && context < 9.0e15, "plot: the extended context factor * "
              "original_max_len = ", options.factor, " * ", options.original_max_len,
              " must lie in [1, 9e15); lower --rope-factor or --original-max-len");
  const auto extended = static_cast<int64_t>(std::llround(context));
  const std::string factor = draw::number(options.factor);
  const std::pair<RopeType, std::string> variants[] = {
      {RopeType::kDefault, "default"},
      {RopeType::kLinear, "linear (factor " + factor + ")"},
      {RopeType::kYarn, "YaRN (factor " + factor + ", beta 32 / 1)"},
      {RopeType::kLlama3, "LLaMA 3 (factor " + factor + ", low 1, high 4)"}};
  std::vector<Spectrum> spectra;
  for (const auto& variant : variants) {
    auto scaling = RopeScalingOptions(variant.first);
    if (variant.first != RopeType::kDefault) {
      scaling.factor(options.factor)
          .max_position_embeddings(std::max<int64_t>(1, extended))
          .original_max_position_embeddings(options.original_max_len);
    }
    const at::Tensor inv_freq = F::rotary_inv_freq(
        options.head_dim, F::RotaryTablesFuncOptions().base(options.theta).scaling(scaling));
    Spectrum spectrum{variant.second, {}};
    for (int64_t i = 0; i < inv_freq.numel(); ++i) {
      spectrum.wavelengths.push_back(kTwoPi / inv_freq[i].item<double>());
    }
    spectra.push_back(std::move(spectrum));
  }
  return spectra;
}

void write_spectrum_figure(const std::vector<Spectrum>& spectra, double context_length,
                           const std::string& title, const std::string& path, int width,
                           int height) {
  TORCH_CHECK(!spectra.empty() && !spectra.front().wavelengths.empty(),
              "plot: a spectrum figure needs at least one spectrum with at least one wavelength");
  const size_t pairs = spectra.front().wavelengths.size();
  double lowest = context_length;
  double highest = context_length;
  for (const Spectrum& spectrum : spectra) {
    TORCH_CHECK(spectrum.wavelengths.size() == pairs,
                "plot: every spectrum needs one wavelength per pair (", pairs, "), but '",
                spectrum.name, "' has ", spectrum.wavelengths.size());
    for (const double wavelength : spectrum.wavelengths) {
      TORCH_CHECK(std::isfinite(wavelength) && wavelength > 0, "plot: the wavelengths of '",
                  spectrum.name, "' must be finite numbers > 0, but hold ", wavelength);
      lowest = std::min(lowest, wavelength);
      highest = std::max(highest, wavelength);
    }
  }
  TORCH_CHECK(std::isfinite(context_length) && context_length > 0,
              "plot: the context length must be a finite number > 0, but got ", context_length);
  Context cr(nullptr, &cairo_destroy);
  Surface surface = canvas(width, height, cr);
  text(cr.get(), title, width / 2.0, 14, 16, 0.5, 0.0);
  const Rect r{90, 50, width - 120.0, height - 110.0};
  const Axis x{0, std::max(1.0, static_cast<double>(pairs - 1)), "frequency pair i"};
  const Axis y{std::pow(10.0, std::floor(std::log10(lowest))),
               std::pow(10.0, std::ceil(std::log10(highest) + 1e-9)),
               "wavelength 2 pi / inv_freq (positions)", /*log=*/true};
  axes(cr.get(), r, x, y);
  std::vector<double> xs(pairs);
  for (size_t i = 0; i < pairs; ++i) {
    xs[i] = static_cast<double>(i);
  }
  std::vector<LegendEntry> entries;
  const Colour grey{0.45, 0.45, 0.45};
  draw::polyline(cr.get(), r, x, y, {x.lo, x.hi}, {context_length, context_length}, grey, 1.5,
                 /*dashed=*/true);
  for (size_t s = 0; s < spectra.size(); ++s) {
    // Thinner on top, so that coinciding lines stay visible.
    const double line_width = std::max(1.5, 5.0 - 1.1 * static_cast<double>(s));
    polyline(cr.get(), r, x, y, xs, spectra[s].wavelengths, draw::line_colour(s), line_width);
    entries.push_back({spectra[s].name, draw::line_colour(s), line_width});
  }
  entries.push_back(
      {"original context (" + draw::number(context_length) + ")", grey, 1.5, /*dashed=*/true});
  legend(cr.get(), r.x + 12, r.y + 12, entries);
  save(surface.get(), path);
}

void write_rope_spectrum_figure(const RopeSpectrumOptions& options, const std::string& path,
                                int width, int height) {
  const std::string title = "RoPE wavelength per frequency pair (head_dim " +
                            std::to_string(options.head_dim) + ", theta " +
                            draw::number(options.theta) + ", original context " +
                            std::to_string(options.original_max_len) + ")";
  write_spectrum_figure(rope_spectra(options), static_cast<double>(options.original_max_len), title,
                        path, width, height);
}

void make_directories(const std::string& directory) {
  TORCH_CHECK(!directory.empty(), "plot: the output directory must not be empty; give a path");
  // Each prefix ending before a '/', then the whole path.
  for (size_t end = directory.find('/', 1);; end = directory.find('/', end + 1)) {
    const std::string prefix = directory.substr(0, end);
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
      TORCH_CHECK(false, "plot: cannot create the directory '", prefix, "' (", std::strerror(errno),
                  "); choose a writable output directory");
    }
    if (end == std::string::npos) {
      break;
    }
  }
  struct stat info {};
  TORCH_CHECK(::stat(directory.c_str(), &info) == 0 && S_ISDIR(info.st_mode), "plot: '", directory,
              "' exists but is not a directory; choose another output directory");
}

std::vector<std::string> write_encoding_figures(const std::string& directory, int64_t max_len,
                                                int64_t d_model) {
  make_directories(directory);
  const at::Tensor table = functional::sinusoidal_table(max_len, d_model);
  const std::string heatmap_path = directory + "/positional_encoding.png";
  const std::string similarity_path = directory + "/position_similarity.png";
  write_encoding_heatmap(table, heatmap_path);
  write_similarity_figure(table, similarity_path);
  return {heatmap_path, similarity_path};
}

} // namespace plot
} // namespace posenc
