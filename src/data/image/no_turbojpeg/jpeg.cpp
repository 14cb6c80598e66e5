// Stand-ins for builds without libjpeg-turbo: every codec call says what to install.
#include "dpl/data/image/jpeg.hpp"

#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {
[[noreturn]] void no_codec(const char* op) {
  DPL_FAIL(op, ": this build of dpl has no JPEG codec; install libjpeg-turbo's TurboJPEG API (Debian package "
               "libturbojpeg0-dev) and configure dpl again");
}
}  // namespace

bool jpeg_available() { return false; }
std::vector<ScaleFactor> jpeg_scale_factors() { return {ScaleFactor{1, 1}}; }
JpegSize read_jpeg_size(const std::uint8_t*, std::size_t, const std::string&) { no_codec("read_jpeg_size"); }
Image decode_jpeg(const std::uint8_t*, std::size_t, const std::string&, ScaleFactor, int) { no_codec("decode_jpeg"); }
std::vector<std::uint8_t> encode_jpeg(const Image&, int) { no_codec("encode_jpeg"); }

}  // namespace dpl::data
