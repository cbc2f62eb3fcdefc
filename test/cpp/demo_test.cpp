// The demo (a short version of `posenc demo`) and the figures of `posenc plot`.

#include "demo/reversal.h"
#include "plot/drawing.h"
#include "plot/figures.h"

#include <posenc/posenc.h>

#include "test_util.h"

#include <gtest/gtest.h>

#include <cairo.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

posenc::demo::DemoOptions short_demo() {
  posenc::demo::DemoOptions options;
  options.steps = 250;
  options.held_out = 512;
  options.seed = 3;
  return options;
}

struct Png {
  int width = 0, height = 0;
  cairo_status_t status = CAIRO_STATUS_NULL_POINTER;
  std::array<uint8_t, 3> rgb(int x, int y) const {
    return {pixels[(y * width + x) * 3],
            pixels[(y * width + x) * 3 + 1],
            pixels[(y * width + x) * 3 + 2]};
  }
  std::vector<uint8_t> pixels;
};

// Decodes a PNG with cairo.
Png decode(const std::string& path) {
  Png png;
  cairo_surface_t* surface = cairo_image_surface_create_from_png(path.c_str());
  png.status = cairo_surface_status(surface);
  if (png.status == CAIRO_STATUS_SUCCESS) {
    png.width = cairo_image_surface_get_width(surface);
    png.height = cairo_image_surface_get_height(surface);
    const int stride = cairo_image_surface_get_stride(surface);
    const unsigned char* data = cairo_image_surface_get_data(surface);
    for (int y = 0; y < png.height; ++y) {
      for (int x = 0; x < png.width; ++x) {
        const uint32_t argb = *reinterpret_cast<const uint32_t*>(data + y * stride + 4 * x);
        png.pixels.push_back(static_cast<uint8_t>(argb >> 16));
        png.pixels.push_back(static_cast<uint8_t>(argb >> 8));
        png.pixels.push_back(static_cast<uint8_t>(argb));
      }
    }
  }
  cairo_surface_destroy(surface);
  return png;
}

// A path in the test's temporary directory, unique to this process.
std::string temp_png(const std::string& name) {
  return testing::TempDir() + "posenc_" + name + "_" + std::to_string(::getpid()) + ".png";
}

// Whether `rgb` is within `tolerance` of `colour` (channels in [0, 1]) in every channel.
bool near_colour(const std::array<uint8_t, 3>& rgb, const posenc::plot::draw::Colour& colour,
                 int tolerance) {
  for (int c = 0; c < 3; ++c) {
    if (std::abs(rgb[c] - static_cast<int>(std::lround(colour[c] * 255))) > tolerance) {
      return false;
    }
  }
  return true;
}

// The mean row of the pixels in column `x`, rows [top, bottom), whose colour is `colour`.
double mean_row_of(const Png& png, int x, int top, int bottom,
                   const posenc::plot::draw::Colour& colour) {
  double sum = 0;
  int count = 0;
  for (int y = top; y < bottom; ++y) {
    if (near_colour(png.rgb(x, y), colour, 12)) {
      sum += y;
      ++count;
    }
  }
  return count > 0 ? sum / count : -1.0;
}

} // namespace

// A few hundred steps: the loss falls, and positions beat no positions clearly.
TEST(Demo, ShortTrainingLearnsOnlyWithPositions) {
  const auto options = short_demo();
  const auto none = posenc::demo::train_reversal(posenc::demo::Encoding::kNone, options);
  const auto sinusoidal =
      posenc::demo::train_reversal(posenc::demo::Encoding::kSinusoidal, options);
  EXPECT_LT(sinusoidal.final_loss, 0.8 * sinusoidal.first_loss);
  EXPECT_LT(none.final_loss, none.first_loss);
  EXPECT_GT(sinusoidal.held_out_accuracy, none.held_out_accuracy + 0.2)
      << "sinusoidal " << sinusoidal.held_out_accuracy << " none " << none.held_out_accuracy;
  EXPECT_LE(none.held_out_accuracy, posenc::demo::position_blind_ceiling(options) + 0.03);
}

