// Throughput of the image loader on the host: JPEG decode + random-resized crop to 224 + flip,
// with one worker thread and with N. It writes its own synthetic JPEGs first (256x256 by
// default, into a temporary folder it removes), so it needs no data set. Prints one key=value
// record per worker count:
//   impl=dpl what=loader workers=4 images=1024 size=256 crop=224 seconds=... img_per_s=... img_per_s_per_thread=...
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "dpl/dpl.hpp"

namespace {

using namespace dpl;
namespace fs = std::filesystem;

// A smooth colour pattern with some noise, different per image: close enough to a photograph
// for the decoder's work (a flat image would decode unrealistically fast).
data::Image synthetic(int side, int k, Generator& gen) {
  data::Image img = data::Image::zeros(side, side, 3);
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x) {
      std::uint8_t* p = img.pixels.data() + (static_cast<std::size_t>(y) * side + x) * 3;
      const int noise = static_cast<int>(gen.below(32));
      p[0] = static_cast<std::uint8_t>((x * 255 / side + k * 7 + noise) % 256);
      p[1] = static_cast<std::uint8_t>((y * 255 / side + k * 13 + noise) % 256);
      p[2] = static_cast<std::uint8_t>(((x + y) * 127 / side + k * 29 + noise) % 256);
    }
  return img;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpl image loader throughput (decode + random-resized crop + flip)"};
  int images = 512, size = 256, crop = 224, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::int64_t batch = 64;
  int epochs = 2;
  app.add_option("--images", images, "synthetic JPEGs to write")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--size", size, "their side in pixels")->check(CLI::Range(8, 4096))->capture_default_str();
  app.add_option("--crop", crop, "output crop side")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("-j,--workers", threads, "worker threads of the second run")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-b,--batch", batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("-e,--epochs", epochs, "timed epochs over the images")->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    DPL_CHECK(data::jpeg_available(), "bench_loader: this build of dpl has no JPEG codec (install libturbojpeg0-dev)");
    const fs::path dir = fs::temp_directory_path() / ("dpl_bench_loader_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    struct Cleanup {
      fs::path p;
      ~Cleanup() {
        std::error_code ec;
        fs::remove_all(p, ec);
      }
    } cleanup{dir};

    Generator gen(1);
    {
      std::ofstream list(dir / "list.txt");
      for (int k = 0; k < images; ++k) {
        const std::vector<std::uint8_t> jpeg = data::encode_jpeg(synthetic(size, k, gen), 90);
        const std::string name = std::to_string(k) + ".jpg";
        std::ofstream(dir / name, std::ios::binary)
            .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
        list << name << ' ' << k % 1000 << '\n';
      }
    }
    auto dataset = std::make_shared<data::LabeledImageDataset>((dir / "list.txt").string(), dir.string());

    for (int workers : {1, threads}) {
      data::ImageLoaderOptions opt;
      opt.batch_size = batch;
      opt.workers = workers;
      opt.prefetch = 3;
      data::ImageLoader loader(dataset, data::ImageTransform::train(crop), opt);
      loader.next();  // the workers are started and warm; the file cache is hot
      const std::int64_t batches = loader.batches_per_epoch() * epochs;
      std::int64_t served = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t b = 0; b < batches; ++b) served += loader.next().size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("impl=dpl what=loader workers=%d images=%lld size=%d crop=%d seconds=%.3f img_per_s=%.1f "
                  "img_per_s_per_thread=%.1f\n",
                  workers, static_cast<long long>(served), size, crop, s, served / s, served / s / workers);
      std::fflush(stdout);
      if (threads == 1) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_loader: %s\n", e.what());
    return 1;
  }
  return 0;
}
