#pragma once
// Data sets read one example at a time by index: the interface the image loader draws from,
// 8-bit images, and an adapter that serves an in-memory Dataset (MNIST) through it.

#include <cstdint>
#include <functional>
#include <vector>

#include "dpl/data/dataset.hpp"

namespace dpl::data {

/// An 8-bit image in HWC order (rows, then columns, then channels; RGB for colour images),
/// packed: pixel (y, x) channel c is pixels[(y * width + x) * channels + c].
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;
  std::vector<std::uint8_t> pixels;  ///< height * width * channels bytes

  /// An image of the given size with every byte 0. Requires non-negative extents.
  static Image zeros(int height, int width, int channels);
  /// True when pixels holds exactly height * width * channels bytes.
  bool valid() const {
    return height >= 0 && width >= 0 && channels >= 0 &&
           pixels.size() == static_cast<std::size_t>(height) * static_cast<std::size_t>(width) *
                                static_cast<std::size_t>(channels);
  }
};

/// One example: an image and its class label.
struct Example {
  Image image;
  std::int32_t label = 0;
};

/// A rectangle of an image: columns [x, x+width), rows [y, y+height).
struct CropBox {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

/// What a transform will take from an image whose full size is known: the region it keeps and
/// the size that region is resized to. A data set that can decode at reduced resolution
/// (JPEG) uses it to decode no more pixels than the output needs.
struct CropRequest {
  CropBox box;         ///< in the full image's coordinates
  int out_height = 0;  ///< the region is resized to out_height x out_width
  int out_width = 0;
};

/// Chooses the region for an image of the given full height and width.
using CropPlanner = std::function<CropRequest(int height, int width)>;

/// An example prepared for one crop: the image (possibly decoded at reduced scale) and the
/// requested region mapped into that image's coordinates.
struct CroppedExample {
  Image image;
  CropBox box;  ///< inside image; at least out_height x out_width unless the full image is smaller
  std::int32_t label = 0;
};

/// A data set read by index. Implementations must allow get() and get_for_crop() from several
/// threads at once (the loader's workers call them concurrently).
class RandomAccessDataset {
 public:
  virtual ~RandomAccessDataset() = default;
  /// Number of examples N.
  virtual std::int64_t size() const = 0;
  /// Channels of every image (3 for RGB, 1 for grayscale).
  virtual int channels() const = 0;
  /// Example i at full resolution. Requires 0 <= i < size(); throws dpl::Error otherwise and
  /// when the example cannot be read (naming where it comes from).
  virtual Example get(std::int64_t i) const = 0;
  /// Example i prepared for the crop that plan chooses from its full size. The default decodes
  /// the full image with get(i) and returns plan's box unchanged; data sets that can decode at
  /// reduced scale override it. Same requirements and errors as get().
  virtual CroppedExample get_for_crop(std::int64_t i, const CropPlanner& plan) const;
};

/// An in-memory Dataset (float32 samples in [0, 1], e.g. from load_mnist) served as 8-bit images,
/// so the image transforms and loader work on it too. Samples are converted on each get():
/// round(255 * x), clamped to [0, 255], which restores the original bytes of an IDX file exactly.
class InMemoryImageDataset : public RandomAccessDataset {
 public:
  /// Requires: dataset non-empty, and its samples hold height * width * channels values in HWC
  /// order (MNIST: 28, 28, 1). Throws dpl::Error naming the sample size and the shape given.
  InMemoryImageDataset(Dataset dataset, int height, int width, int channels);

  std::int64_t size() const override { return dataset_.size(); }
  int channels() const override { return channels_; }
  Example get(std::int64_t i) const override;

 private:
  Dataset dataset_;
  int height_, width_, channels_;
};

}  // namespace dpl::data
