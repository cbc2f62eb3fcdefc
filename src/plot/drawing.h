#pragma once

// The drawing primitives that posenc's figures are made of (cairo): a white canvas, text, axes
// with linear or logarithmic scales, images in the viridis colour map with a colour bar, polylines,
// a legend, and writing the PNG. Figures compose these; none of them knows about encodings.

#include <ATen/core/Tensor.h>

#include <cairo.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace posenc {
namespace plot {

/// The viridis colour map at t in [0, 1] as 8-bit RGB (clamped outside).
std::array<uint8_t, 3> viridis(double t);

namespace draw {

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using Context = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

/// A rectangle in pixels, (x, y) its top-left corner.
struct Rect {
  double x, y, w, h;
};

/// An RGB colour, each channel in [0, 1].
using Colour = std::array<double, 3>;

/// The i-th of ten distinct line colours (matplotlib's tab10), cycling.
Colour line_colour(size_t i);

/// One axis of a plot: values `lo` .. `hi` mapped onto the rectangle's side.
struct Axis {
  double lo, hi;
  /// Drawn along the axis; empty: none.
  std::string label;
  /// A log10 scale (lo, hi > 0): ticks at the powers of ten, unlabelled minor ticks between.
  bool log = false;
  /// y only: `lo` at the top (image rows) instead of the bottom.
  bool flipped = false;
  /// Pixel size of the tick labels.
  double font = 12.0;
};

/// A white `width` x `height` canvas and its drawing context; throws c10::Error below 200 x 200.
Surface canvas(int width, int height, Context& cr);

/// `s` at (x, y), aligned by `align_x`, `align_y` in [0, 1] (0: left/top, 1: right/bottom),
/// rotated by `angle` radians about (x, y).
void text(cairo_t* cr, const std::string& s, double x, double y, double size, double align_x,
          double align_y, double angle = 0.0);

/// About `count` tick values between lo and hi, steps of 1, 2 or 5 times a power of ten.
std::vector<double> ticks(double lo, double hi, int count = 6);

/// `v` in printf's "%g" (6 significant digits, no trailing zeros): "8", "0.5", "500000", "1e+06".
std::string number(double v);

/// Tick label: integers without decimals, powers of ten from 1e4 on as "1e4".
std::string label(double v);

/// The pixel of value `v` on the x axis / y axis of `r`.
double x_pixel(const Rect& r, const Axis& x, double v);
double y_pixel(const Rect& r, const Axis& y, double v);

/// The box of `r` with ticks, tick labels and axis labels for `x` and `y`.
void axes(cairo_t* cr, const Rect& r, const Axis& x, const Axis& y);

/// `matrix` `[rows, cols]` as an image filling `r` (row 0 at the top), viridis over [lo, hi].
void heatmap(cairo_t* cr, const at::Tensor& matrix, const Rect& r, double lo, double hi);

/// A vertical viridis colour bar over [lo, hi] in `r`, with ticks and the label `name`.
void colour_bar(cairo_t* cr, const Rect& r, double lo, double hi, const std::string& name);

/// The line through (xs[k], ys[k]) in the axes `x`, `y` of `r`, clipped to `r`.
void polyline(cairo_t* cr, const Rect& r, const Axis& x, const Axis& y,
              const std::vector<double>& xs, const std::vector<double>& ys, const Colour& colour,
              double width, bool dashed = false);

/// One entry of a legend: a line sample and its label.
struct LegendEntry {
  std::string label;
  Colour colour;
  double width = 2.0;
  bool dashed = false;
};

/// A legend box with its top-left corner at (x, y) (white background, framed).
void legend(cairo_t* cr, double x, double y, const std::vector<LegendEntry>& entries,
            double font = 13.0);

/// Encodes the PNG in memory, then writes it with every error checked (cairo's own file writer
/// does not report a failed flush: a full disk gave a truncated file and success).
void save(cairo_surface_t* surface, const std::string& path);

} // namespace draw
} // namespace plot
} // namespace posenc
