// The IDX reader (MNIST's format), plain or gzip, on arbitrary bytes: read_idx_images and
// read_idx_labels must return a tensor that keeps their promises or raise dpl::Error.
#include <cstdint>
#include <string>

#include "dpl/data/idx.hpp"
#include "fuzz_util.hpp"

using namespace dpl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemoryFile file("dpl-fuzz-idx");
  const std::string& path = file.write(data, size);
  fuzz::accepts([&] {
    const Tensor images = data::read_idx_images(path);
    fuzz::require(images.dim() == 2 && images.dtype() == kFloat32, "read_idx_images: expected a 2-D float32 tensor");
    const float* p = images.data<float>();
    for (std::int64_t i = 0; i < images.numel(); ++i)
      fuzz::require(p[i] >= 0.f && p[i] <= 1.f, "read_idx_images: a pixel outside [0, 1]");
  });
  fuzz::accepts([&] {
    const Tensor labels = data::read_idx_labels(path);
    fuzz::require(labels.dim() == 1 && labels.dtype() == kInt32, "read_idx_labels: expected a 1-D int32 tensor");
    const std::int32_t* p = labels.data<std::int32_t>();
    for (std::int64_t i = 0; i < labels.numel(); ++i)
      fuzz::require(p[i] >= 0 && p[i] <= 255, "read_idx_labels: a label outside 0..255");
  });
  return 0;
}