TEST(Demo, IsDeterministicForASeed) {
  auto options = short_demo();
  options.steps = 30;
  const auto a = posenc::demo::train_reversal(posenc::demo::Encoding::kRotary, options);
  const auto b = posenc::demo::train_reversal(posenc::demo::Encoding::kRotary, options);
  EXPECT_EQ(a.final_loss, b.final_loss);
  EXPECT_EQ(a.held_out_accuracy, b.held_out_accuracy);
}

TEST(Demo, PositionBlindCeilingIsTheMostFrequentOtherToken) {
  posenc::demo::DemoOptions options;
  const double ceiling = posenc::demo::position_blind_ceiling(options, 20000);
  EXPECT_GT(ceiling, 0.13); // 16 tokens over 32: repeats are common
  EXPECT_LT(ceiling, 0.18);
  options.vocab = 1000; // almost no repeats: about 1/15
  EXPECT_NEAR(posenc::demo::position_blind_ceiling(options, 20000), 1.0 / 15.0, 0.01);
}

TEST(Plot, ViridisEndpoints) {
  EXPECT_EQ(posenc::plot::viridis(0.0), (std::array<uint8_t, 3>{0x44, 0x01, 0x54}));
  EXPECT_EQ(posenc::plot::viridis(1.0), (std::array<uint8_t, 3>{0xfd, 0xe7, 0x25}));
  EXPECT_EQ(posenc::plot::viridis(2.0), posenc::plot::viridis(1.0));
}

TEST(Plot, FiguresAreValidPngsOfTheRequestedSize) {
  const std::string directory = testing::TempDir() + "posenc_figures_" + std::to_string(::getpid());
  const auto paths = posenc::plot::write_encoding_figures(directory, 32, 48);
  ASSERT_EQ(paths.size(), 2u);
  const Png heatmap = decode(paths[0]);
  ASSERT_EQ(heatmap.status, CAIRO_STATUS_SUCCESS) << cairo_status_to_string(heatmap.status);
  EXPECT_EQ(heatmap.width, 1000);
  EXPECT_EQ(heatmap.height, 540);
  const Png similarity = decode(paths[1]);
  ASSERT_EQ(similarity.status, CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(similarity.width, 1200);
  EXPECT_EQ(similarity.height, 500);
  // The heatmap's first column is PE(pos, 0) = sin(pos): row 0 is sin(0) = 0, mid-scale colour.
  const auto mid = posenc::plot::viridis(0.5);
  const auto pixel = heatmap.rgb(82, 52); // just inside the plot's top-left corner
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(pixel[c], mid[c], 2) << c;
  }
  // Custom sizes are honoured.
  const std::string custom = directory + "/custom.png";
  posenc::plot::write_encoding_heatmap(
      posenc::functional::sinusoidal_table(10, 8), custom, 640, 300);
  const Png small = decode(custom);
  EXPECT_EQ(small.width, 640);
  EXPECT_EQ(small.height, 300);
  for (const auto& path : {paths[0], paths[1], custom}) {
    EXPECT_EQ(std::remove(path.c_str()), 0) << path;
  }
  EXPECT_EQ(::rmdir(directory.c_str()), 0) << directory;
}

TEST(Plot, MakeDirectoriesCreatesParentsOrSaysWhyNot) {
  const std::string root = testing::TempDir() + "posenc_dirs_" + std::to_string(::getpid());
  const std::string nested = root + "/a/b";
  posenc::plot::make_directories(nested);
  posenc::plot::make_directories(nested + "/"); // existing: nothing to do
  const std::string file = root + "/a/file";
  std::FILE* handle = std::fopen(file.c_str(), "w");
  ASSERT_NE(handle, nullptr) << file;
  std::fclose(handle);
  EXPECT_POSENC_ERROR(posenc::plot::make_directories(file),
                      "plot: '" + file + "' exists but is not a directory");
  EXPECT_POSENC_ERROR(posenc::plot::make_directories(file + "/c"),
                      "plot: cannot create the directory '" + file + "/c' (Not a directory)");
  EXPECT_POSENC_ERROR(posenc::plot::make_directories(""),
                      "plot: the output directory must not be empty");
  EXPECT_EQ(std::remove(file.c_str()), 0);
  EXPECT_EQ(::rmdir(nested.c_str()), 0);
  EXPECT_EQ(::rmdir((root + "/a").c_str()), 0);
  EXPECT_EQ(::rmdir(root.c_str()), 0);
}

