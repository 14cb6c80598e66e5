#include "dpl/data/image/transforms.hpp"

#include <algorithm>
#include <cmath>

#include "data/image/channel_values.hpp"
#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {

void check_extents(const char* op, int height, int width) {
  DPL_CHECK(height > 0 && width > 0, op, ": expected an image with positive extents, got ", height, " x ", width);
}

void check_fraction(const char* op, double crop_fraction) {
  DPL_CHECK(crop_fraction > 0.0 && crop_fraction <= 1.0, op, ": expected a crop fraction in (0, 1], got ",
            crop_fraction);
}

// The side of the square that the shorter-side crops keep, at least one pixel.
int square_side(int height, int width, double crop_fraction) {
  const double side = std::round(std::min(height, width) * crop_fraction);
  return std::max(1, static_cast<int>(side));
}

// splitmix64's finaliser: spreads every input bit over the whole word, so nearby (seed, epoch,
// index) triples give unrelated generator seeds.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Bilinear weights in fixed point: 11 bits per direction keep the product of two weights and a
// pixel (8 + 11 + 11 bits) inside 32 bits, and are finer than 8-bit output can show.
constexpr int kWeightBits = 11;
constexpr int kOne = 1 << kWeightBits;

// One output coordinate's two source pixels (absolute) and the weight of the second.
struct Tap {
  int i0, i1;
  int w1;  // 0..kOne
};

// Source taps of out output pixels over [start, start+extent): pixel centres aligned, clamped to
// the region so that its border pixels are repeated rather than read from outside the crop.
std::vector<Tap> taps(int start, int extent, int out) {
  std::vector<Tap> t(static_cast<std::size_t>(out));
  const double step = static_cast<double>(extent) / out;
  for (int o = 0; o < out; ++o) {
    const double s = std::clamp((o + 0.5) * step - 0.5, 0.0, static_cast<double>(extent - 1));
    const int i0 = static_cast<int>(s);
    const int i1 = std::min(i0 + 1, extent - 1);
    t[static_cast<std::size_t>(o)] = {start + i0, start + i1, static_cast<int>(std::lround((s - i0) * kOne))};
  }
  return t;
}

// The resize proper; kC is the channel count when known at compile time (1 or 3), else 0.
template <int kC>
void resize_rows(const Image& src, const std::vector<Tap>& xs, const std::vector<Tap>& ys, int out_width, bool flip,
                 std::uint8_t* dst) {
  const int c = kC > 0 ? kC : src.channels;
  const std::size_t row_bytes = static_cast<std::size_t>(src.width) * static_cast<std::size_t>(c);
  constexpr int kHalf = 1 << (2 * kWeightBits - 1);
  for (std::size_t oy = 0; oy < ys.size(); ++oy) {
    const Tap& ty = ys[oy];
    const std::uint8_t* r0 = src.pixels.data() + static_cast<std::size_t>(ty.i0) * row_bytes;
    const std::uint8_t* r1 = src.pixels.data() + static_cast<std::size_t>(ty.i1) * row_bytes;
    std::uint8_t* out_row = dst + oy * static_cast<std::size_t>(out_width) * c;
    for (int ox = 0; ox < out_width; ++ox) {
      const Tap& tx = xs[static_cast<std::size_t>(ox)];
      // The flip is folded into where the output pixel goes.
      std::uint8_t* o = out_row + static_cast<std::size_t>(flip ? out_width - 1 - ox : ox) * c;
      const std::uint8_t* a = r0 + static_cast<std::size_t>(tx.i0) * c;
      const std::uint8_t* b = r0 + static_cast<std::size_t>(tx.i1) * c;
      const std::uint8_t* p = r1 + static_cast<std::size_t>(tx.i0) * c;
      const std::uint8_t* q = r1 + static_cast<std::size_t>(tx.i1) * c;
      for (int k = 0; k < c; ++k) {
        const int top = a[k] * (kOne - tx.w1) + b[k] * tx.w1;
        const int bottom = p[k] * (kOne - tx.w1) + q[k] * tx.w1;
        o[k] = static_cast<std::uint8_t>((top * (kOne - ty.w1) + bottom * ty.w1 + kHalf) >> (2 * kWeightBits));
      }
    }
  }
}

}  // namespace

