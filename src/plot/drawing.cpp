#include "plot/drawing.h"

#include "io/file_output.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

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

namespace draw {

namespace {

const Colour kInk{0.1, 0.1, 0.1};

void set_colour(cairo_t* cr, const Colour& c) {
  cairo_set_source_rgb(cr, c[0], c[1], c[2]);
}

void use_font(cairo_t* cr, double size) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

// The horizontal advance of `s` in the figures' font at `size` pixels.
double text_width(cairo_t* cr, const std::string& s, double size) {
  cairo_save(cr);
  use_font(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_restore(cr);
  return e.x_advance;
}

void tick_mark(cairo_t* cr, double x0, double y0, double x1, double y1) {
  cairo_move_to(cr, x0, y0);
  cairo_line_to(cr, x1, y1);
  cairo_stroke(cr);
}

// The major tick values of an axis, and (log scales) the unlabelled minor ones.
void axis_ticks(const Axis& a, std::vector<double>& major, std::vector<double>& minor) {
  const double lo = std::min(a.lo, a.hi);
  const double hi = std::max(a.lo, a.hi);
  if (!a.log) {
    major = ticks(lo, hi);
    return;
  }
  for (double decade = std::floor(std::log10(lo)); decade <= std::ceil(std::log10(hi)); ++decade) {
    for (int m = 1; m < 10; ++m) {
      const double v = m * std::pow(10.0, decade);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) {
        (m == 1 ? major : minor).push_back(v);
      }
    }
  }
}

// Position of v along an axis as a fraction of its length from `lo`.
double fraction(const Axis& a, double v) {
  return a.log ? (std::log10(v) - std::log10(a.lo)) / (std::log10(a.hi) - std::log10(a.lo))
               : (v - a.lo) / (a.hi - a.lo);
}

} // namespace

Colour line_colour(size_t i) {
  static const Colour tab10[10] = {
      {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
      {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498},
      {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812}};
  return tab10[i % 10];
}

Surface canvas(int width, int height, Context& cr) {
  TORCH_CHECK(width >= 200 && height >= 200,
              "plot: figures need at least 200 x 200 pixels, but got ", width, " x ", height);
  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height),
                  &cairo_surface_destroy);
  TORCH_CHECK(cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS,
              "plot: cannot make a ", width, " x ", height, " figure: ",
              cairo_status_to_string(cairo_surface_status(surface.get())));
  cr = Context(cairo_create(surface.get()), &cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  return surface;
}

void text(cairo_t* cr, const std::string& s, double x, double y, double size, double align_x,
          double align_y, double angle) {
  cairo_save(cr);
  use_font(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -e.x_bearing - align_x * e.width, -e.y_bearing - align_y * e.height);
  set_colour(cr, kInk);
  cairo_show_text(cr, s.c_str());
  cairo_restore(cr);
}

std::vector<double> ticks(double lo, double hi, int count) {
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

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", v);
  return buffer;
}

std::string label(double v) {
  char buffer[32];
  if (std::fabs(v) >= 1e4) {
    std::snprintf(buffer, sizeof(buffer), "%.3g", v); // "1e+04", "1.5e+04"
    std::string s(buffer);
    const size_t e = s.find("e+");
    return e == std::string::npos
               ? s
               : s.substr(0, e) + "e" + std::to_string(std::stoi(s.substr(e + 2)));
  }
  std::snprintf(buffer, sizeof(buffer), std::fabs(v - std::round(v)) < 1e-9 ? "%.0f" : "%.1f", v);
  return buffer;
}

double x_pixel(const Rect& r, const Axis& x, double v) {
  return r.x + fraction(x, v) * r.w;
}

double y_pixel(const Rect& r, const Axis& y, double v) {
  const double f = fraction(y, v);
  return y.flipped ? r.y + f * r.h : r.y + r.h - f * r.h;
}

void axes(cairo_t* cr, const Rect& r, const Axis& x, const Axis& y) {
  set_colour(cr, kInk);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cr);
  std::vector<double> major, minor;
  axis_ticks(x, major, minor);
  for (const double v : minor) {
    const double px = x_pixel(r, x, v);
    tick_mark(cr, px, r.y + r.h, px, r.y + r.h + 3);
  }
  for (const double v : major) {
    const double px = x_pixel(r, x, v);
    tick_mark(cr, px, r.y + r.h, px, r.y + r.h + 5);
    text(cr, label(v), px, r.y + r.h + 8, x.font, 0.5, 0.0);
  }
  major.clear();
  minor.clear();
  axis_ticks(y, major, minor);
  double widest = 0; // of the y tick labels, to keep the axis label clear of them
  for (const double v : minor) {
    const double py = y_pixel(r, y, v);
    tick_mark(cr, r.x - 3, py, r.x, py);
  }
  for (const double v : major) {
    const double py = y_pixel(r, y, v);
    tick_mark(cr, r.x - 5, py, r.x, py);
    text(cr, label(v), r.x - 8, py, y.font, 1.0, 0.5);
    widest = std::max(widest, text_width(cr, label(v), y.font));
  }
  if (!x.label.empty()) {
    text(cr, x.label, r.x + r.w / 2, r.y + r.h + 12 + 1.3 * x.font, x.font + 2, 0.5, 0.0);
  }
  if (!y.label.empty()) {
    text(cr, y.label, r.x - 16 - widest - 0.6 * y.font, r.y + r.h / 2, y.font + 2, 0.5, 0.5,
         -M_PI / 2);
  }
}

