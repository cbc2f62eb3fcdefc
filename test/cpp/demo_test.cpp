// The demo (a short version of `posenc demo`) and the figures of `posenc plot`.

#include "demo/reversal.h"
#include "plot/figures.h"

#include <posenc/posenc.h>

#include "test_util.h"

#include <gtest/gtest.h>

#include <cairo.h>

#include <unistd.h>
#include <cstdio>
#include <string>

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
      "cannot open '/nonexistent/dir/x.png' for writing: No such file or directory");
  EXPECT_POSENC_ERROR(
      posenc::plot::write_encoding_heatmap(torch::zeros({4, 4}), "/tmp/x.png", 10, 10),
      "plot: figures need at least 200 x 200 pixels");
}
