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

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// The system's reason for the last failed file operation ("No space left on device", ...).
std::string system_reason() { return errno != 0 ? std::strerror(errno) : "unknown reason"; }

// Writes the first `limit` images (all when 0) of one split; returns how many. The list is written
// under a temporary name and renamed once every image is written, so a failed run leaves no list
// that names missing or partial files.
std::int64_t convert_split(const Options& o, const std::string& split, const std::string& name) {
  const data::Dataset ds = data::load_mnist(o.data, split);
  const auto side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(ds.sample_numel()))));
  DPL_CHECK(static_cast<std::int64_t>(side) * side == ds.sample_numel(), "expected square images in ", o.data,
            ", got samples of ", ds.sample_numel(), " pixels");
  const data::InMemoryImageDataset images(ds, side, side, 1);
  const std::int64_t n = o.limit > 0 ? std::min(o.limit, images.size()) : images.size();

  const fs::path list_path = fs::path(o.out) / (name + ".txt");
  const fs::path partial_path = fs::path(o.out) / (name + ".txt.partial");
  errno = 0;
  std::ofstream list(partial_path);
  DPL_CHECK(list.good(), "cannot write ", partial_path.string(), ": ", system_reason());
  struct RemoveUnlessDone {
    const fs::path& path;
    bool done = false;
    ~RemoveUnlessDone() {
      std::error_code ignored;
      if (!done) fs::remove(path, ignored);
    }
  } partial{partial_path};
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
    std::error_code made;
    fs::create_directories(file.parent_path(), made);
    DPL_CHECK(!made, "cannot create the folder ", file.parent_path().string(), ": ", made.message());
    errno = 0;
    std::ofstream f(file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
    f.close();
    DPL_CHECK(!f.fail(), "writing ", file.string(), " failed: ", system_reason());
    list << rel << ' ' << e.label << '\n';
  }
  errno = 0;
  list.close();
  DPL_CHECK(!list.fail(), "writing ", partial_path.string(), " failed: ", system_reason());
  std::error_code renamed;
  fs::rename(partial_path, list_path, renamed);
  DPL_CHECK(!renamed, "cannot rename ", partial_path.string(), " to ", list_path.string(), ": ", renamed.message());
  partial.done = true;
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
  // CLI11's NonNegativeNumber names its bound, the largest double, in 309 digits.
  const CLI::Validator count([](std::string& text) -> std::string {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size() && v >= 0) return "";
    } catch (const std::exception&) {
    }
    return "expected a whole number >= 0, got '" + text + "'";
  }, "N >= 0");
  app.add_option("--limit", o.limit, "write only the first N images of each split (0: all)")
      ->capture_default_str()
      ->check(count);
  app.add_option("--quality", o.quality, "JPEG quality")->capture_default_str()->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  try {
    DPL_CHECK(data::jpeg_available(),
              "this build of dpl has no JPEG codec; install libturbojpeg0-dev and rebuild");
    std::error_code made;
    fs::create_directories(o.out, made);
    DPL_CHECK(!made, "cannot create the output folder ", o.out, ": ", made.message());
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
