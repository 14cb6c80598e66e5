// Stand-ins for builds without libpng: decoding says what to install.
#include "dpl/data/image/png.hpp"

#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {
[[noreturn]] void no_codec(const std::string& name) {
  DPL_FAIL(name, ": a PNG file, and this build of dpl has no PNG decoder; install libpng (Debian package "
                 "libpng-dev) and configure dpl again");
}
}  // namespace

bool png_available() { return false; }
JpegSize read_png_size(const std::uint8_t*, std::size_t, const std::string& name) { no_codec(name); }
Image decode_png(const std::uint8_t*, std::size_t, const std::string& name, int) { no_codec(name); }

}  // namespace dpl::data
