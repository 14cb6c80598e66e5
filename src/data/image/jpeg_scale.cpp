// The choice of a DCT-domain scaling factor; the factors themselves come from the codec.
#include "dpl/core/error.hpp"
#include "dpl/data/image/jpeg.hpp"

namespace dpl::data {

ScaleFactor choose_jpeg_scale(int box_width, int box_height, int out_width, int out_height) {
  DPL_CHECK(box_width > 0 && box_height > 0 && out_width > 0 && out_height > 0,
            "choose_jpeg_scale: expected positive extents, got a region of ", box_width, " x ", box_height,
            " for an output of ", out_width, " x ", out_height);
  const std::vector<ScaleFactor> factors = jpeg_scale_factors();
  // Largest first: walk from the end to find the strongest downscale that still covers the output.
  for (auto it = factors.rbegin(); it != factors.rend(); ++it) {
    const auto w = static_cast<std::int64_t>(box_width) * it->num;
    const auto h = static_cast<std::int64_t>(box_height) * it->num;
    if (w >= static_cast<std::int64_t>(out_width) * it->denom && h >= static_cast<std::int64_t>(out_height) * it->denom)
      return *it;
  }
  return ScaleFactor{1, 1};
}

}  // namespace dpl::data
