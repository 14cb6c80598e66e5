#include "dpl/data/random_access_dataset.hpp"

#include <algorithm>
#include <cmath>

#include "dpl/core/error.hpp"

namespace dpl::data {

Image Image::zeros(int height, int width, int channels) {
  DPL_CHECK(height >= 0 && width >= 0 && channels >= 0, "Image::zeros: expected non-negative extents, got ", height,
            " x ", width, " x ", channels);
  Image img;
  img.height = height;
  img.width = width;
  img.channels = channels;
  img.pixels.assign(static_cast<std::size_t>(height) * static_cast<std::size_t>(width) *
                        static_cast<std::size_t>(channels),
                    0);
  return img;
}

CroppedExample RandomAccessDataset::get_for_crop(std::int64_t i, const CropPlanner& plan) const {
  Example e = get(i);
  const CropRequest req = plan(e.image.height, e.image.width);
  return CroppedExample{std::move(e.image), req.box, e.label};
}

InMemoryImageDataset::InMemoryImageDataset(Dataset dataset, int height, int width, int channels)
    : dataset_(std::move(dataset)), height_(height), width_(width), channels_(channels) {
  DPL_CHECK(!dataset_.empty(), "InMemoryImageDataset: expected a non-empty data set, got an empty one");
  DPL_CHECK(height > 0 && width > 0 && channels > 0, "InMemoryImageDataset: expected positive extents, got ", height,
            " x ", width, " x ", channels);
  const std::int64_t want = static_cast<std::int64_t>(height) * width * channels;
  DPL_CHECK(dataset_.sample_numel() == want, "InMemoryImageDataset: samples of shape ",
            shape_str(dataset_.sample_shape()), " hold ", dataset_.sample_numel(), " values but ", height, " x ",
            width, " x ", channels, " images need ", want);
}

Example InMemoryImageDataset::get(std::int64_t i) const {
  DPL_CHECK(i >= 0 && i < size(), "InMemoryImageDataset::get: index ", i, " is outside a data set of ", size(),
            " examples");
  Example e;
  e.image.height = height_;
  e.image.width = width_;
  e.image.channels = channels_;
  const std::int64_t row = dataset_.sample_numel();
  e.image.pixels.resize(static_cast<std::size_t>(row));
  const float* src = dataset_.images().data<float>() + i * row;
  for (std::int64_t k = 0; k < row; ++k) {
    const float v = std::round(src[k] * 255.0f);
    e.image.pixels[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
  }
  e.label = dataset_.labels().data<std::int32_t>()[i];
  return e;
}

}  // namespace dpl::data