void heatmap(cairo_t* cr, const at::Tensor& matrix, const Rect& r, double lo, double hi) {
  const at::Tensor m = matrix.to(at::kDouble).contiguous();
  const int rows = static_cast<int>(m.size(0));
  const int cols = static_cast<int>(m.size(1));
  Surface image(cairo_image_surface_create(CAIRO_FORMAT_RGB24, cols, rows), &cairo_surface_destroy);
  // (cairo refuses images wider or taller than 32767 pixels with an error surface without data)
  TORCH_CHECK(cairo_surface_status(image.get()) == CAIRO_STATUS_SUCCESS,
              "plot: cannot draw a ", rows, " x ", cols, " heatmap: ",
              cairo_status_to_string(cairo_surface_status(image.get())),
              "; draw at most 32767 rows and columns");
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
  set_colour(cr, kInk);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cr);
  for (const double v : ticks(lo, hi, 5)) {
    const double py = r.y + r.h - (v - lo) / (hi - lo) * r.h;
    tick_mark(cr, r.x + r.w, py, r.x + r.w + 5, py);
    text(cr, label(v), r.x + r.w + 8, py, 12, 0.0, 0.5);
  }
  text(cr, name, r.x + r.w + 52, r.y + r.h / 2, 14, 0.5, 0.5, -M_PI / 2);
}

void polyline(cairo_t* cr, const Rect& r, const Axis& x, const Axis& y,
              const std::vector<double>& xs, const std::vector<double>& ys, const Colour& colour,
              double width, bool dashed) {
  TORCH_CHECK(xs.size() == ys.size(), "plot: a line needs as many x as y values, but got ",
              xs.size(), " and ", ys.size());
  cairo_save(cr);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_clip(cr);
  set_colour(cr, colour);
  cairo_set_line_width(cr, width);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  if (dashed) {
    const double dash[] = {8.0, 5.0};
    cairo_set_dash(cr, dash, 2, 0.0);
  }
  for (size_t k = 0; k < xs.size(); ++k) {
    const double px = x_pixel(r, x, xs[k]);
    const double py = y_pixel(r, y, ys[k]);
    k == 0 ? cairo_move_to(cr, px, py) : cairo_line_to(cr, px, py);
  }
  cairo_stroke(cr);
  cairo_restore(cr);
}

void legend(cairo_t* cr, double x, double y, const std::vector<LegendEntry>& entries, double font) {
  const double row = 1.5 * font;
  const double sample = 2.2 * font; // length of the line sample
  double widest = 0;
  for (const auto& entry : entries) {
    widest = std::max(widest, text_width(cr, entry.label, font));
  }
  cairo_save(cr);
  const double pad = 0.6 * font;
  const Rect box{x, y, pad * 3 + sample + widest, pad * 2 + row * entries.size()};
  cairo_rectangle(cr, box.x, box.y, box.w, box.h);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_fill_preserve(cr);
  set_colour(cr, {0.6, 0.6, 0.6});
  cairo_set_line_width(cr, 1.0);
  cairo_stroke(cr);
  for (size_t i = 0; i < entries.size(); ++i) {
    const double cy = y + pad + row * (i + 0.5);
    set_colour(cr, entries[i].colour);
    cairo_set_line_width(cr, entries[i].width);
    if (entries[i].dashed) {
      const double dash[] = {6.0, 4.0};
      cairo_set_dash(cr, dash, 2, 0.0);
    }
    tick_mark(cr, x + pad, cy, x + pad + sample, cy);
    cairo_set_dash(cr, nullptr, 0, 0.0);
    text(cr, entries[i].label, x + 2 * pad + sample, cy, font, 0.0, 0.5);
  }
  cairo_restore(cr);
}

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
  io::write_file_safely(path, bytes, "plot");
}

} // namespace draw
} // namespace plot
} // namespace posenc
