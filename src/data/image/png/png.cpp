// The PNG decoder on libpng's sequential read API, reading from memory.
#include "dpl/data/image/png.hpp"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {

// libpng reports errors by longjmp to the caller's setjmp (its default, and the only way that does
// not unwind C++ frames through C code); the message waits here until the decoder throws it.
struct ReadState {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  char message[256] = "";
};

void on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<ReadState*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof st->message, "%s", msg != nullptr ? msg : "unknown error");
  png_longjmp(png, 1);
}

// Warnings (an ancillary chunk's bad CRC, an odd colour profile) are common in real files and do
// not touch the pixels: ignored. Anything that does is an error.
void on_warning(png_structp, png_const_charp) {}

void read_from_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* st = static_cast<ReadState*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) png_error(png, "the file ends early");
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

constexpr png_uint_32 kMaxExtent = 65535;

// A read struct and its info; destroyed on every path out of the decoder.
struct Reader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ReadState state;

  Reader(const std::uint8_t* data, std::size_t size, const std::string& name) {
    state.data = data;
    state.size = size;
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, on_error, on_warning);
    if (png != nullptr) info = png_create_info_struct(png);
    DPL_CHECK(png != nullptr && info != nullptr, name, ": libpng could not create a reader (out of memory)");
    png_set_read_fn(png, &state, read_from_memory);
    png_set_user_limits(png, kMaxExtent, kMaxExtent);
  }
  ~Reader() { png_destroy_read_struct(&png, &info, nullptr); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
};

}  // namespace

bool png_available() { return true; }

JpegSize read_png_size(const std::uint8_t* data, std::size_t size, const std::string& name) {
  DPL_CHECK(has_png_signature(data, size), name, ": not a readable PNG header: no PNG signature");
  Reader r(data, size, name);
  // Nothing with a destructor is created between setjmp and a longjmp back to it.
  if (setjmp(png_jmpbuf(r.png))) DPL_FAIL(name, ": not a readable PNG header: ", r.state.message);
  png_read_info(r.png, r.info);
  return {static_cast<int>(png_get_image_width(r.png, r.info)), static_cast<int>(png_get_image_height(r.png, r.info))};
}

Image decode_png(const std::uint8_t* data, std::size_t size, const std::string& name, int channels) {
  DPL_CHECK(channels == 1 || channels == 3, "decode_png: ", name, ": expected 1 (grey) or 3 (RGB) channels, got ",
            channels);
  DPL_CHECK(has_png_signature(data, size), name, ": not a readable PNG header: no PNG signature");
  Reader r(data, size, name);
  // Created before setjmp: a longjmp must not skip the construction of an object it then leaves.
  Image img;
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(r.png))) DPL_FAIL(name, ": corrupt or truncated PNG: ", r.state.message);
  png_read_info(r.png, r.info);
  const png_byte colour = png_get_color_type(r.png, r.info);
  if (png_get_bit_depth(r.png, r.info) == 16) png_set_scale_16(r.png);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
  if (colour == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(r.png, r.info) < 8) png_set_expand_gray_1_2_4_to_8(r.png);
  // Alpha is dropped: an alpha channel, and a palette's tRNS, which expanding the palette makes one.
  if ((colour & PNG_COLOR_MASK_ALPHA) != 0 || png_get_valid(r.png, r.info, PNG_INFO_tRNS) != 0)
    png_set_strip_alpha(r.png);
  const bool colour_in = (colour & PNG_COLOR_MASK_COLOR) != 0;
  if (channels == 3 && !colour_in) png_set_gray_to_rgb(r.png);
  // JPEG's luma weights in libpng's fixed point (units of 1e-5), so grey means the same for both formats.
  if (channels == 1 && colour_in) png_set_rgb_to_gray_fixed(r.png, 1, 29900, 58700);
  png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  DPL_CHECK(png_get_channels(r.png, r.info) == channels && png_get_bit_depth(r.png, r.info) == 8, name,
            ": corrupt or truncated PNG: libpng converted it to ", static_cast<int>(png_get_channels(r.png, r.info)),
            " channels of ", static_cast<int>(png_get_bit_depth(r.png, r.info)), " bits, expected ", channels,
            " of 8");
  img.height = static_cast<int>(png_get_image_height(r.png, r.info));
  img.width = static_cast<int>(png_get_image_width(r.png, r.info));
  img.channels = channels;
  const std::size_t stride = static_cast<std::size_t>(img.width) * static_cast<std::size_t>(channels);
  DPL_CHECK(png_get_rowbytes(r.png, r.info) == stride, name, ": corrupt or truncated PNG: rows of ",
            png_get_rowbytes(r.png, r.info), " bytes, expected ", stride);
  img.pixels.resize(static_cast<std::size_t>(img.height) * stride);
  rows.resize(static_cast<std::size_t>(img.height));
  for (std::size_t y = 0; y < rows.size(); ++y) rows[y] = img.pixels.data() + y * stride;
  png_read_image(r.png, rows.data());
  png_read_end(r.png, nullptr);
  return img;
}

}  // namespace dpl::data
