#include "plot/figures.h"

#include "cli/output.h"

#include <posenc/functional/positional_encoding.h>

#include <ATen/ops/matmul.h>
#include <c10/util/Exception.h>

#include <cairo.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <sys/stat.h>

namespace posenc {
namespace plot {

std::array<uint8_t, 3> viridis(double t) {
  // matplotlib's viridis at t = 0, 1/9, ..., 1, interpolated linearly in RGB.
  static const uint8_t anchors[10][3] = {{0x44, 0x01, 0x54}, {0x48, 0x28, 0x78}, {0x3e, 0x49, 0x89},
                                         {0x31, 0x68, 0x8e}, {0x26, 0x82, 0x8e}, {0x1f, 0x9e, 0x89},
                                         {0x35, 0xb7, 0x79}, {0x6e, 0xce, 0x58}, {0xb5, 0xde, 0x2b},
                                         {0xfd, 0xe7, 0x25}};
  const double x = std::min(1.0, std::max(0.0, std::isnan(t) ? 0.0 : t)) * 9.0;
  const int i = std::min(8, static_cast<int>(x));
  const double f = x - i;
  std::array<uint8_t, 3> rgb{};
  for (int c = 0; c < 3; ++c) {
    rgb[static_cast<size_t>(c)] =
        static_cast<uint8_t>(std::lround(anchors[i][c] + f * (anchors[i + 1][c] - anchors[i][c])));
  }
  return rgb;
}

namespace {

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using Context = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

struct Rect {
  double x, y, w, h;
};

// Tick values between lo and hi, steps of 1, 2 or 5 times a power of ten, about `count` of them.
std::vector<double> ticks(double lo, double hi, int count = 6) {
  const double raw = (hi - lo) / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  }
  std::vector<double> values;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    values.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return values;
}

std::string label(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), std::fabs(v - std::round(v)) < 1e-9 ? "%.0f" : "%.1f", v);
  return buffer;
}

void text(cairo_t* cr, const std::string& s, double x, double y, double size, double align_x,
          double align_y, double angle = 0.0) {
  cairo_save(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -e.x_bearing - align_x * e.width, -e.y_bearing - align_y * e.height);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  cairo_show_text(cr, s.c_str());
  cairo_restore(cr);
}

// Axes box with ticks and labels for x in [x0, x1] and y in [y0, y1] (y0 at the top when flipped).
void axes(cairo_t* cr, const Rect& r, double x0, double x1, double y0, double y1, bool y_down,
          const std::string& xlabel, const std::string& ylabel) {
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cr);
  for (const double v : ticks(x0, x1)) {
    const double px = r.x + (v - x0) / (x1 - x0) * r.w;
    cairo_move_to(cr, px, r.y + r.h);
    cairo_line_to(cr, px, r.y + r.h + 5);
    cairo_stroke(cr);
    text(cr, label(v), px, r.y + r.h + 8, 12, 0.5, 0.0);
  }
  for (const double v : ticks(std::min(y0, y1), std::max(y0, y1))) {
    const double f = (v - y0) / (y1 - y0);
    const double py = y_down ? r.y + f * r.h : r.y + r.h - f * r.h;
    cairo_move_to(cr, r.x - 5, py);
    cairo_line_to(cr, r.x, py);
    cairo_stroke(cr);
    text(cr, label(v), r.x - 8, py, 12, 1.0, 0.5);
  }
  text(cr, xlabel, r.x + r.w / 2, r.y + r.h + 28, 14, 0.5, 0.0);
  text(cr, ylabel, r.x - 52, r.y + r.h / 2, 14, 0.5, 0.5, -M_PI / 2);
}

// matrix [rows, cols] as an image in r, colours over [lo, hi].
void heatmap(cairo_t* cr, const at::Tensor& matrix, const Rect& r, double lo, double hi) {
  const at::Tensor m = matrix.to(at::kDouble).contiguous();
  const int rows = static_cast<int>(m.size(0));
  const int cols = static_cast<int>(m.size(1));
  Surface image(cairo_image_surface_create(CAIRO_FORMAT_RGB24, cols, rows), &cairo_surface_destroy);
  cairo_surface_flush(image.get());
  unsigned char* data = cairo_image_surface_get_data(image.get());
  const int stride = cairo_image_surface_get_stride(image.get());
  const double* values = m.data_ptr<double>();
  for (int y = 0; y < rows; ++y) {
    auto* row = reinterpret_cast<uint32_t*>(data + y * stride);
    for (int x = 0; x < cols; ++x) {
      const auto c = viridis((values[y * cols + x] - lo) / (hi - lo));
      row[x] = (uint32_t{c[0]} << 16) | (uint32_t{c[1]} << 8) | uint32_t{c[2]};
    }
  }
  cairo_surface_mark_dirty(image.get());
  cairo_save(cr);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_clip(cr);
  cairo_translate(cr, r.x, r.y);
  cairo_scale(cr, r.w / cols, r.h / rows);
  cairo_set_source_surface(cr, image.get(), 0, 0);
  cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
  cairo_paint(cr);
  cairo_restore(cr);
}

