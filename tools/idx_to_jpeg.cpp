// Converts an MNIST-format data set (Fashion-MNIST, MNIST; IDX files, plain or gzip) into a folder
// of JPEG files with Chainer-style list files, so the ImageNet pipeline can be tried on data that
// is installed everywhere:
//
//   OUT/train/<label>/<index>.jpg   the training split, grayscale replicated to RGB
//   OUT/val/<label>/<index>.jpg     the test split
//   train.txt and val.txt in OUT    one "relative/path.jpg label" line per image
//
// Usage: idx_to_jpeg -o OUT [--data DIR] [--size 64] [--limit N] [--quality 90]
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "dpl/core/error.hpp"
#include "dpl/data.hpp"

namespace {

using namespace dpl;
namespace fs = std::filesystem;

struct Options {
  std::string data = data::kDefaultMnistDir;
  std::string out;
  int size = 64;
  std::int64_t limit = 0;
  int quality = 90;
};

// Writes the first `limit` images (all when 0) of one split; returns how many.
std::int64_t convert_split(const Options& o, const std::string& split, const std::string& name) {
  const data::Dataset ds = data::load_mnist(o.data, split);
  const auto side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(ds.sample_numel()))));
  DPL_CHECK(static_cast<std::int64_t>(side) * side == ds.sample_numel(), "idx_to_jpeg: expected square images in ",
            o.data, ", got samples of ", ds.sample_numel(), " pixels");
  const data::InMemoryImageDataset images(ds, side, side, 1);
  const std::int64_t n = o.limit > 0 ? std::min(o.limit, images.size()) : images.size();

  const fs::path list_path = fs::path(o.out) / (name + ".txt");
  std::ofstream list(list_path);
  DPL_CHECK(list.good(), "idx_to_jpeg: cannot write ", list_path.string());
  const data::CropBox whole{0, 0, side, side};
  data::Image rgb = data::Image::zeros(o.size, o.size, 3);
  for (std::int64_t i = 0; i < n; ++i) {
    const data::Example e = images.get(i);
    const data::Image gray = data::resize_crop(e.image, whole, o.size, o.size);
    for (std::size_t p = 0; p < gray.pixels.size(); ++p)
      for (std::size_t c = 0; c < 3; ++c) rgb.pixels[p * 3 + c] = gray.pixels[p];
    const std::vector<std::uint8_t> jpeg = data::encode_jpeg(rgb, o.quality);

    const std::string rel = name + "/" + std::to_string(e.label) + "/" + std::to_string(i) + ".jpg";
    const fs::path file = fs::path(o.out) / rel;
    fs::create_directories(file.parent_path());
    std::ofstream f(file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
    DPL_CHECK(f.good(), "idx_to_jpeg: writing ", file.string(), " failed");
    list << rel << ' ' << e.label << '\n';
  }
  DPL_CHECK(list.good(), "idx_to_jpeg: writing ", list_path.string(), " failed");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Converts an MNIST-format data set into JPEG files and train.txt / val.txt image lists");
  app.add_option("--data", o.data, "folder with the IDX files (train-*, t10k-*, plain or .gz)")->capture_default_str();
  app.add_option("-o,--out", o.out, "output folder")->required();
  app.add_option("--size", o.size, "side of the written images in pixels (bilinear resize)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--limit", o.limit, "write only the first N images of each split (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--quality", o.quality, "JPEG quality")->capture_default_str()->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  try {
    DPL_CHECK(data::jpeg_available(),
              "idx_to_jpeg: this build of dpl has no JPEG codec; install libturbojpeg0-dev and rebuild");
    fs::create_directories(o.out);
    const std::int64_t train = convert_split(o, "train", "train");
    const std::int64_t val = convert_split(o, "test", "val");
    std::cout << "wrote " << train << " training and " << val << " validation images of " << o.size << "x" << o.size
              << " to " << o.out << " (lists: train.txt, val.txt)\n";
  } catch (const std::exception& e) {
    std::cerr << "idx_to_jpeg: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