CropBox random_resized_crop_box(int height, int width, Generator& gen, double scale_min, double scale_max,
                                double ratio_min, double ratio_max) {
  const char* op = "random_resized_crop_box";
  check_extents(op, height, width);
  DPL_CHECK(scale_min > 0.0 && scale_min <= scale_max && scale_max <= 1.0, op,
            ": expected 0 < scale_min <= scale_max <= 1, got scale (", scale_min, ", ", scale_max, ")");
  DPL_CHECK(ratio_min > 0.0 && ratio_min <= ratio_max, op, ": expected 0 < ratio_min <= ratio_max, got ratio (",
            ratio_min, ", ", ratio_max, ")");
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (scale_min + (scale_max - scale_min) * gen.uniform(0.0f, 1.0f));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * gen.uniform(0.0f, 1.0f));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int y = static_cast<int>(gen.below(static_cast<std::uint64_t>(height - h) + 1));
      const int x = static_cast<int>(gen.below(static_cast<std::uint64_t>(width - w) + 1));
      return {x, y, w, h};
    }
  }
  // No draw fitted (a very elongated image): the whole image, its ratio clamped to the range.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < ratio_min) {
    h = std::max(1, static_cast<int>(std::lround(w / ratio_min)));
  } else if (in_ratio > ratio_max) {
    w = std::max(1, static_cast<int>(std::lround(h * ratio_max)));
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

CropBox center_crop_box(int height, int width, double crop_fraction) {
  check_extents("center_crop_box", height, width);
  check_fraction("center_crop_box", crop_fraction);
  const int side = square_side(height, width, crop_fraction);
  return {(width - side) / 2, (height - side) / 2, side, side};
}

CropBox random_crop_box(int height, int width, Generator& gen, double crop_fraction) {
  check_extents("random_crop_box", height, width);
  check_fraction("random_crop_box", crop_fraction);
  const int side = square_side(height, width, crop_fraction);
  const int y = static_cast<int>(gen.below(static_cast<std::uint64_t>(height - side) + 1));
  const int x = static_cast<int>(gen.below(static_cast<std::uint64_t>(width - side) + 1));
  return {x, y, side, side};
}

void resize_crop(const Image& src, const CropBox& box, int out_height, int out_width, bool flip, std::uint8_t* dst) {
  const char* op = "resize_crop";
  DPL_CHECK(src.valid(), op, ": the image claims ", src.height, " x ", src.width, " x ", src.channels, " but holds ",
            src.pixels.size(), " bytes");
  DPL_CHECK(box.width > 0 && box.height > 0 && box.x >= 0 && box.y >= 0 && box.x + box.width <= src.width &&
                box.y + box.height <= src.height,
            op, ": the box (x ", box.x, ", y ", box.y, ", ", box.width, " x ", box.height,
            ") does not lie inside the ", src.width, " x ", src.height, " image with positive extents");
  DPL_CHECK(out_height > 0 && out_width > 0, op, ": expected a positive output size, got ", out_height, " x ",
            out_width);
  const int c = src.channels;
  const std::vector<Tap> xs = taps(box.x, box.width, out_width);
  const std::vector<Tap> ys = taps(box.y, box.height, out_height);
  switch (c) {
    case 1: resize_rows<1>(src, xs, ys, out_width, flip, dst); break;
    case 3: resize_rows<3>(src, xs, ys, out_width, flip, dst); break;
    default: resize_rows<0>(src, xs, ys, out_width, flip, dst); break;
  }
}

Image resize_crop(const Image& src, const CropBox& box, int out_height, int out_width, bool flip) {
  Image out = Image::zeros(std::max(out_height, 0), std::max(out_width, 0), src.channels);
  resize_crop(src, box, out_height, out_width, flip, out.pixels.data());
  return out;
}

ImageTransform ImageTransform::train(int size) {
  ImageTransform t;
  t.crop = Crop::kRandomResized;
  t.size = size;
  t.flip = true;
  return t;
}

ImageTransform ImageTransform::validation(int size, double crop_fraction) {
  ImageTransform t;
  t.crop = Crop::kCenter;
  t.size = size;
  t.crop_fraction = crop_fraction;
  return t;
}

CropRequest ImageTransform::plan(int height, int width, Generator& gen) const {
  DPL_CHECK(size >= 1, "ImageTransform: expected an output size >= 1, got ", size);
  CropRequest req;
  req.out_height = size;
  req.out_width = size;
  switch (crop) {
    case Crop::kRandomResized:
      req.box = random_resized_crop_box(height, width, gen, scale_min, scale_max, ratio_min, ratio_max);
      break;
    case Crop::kRandom: req.box = random_crop_box(height, width, gen, crop_fraction); break;
    case Crop::kCenter: req.box = center_crop_box(height, width, crop_fraction); break;
  }
  return req;
}

Generator sample_generator(std::uint64_t seed, std::int64_t epoch, std::int64_t index) {
  return Generator(mix(mix(mix(seed) ^ static_cast<std::uint64_t>(epoch)) ^ static_cast<std::uint64_t>(index)));
}

std::int32_t transform_example(const RandomAccessDataset& dataset, std::int64_t index, const ImageTransform& transform,
                               std::uint64_t seed, std::int64_t epoch, std::uint8_t* dst) {
  Generator gen = sample_generator(seed, epoch, index);
  const CropPlanner plan = [&](int h, int w) { return transform.plan(h, w, gen); };
  const CroppedExample ex = dataset.get_for_crop(index, plan);
  DPL_CHECK(ex.image.channels == dataset.channels(), "transform_example: example ", index, " has ",
            ex.image.channels, " channels but the data set promises ", dataset.channels());
  // The flip is drawn after the crop, from the same generator, so both depend on the sample only.
  const bool flip = transform.flip && gen.below(2) == 1;
  resize_crop(ex.image, ex.box, transform.size, transform.size, flip, dst);
  return ex.label;
}

namespace detail {

ChannelValues per_channel(const char* op, const std::vector<float>& mean, const std::vector<float>& std, int channels) {
  const auto expand = [&](const std::vector<float>& v, const char* name) {
    DPL_CHECK(v.size() == 1 || v.size() == static_cast<std::size_t>(channels), op, ": expected ", name, " of ",
              channels, " values (one per channel) or 1, got ", v.size());
    std::vector<float> out(static_cast<std::size_t>(channels));
    for (int k = 0; k < channels; ++k) out[static_cast<std::size_t>(k)] = v.size() == 1 ? v[0] : v[static_cast<std::size_t>(k)];
    return out;
  };
  ChannelValues values{expand(mean, "mean"), expand(std, "std")};
  for (std::size_t k = 0; k < values.std.size(); ++k)
    DPL_CHECK(values.std[k] != 0.0f, op, ": std of channel ", k, " is 0; expected a non-zero scale");
  return values;
}

}  // namespace detail

Tensor normalize_to_float(const std::uint8_t* nhwc, std::int64_t n, int height, int width, int channels,
                          const std::vector<float>& mean, const std::vector<float>& std) {
  const char* op = "normalize_to_float";
  DPL_CHECK(n >= 0 && height > 0 && width > 0 && channels > 0, op, ": expected a batch of positive extents, got (",
            n, ", ", height, ", ", width, ", ", channels, ")");
  DPL_CHECK(nhwc != nullptr || n == 0, op, ": the image pointer is null");
  const detail::ChannelValues values = detail::per_channel(op, mean, std, channels);
  const std::vector<float>& m = values.mean;
  const std::vector<float>& s = values.std;
  Tensor out = Tensor::empty_channels_last({n, channels, height, width});
  float* o = out.data<float>();
  const std::int64_t pixels = n * height * width;
  for (std::int64_t p = 0; p < pixels; ++p)
    for (int k = 0; k < channels; ++k) {
      const std::int64_t i = p * channels + k;
      o[i] = (static_cast<float>(nhwc[i]) - m[static_cast<std::size_t>(k)]) / s[static_cast<std::size_t>(k)];
    }
  return out;
}

}  // namespace dpl::data