TEST(Plot, Errors) {
  EXPECT_POSENC_ERROR(posenc::plot::write_encoding_heatmap(torch::zeros({1, 4}), "/tmp/x.png"),
                      "plot: expected a [positions, dimensions] table with at least 2 positions");
  EXPECT_POSENC_ERROR(
      posenc::plot::write_encoding_heatmap(torch::zeros({4, 4}), "/nonexistent/dir/x.png"),
      "cannot write '/nonexistent/dir/x.png': cannot create a file in '/nonexistent/dir' (No such "
                      "file or directory)");
  EXPECT_POSENC_ERROR(
      posenc::plot::write_encoding_heatmap(torch::zeros({4, 4}), "/tmp/x.png", 10, 10),
      "plot: figures need at least 200 x 200 pixels");
}

TEST(Plot, DefaultSincos2dChannelsSpreadOverBothHalves) {
  // embed_dim 64: x sin k=0, x cos k=0, x sin k=2, x cos k=2, then the same for y.
  EXPECT_EQ(posenc::plot::default_sincos_2d_channels(64),
            (std::vector<int64_t>{0, 16, 2, 18, 32, 48, 34, 50}));
  EXPECT_EQ(posenc::plot::default_sincos_2d_channels(4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_POSENC_ERROR(posenc::plot::default_sincos_2d_channels(6),
                      "plot: the 2-D sin-cos table needs an embed_dim that is a positive multiple "
                      "of 4, but got 6");
}

TEST(Plot, Sincos2dChannelNamesSayAxisFunctionAndFrequency) {
  EXPECT_EQ(posenc::plot::sincos_2d_channel_name(64, 0), "ch 0: sin(w_0 x)");
  EXPECT_EQ(posenc::plot::sincos_2d_channel_name(64, 18), "ch 18: cos(w_2 x)");
  EXPECT_EQ(posenc::plot::sincos_2d_channel_name(64, 35), "ch 35: sin(w_3 y)");
  EXPECT_EQ(posenc::plot::sincos_2d_channel_name(64, 63), "ch 63: cos(w_15 y)");
  EXPECT_POSENC_ERROR(posenc::plot::sincos_2d_channel_name(64, 64),
                      "plot: channel 64 is outside the table's channels [0, 64)");
}

// Each panel is the channel's values over the grid: every cell's colour is viridis of its value;
// an x channel is constant down each column, a y channel along each row.
TEST(Plot, Sincos2dPanelsShowTheTableValues) {
  const auto options = posenc::Sincos2dTableOptions(16, {8}); // coordinates 2 * index
  const std::vector<int64_t> channels{1, 9};                  // sin(w_1 x), sin(w_1 y)
  const std::string path = temp_png("sincos_2d");
  posenc::plot::write_sincos_2d_figure(options, channels, path);
  const Png png = decode(path);
  ASSERT_EQ(png.status, CAIRO_STATUS_SUCCESS) << cairo_status_to_string(png.status);
  EXPECT_EQ(png.width, 600); // 2 * (180 + 50) + 130 = 590, widened for the caption
  EXPECT_EQ(png.height, 70 + 1 * (180 + 60) + 10);
  const at::Tensor table = posenc::functional::sincos_2d_table(options).to(torch::kDouble);
  const double cell = 180.0 / 8;
  for (size_t p = 0; p < channels.size(); ++p) {
    const double left = 50.0 + p * (180 + 50); // the panel's top-left corner
    const double top = 70.0 + 24;
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        const int x = static_cast<int>(left + (j + 0.5) * cell);
        const int y = static_cast<int>(top + (i + 0.5) * cell);
        const double value = table[i * 8 + j][channels[p]].item<double>();
        const auto expected = posenc::plot::viridis((value + 1.0) / 2.0);
        const auto pixel = png.rgb(x, y);
        for (int c = 0; c < 3; ++c) {
          ASSERT_NEAR(pixel[c], expected[c], 2) << "panel " << p << " cell " << i << "," << j;
        }
        // x channel: same colour as row 0 of its column; y channel: as column 0 of its row.
        const auto same = p == 0 ? png.rgb(x, static_cast<int>(top + 0.5 * cell))
                                 : png.rgb(static_cast<int>(left + 0.5 * cell), y);
        EXPECT_EQ(pixel, same) << "panel " << p << " cell " << i << "," << j;
      }
    }
  }
  EXPECT_EQ(std::remove(path.c_str()), 0) << path;
}

