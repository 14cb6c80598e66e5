#pragma once
// Image transforms on the host, on 8-bit HWC images: the crops of ImageNet training and
// validation, bilinear resizing and horizontal flips, and normalisation to float.

#include <cstdint>
#include <vector>

#include "dpl/core/random.hpp"
#include "dpl/data/random_access_dataset.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// torchvision's RandomResizedCrop region for an image of height x width: up to ten draws of an
/// area fraction uniform in [scale_min, scale_max] and a log-uniform aspect ratio (width/height)
/// in [ratio_min, ratio_max]; the first box that fits is placed uniformly at random. When none
/// fits, the largest centred box whose ratio is clamped to the range.
/// Requires positive extents, 0 < scale_min <= scale_max <= 1 and 0 < ratio_min <= ratio_max.
CropBox random_resized_crop_box(int height, int width, Generator& gen, double scale_min = 0.08,
                                double scale_max = 1.0, double ratio_min = 3.0 / 4.0, double ratio_max = 4.0 / 3.0);

/// The square that "resize the shorter side to S, then take the centred crop_size x crop_size"
/// keeps, in the original image's coordinates: side round(min(height, width) * crop_fraction),
/// where crop_fraction = crop_size / S (0.875 for 224 of 256). Requires 0 < crop_fraction <= 1.
CropBox center_crop_box(int height, int width, double crop_fraction = 0.875);

/// The same square placed uniformly at random instead of centred (the classic "random 224 of
/// 256" training crop).
CropBox random_crop_box(int height, int width, Generator& gen, double crop_fraction = 0.875);

/// Resizes region `box` of `src` to out_height x out_width by bilinear interpolation (pixel
/// centres aligned, as OpenCV's INTER_LINEAR and torchvision without antialiasing), mirrored left
/// to right when flip is set, and writes it packed HWC to dst (out_height * out_width *
/// src.channels bytes). Requires src.valid(), box inside src with positive extents, positive
/// output extents; throws dpl::Error naming the box and the image size otherwise.
void resize_crop(const Image& src, const CropBox& box, int out_height, int out_width, bool flip, std::uint8_t* dst);

/// resize_crop into a new image.
Image resize_crop(const Image& src, const CropBox& box, int out_height, int out_width, bool flip = false);

/// What the loader does to each example: the crop, its output size and the flip.
struct ImageTransform {
  enum class Crop {
    kRandomResized,  ///< random_resized_crop_box (training)
    kRandom,         ///< random_crop_box (classic training crop)
    kCenter,         ///< center_crop_box (validation)
  };
  Crop crop = Crop::kCenter;
  int size = 224;               ///< output is size x size
  double crop_fraction = 0.875;  ///< kRandom and kCenter: crop size / shorter side before cropping
  double scale_min = 0.08, scale_max = 1.0;          ///< kRandomResized: area fraction
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  ///< kRandomResized: aspect ratio
  bool flip = false;            ///< mirror left to right with probability 1/2

  /// Random-resized crop to size x size with a random flip: ImageNet training.
  static ImageTransform train(int size = 224);
  /// Centre crop of crop_fraction of the shorter side to size x size, no flip: validation.
  static ImageTransform validation(int size = 224, double crop_fraction = 0.875);

  /// The region for an image of height x width, drawing from gen when the crop is random.
  /// Throws dpl::Error for invalid settings (size < 1, fractions outside their ranges).
  CropRequest plan(int height, int width, Generator& gen) const;
};

/// The generator of one sample: seeded from (seed, epoch, index) alone, so a sample's crop and
/// flip do not depend on which thread prepares it or in which order.
Generator sample_generator(std::uint64_t seed, std::int64_t epoch, std::int64_t index);

/// Prepares example `index` of `dataset` with `transform`, drawing its randomness from
/// sample_generator(seed, epoch, index): plans the crop, reads the example for it (at reduced
/// scale where the data set can), resizes and flips it into dst (transform.size^2 *
/// dataset.channels() bytes, HWC). Returns the label. Throws what the data set throws.
std::int32_t transform_example(const RandomAccessDataset& dataset, std::int64_t index, const ImageTransform& transform,
                               std::uint64_t seed, std::int64_t epoch, std::uint8_t* dst);

/// The CPU reference of device normalisation: 8-bit NHWC images (n, height, width, channels),
/// packed, to float32 out = (x - mean[c]) / std[c], with mean and std in pixel units (0..255;
/// e.g. mean {123.675, 116.28, 103.53}, std {58.395, 57.12, 57.375}, or std 255 for [0, 1]).
/// Ensures: a tensor of shape (n, channels, height, width) in channels-last memory order
/// (Tensor::empty_channels_last), i.e. the same element order as the input.
/// Requires mean and std of `channels` entries (or one, used for every channel), every std
/// non-zero; throws dpl::Error naming the counts or the zero otherwise.
Tensor normalize_to_float(const std::uint8_t* nhwc, std::int64_t n, int height, int width, int channels,
                          const std::vector<float>& mean, const std::vector<float>& std);

}  // namespace dpl::data