void colour_bar(cairo_t* cr, const Rect& r, double lo, double hi, const std::string& name) {
  for (int i = 0; i < static_cast<int>(r.h); ++i) {
    const auto c = viridis(1.0 - i / r.h);
    cairo_set_source_rgb(cr, c[0] / 255.0, c[1] / 255.0, c[2] / 255.0);
    cairo_rectangle(cr, r.x, r.y + i, r.w, 1.0);
    cairo_fill(cr);
  }
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cr);
  for (const double v : ticks(lo, hi, 5)) {
    const double py = r.y + r.h - (v - lo) / (hi - lo) * r.h;
    cairo_move_to(cr, r.x + r.w, py);
    cairo_line_to(cr, r.x + r.w + 5, py);
    cairo_stroke(cr);
    text(cr, label(v), r.x + r.w + 8, py, 12, 0.0, 0.5);
  }
  text(cr, name, r.x + r.w + 52, r.y + r.h / 2, 14, 0.5, 0.5, -M_PI / 2);
}

Surface canvas(int width, int height, Context& cr) {
  TORCH_CHECK(width >= 200 && height >= 200,
              "plot: figures need at least 200 x 200 pixels, but got ", width, " x ", height);
  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height),
                  &cairo_surface_destroy);
  cr = Context(cairo_create(surface.get()), &cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  return surface;
}

// Encodes the PNG in memory, then writes it with every error checked (cairo's own file writer
// does not report a failed flush: a full disk gave a truncated file and success).
void save(cairo_surface_t* surface, const std::string& path) {
  std::string bytes;
  const cairo_status_t status = cairo_surface_write_to_png_stream(
      surface,
      [](void* closure, const unsigned char* data, unsigned int length) {
        static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
        return CAIRO_STATUS_SUCCESS;
      },
      &bytes);
  TORCH_CHECK(status == CAIRO_STATUS_SUCCESS, "plot: cannot encode '", path,
              "': ", cairo_status_to_string(status));
  cli::write_file(path, bytes);
}

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
  axes(cr.get(), plot, 0, static_cast<double>(table.size(1)), 0, static_cast<double>(table.size(0)),
       /*y_down=*/true, "embedding dimension i", "position pos");
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
  axes(cr.get(), left, 0, static_cast<double>(positions), 0, static_cast<double>(positions), true,
       "position q", "position p");
  colour_bar(cr.get(), {left.x + left.w + 20, left.y, 16, left.h}, bottom, top, "PE(p) . PE(q)");

  // Right: PE(p) . PE(p + k) against k, for several p.
  const Rect right{left.x + left.w + 210, 50, width - (left.x + left.w + 210) - 30, side};
  const int64_t span = positions / 2;
  axes(cr.get(), right, 0, static_cast<double>(span), bottom, top, false, "distance k",
       "PE(p) . PE(p + k)");
  const double colours[4][3] = {
      {0.27, 0.0, 0.33}, {0.19, 0.41, 0.56}, {0.21, 0.72, 0.47}, {0.99, 0.6, 0.1}};
  const int64_t starts[4] = {0, positions / 8, positions / 4, positions / 2 - 1};
  for (int s = 0; s < 4; ++s) {
    const int64_t p = starts[s];
    cairo_set_source_rgb(cr.get(), colours[s][0], colours[s][1], colours[s][2]);
    cairo_set_line_width(cr.get(),
                         4.0 - 0.8 * s); // thinner on top, so that coinciding curves stay visible
    for (int64_t k = 0; k < span && p + k < positions; ++k) {
      const double x = right.x + static_cast<double>(k) / static_cast<double>(span) * right.w;
      const double y = right.y + right.h -
                       (similarity[p][p + k].item<double>() - bottom) / (top - bottom) * right.h;
      k == 0 ? cairo_move_to(cr.get(), x, y) : cairo_line_to(cr.get(), x, y);
    }
    cairo_stroke(cr.get());
    const double ly = right.y + 14 + 18.0 * s;
    cairo_move_to(cr.get(), right.x + right.w - 90, ly);
    cairo_line_to(cr.get(), right.x + right.w - 66, ly);
    cairo_stroke(cr.get());
    text(cr.get(), "p = " + std::to_string(p), right.x + right.w - 60, ly, 12, 0.0, 0.5);
  }
  save(surface.get(), path);
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