TEST(Plot, Sincos2dFigureOfARectangularGridAndManyChannels) {
  // Six channels: four panels a row, two rows; grid 4 x 8: panels 180 x 90.
  const std::string path = temp_png("sincos_2d_rect");
  posenc::plot::write_sincos_2d_figure(posenc::Sincos2dTableOptions(32, {4, 8}),
                                       {0, 1, 8, 16, 24, 31}, path);
  const Png png = decode(path);
  ASSERT_EQ(png.status, CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(png.width, 4 * (180 + 50) + 130);
  EXPECT_EQ(png.height, 70 + 2 * (180 + 60) + 10);
  // Channel 0 is sin(0) = 0 in column 0 (mid-scale colour); below the 90-pixel panel: white.
  const auto mid = posenc::plot::viridis(0.5);
  const auto inside = png.rgb(52, 96);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(inside[c], mid[c], 2) << c;
  }
  EXPECT_EQ(png.rgb(100, 94 + 90 + 40), (std::array<uint8_t, 3>{255, 255, 255}));
  EXPECT_EQ(std::remove(path.c_str()), 0) << path;
}

TEST(Plot, Sincos2dFigureErrors) {
  const auto options = posenc::Sincos2dTableOptions(16, {8});
  EXPECT_POSENC_ERROR(posenc::plot::write_sincos_2d_figure(options, {}, "/tmp/x.png"),
                      "plot: the 2-D sin-cos figure shows 1 to 32 channels (one panel each), but "
                      "got 0");
  EXPECT_POSENC_ERROR(
      posenc::plot::write_sincos_2d_figure(options, std::vector<int64_t>(33, 0), "/tmp/x.png"),
      "but got 33");
  EXPECT_POSENC_ERROR(posenc::plot::write_sincos_2d_figure(options, {0, 16}, "/tmp/x.png"),
                      "plot: channel 16 is outside the table's channels [0, 16)");
  EXPECT_POSENC_ERROR(posenc::plot::write_sincos_2d_figure(options, {-1}, "/tmp/x.png"),
                      "plot: channel -1 is outside");
  EXPECT_POSENC_ERROR(posenc::plot::write_sincos_2d_figure(posenc::Sincos2dTableOptions(18, {8}),
                                                           {0}, "/tmp/x.png"),
                      "embed_dim must be a positive multiple of 4");
}

// LLaMA 3.1's configuration: linear divides every frequency by the factor; LLaMA 3 keeps the
// short wavelengths (< original / high_freq_factor) and scales the long ones (> original /
// low_freq_factor); YaRN extrapolates the fastest pairs and interpolates the slowest.
TEST(Plot, RopeSpectraFollowTheScalingRules) {
  const posenc::plot::RopeSpectrumOptions options; // head_dim 128, theta 5e5, factor 8, 8192
  const auto spectra = posenc::plot::rope_spectra(options);
  ASSERT_EQ(spectra.size(), 4u);
  EXPECT_EQ(spectra[0].name, "default");
  EXPECT_EQ(spectra[1].name, "linear (factor 8)");
  EXPECT_EQ(spectra[2].name, "YaRN (factor 8, beta 32 / 1)");
  EXPECT_EQ(spectra[3].name, "LLaMA 3 (factor 8, low 1, high 4)");
  const auto& plain = spectra[0].wavelengths;
  ASSERT_EQ(plain.size(), 64u);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_NEAR(plain[i], 2 * M_PI * std::pow(500000.0, i / 64.0), 1e-9 * plain[i]) << i;
    EXPECT_NEAR(spectra[1].wavelengths[i], 8 * plain[i], 1e-9 * plain[i]) << i;
    const double yarn = spectra[2].wavelengths[i];
    EXPECT_GE(yarn, plain[i] * (1 - 1e-12)) << i;
    EXPECT_LE(yarn, 8 * plain[i] * (1 + 1e-12)) << i;
    const double llama = spectra[3].wavelengths[i];
    if (plain[i] < 8192.0 / 4) {
      EXPECT_NEAR(llama, plain[i], 1e-9 * plain[i]) << i;
    } else if (plain[i] > 8192.0) {
      EXPECT_NEAR(llama, 8 * plain[i], 1e-9 * plain[i]) << i;
    } else {
      EXPECT_GT(llama, plain[i]) << i;
      EXPECT_LT(llama, 8 * plain[i]) << i;
    }
  }
  EXPECT_NEAR(spectra[2].wavelengths.front(), plain.front(), 1e-9);
  EXPECT_NEAR(spectra[2].wavelengths.back(), 8 * plain.back(), 1e-9 * plain.back());
}

// The line of linear scaling lies log10(8) decades above the default's in every column.
TEST(Plot, SpectrumFigureDrawsLinearAboveDefault) {
  const auto spectra = posenc::plot::rope_spectra({});
  const std::string path = temp_png("spectrum");
  posenc::plot::write_spectrum_figure({spectra[0], spectra[1]}, 8192, "test", path);
  const Png png = decode(path);
  ASSERT_EQ(png.status, CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(png.width, 1000);
  EXPECT_EQ(png.height, 560);
  // Plot box: x 90 .. 970, y 50 .. 500; 6.28 .. 2.1e7 spans the decades 1e0 .. 1e8.
  const double decade = 450.0 / 8;
  for (const int pair : {20, 40, 60}) {
    const int x = static_cast<int>(std::lround(90 + pair / 63.0 * 880));
    const double plain = mean_row_of(png, x, 50, 500, posenc::plot::draw::line_colour(0));
    const double linear = mean_row_of(png, x, 50, 500, posenc::plot::draw::line_colour(1));
    ASSERT_GT(plain, 0) << "no default line in column " << x;
    ASSERT_GT(linear, 0) << "no linear line in column " << x;
    EXPECT_NEAR(plain - linear, std::log10(8.0) * decade, 3.0) << "pair " << pair;
    const double expected = 500 - (std::log10(spectra[0].wavelengths[pair])) * decade;
    EXPECT_NEAR(plain, expected, 3.0) << "pair " << pair;
  }
  EXPECT_EQ(std::remove(path.c_str()), 0) << path;
}

TEST(Plot, RopeSpectrumFigureIsWritten) {
  const std::string path = temp_png("rope_spectrum");
  posenc::plot::RopeSpectrumOptions options;
  options.head_dim = 64;
  options.theta = 10000;
  options.factor = 4;
  options.original_max_len = 4096;
  posenc::plot::write_rope_spectrum_figure(options, path, 800, 400);
  const Png png = decode(path);
  ASSERT_EQ(png.status, CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(png.width, 800);
  EXPECT_EQ(png.height, 400);
  EXPECT_EQ(std::remove(path.c_str()), 0) << path;
}

TEST(Plot, SpectrumFigureErrors) {
  using posenc::plot::Spectrum;
  EXPECT_POSENC_ERROR(posenc::plot::write_spectrum_figure({}, 10, "t", "/tmp/x.png"),
                      "plot: a spectrum figure needs at least one spectrum");
  EXPECT_POSENC_ERROR(posenc::plot::write_spectrum_figure(
                          {Spectrum{"a", {1, 2}}, Spectrum{"b", {1}}}, 10, "t", "/tmp/x.png"),
                      "plot: every spectrum needs one wavelength per pair (2), but 'b' has 1");
  EXPECT_POSENC_ERROR(
      posenc::plot::write_spectrum_figure({Spectrum{"a", {1, 0}}}, 10, "t", "/tmp/x.png"),
      "plot: the wavelengths of 'a' must be finite numbers > 0, but hold 0");
  EXPECT_POSENC_ERROR(
      posenc::plot::write_spectrum_figure({Spectrum{"a", {1, 2}}}, -1, "t", "/tmp/x.png"),
      "plot: the context length must be a finite number > 0, but got -1");
  posenc::plot::RopeSpectrumOptions odd;
  odd.head_dim = 7;
  EXPECT_POSENC_ERROR(posenc::plot::rope_spectra(odd),
                      "the rotated width must be even and >= 2, but got 7");
}
