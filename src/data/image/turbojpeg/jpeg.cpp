// The JPEG codec on libjpeg-turbo's TurboJPEG API.
#include "dpl/data/image/jpeg.hpp"

#include <turbojpeg.h>

#include <algorithm>
#include <memory>

#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {

// A TurboJPEG handle per thread and direction: creating one allocates the codec's state, which
// would otherwise cost as much as decoding a small image. Handles are not thread-safe, so each
// loader worker gets its own.
struct HandleDeleter {
  void operator()(void* h) const { tjDestroy(h); }
};
using Handle = std::unique_ptr<void, HandleDeleter>;

// The calling thread's decompressor. fresh=true replaces it: after an error TurboJPEG can leave a
// handle half-way through a file, and the next header read on it then reports 0 x 0 without an
// error.
tjhandle decompressor(bool fresh = false) {
  thread_local Handle h;
  if (fresh || !h) h.reset(tjInitDecompress());
  DPL_CHECK(h != nullptr, "decode_jpeg: TurboJPEG could not create a decompressor: ", tjGetErrorStr2(nullptr));
  return h.get();
}

// Throws "<name>: <what>: <TurboJPEG's message>" and leaves the thread a fresh decompressor.
[[noreturn]] void fail(tjhandle h, const std::string& name, const char* what) {
  const std::string reason = tjGetErrorStr2(h);
  decompressor(true);
  DPL_FAIL(name, ": ", what, ": ", reason);
}

tjhandle compressor() {
  thread_local Handle h(tjInitCompress());
  DPL_CHECK(h != nullptr, "encode_jpeg: TurboJPEG could not create a compressor: ", tjGetErrorStr2(nullptr));
  return h.get();
}

// CMYK and YCCK JPEGs (Photoshop's, and about 22 files of ImageNet's train set) come decoded
// as CMYK bytes in Adobe's inverted convention, the one Photoshop writes with its APP14 marker:
// a byte is 255 minus the ink, so 255 is no ink. Without a colour profile, the RGB of such a
// pixel is the light that cyan, magenta and yellow each let through, dimmed by black:
// R = C * K / 255 (and G from M, B from Y), rounded; grey from that RGB with JPEG's luma weights
// (what TurboJPEG gives for a colour JPEG asked for grey). PIL and libjpeg's djpeg agree.
void cmyk_to_rgb_or_grey(const std::vector<std::uint8_t>& cmyk, Image& img) {
  const std::size_t n = static_cast<std::size_t>(img.height) * static_cast<std::size_t>(img.width);
  const auto mul = [](unsigned a, unsigned k) { return static_cast<std::uint8_t>((a * k + 127) / 255); };
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* p = &cmyk[4 * i];
    const std::uint8_t r = mul(p[0], p[3]), g = mul(p[1], p[3]), b = mul(p[2], p[3]);
    if (img.channels == 3) {
      img.pixels[3 * i] = r;
      img.pixels[3 * i + 1] = g;
      img.pixels[3 * i + 2] = b;
    } else {
      img.pixels[i] = static_cast<std::uint8_t>((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
    }
  }
}

bool supported(ScaleFactor s) {
  for (const ScaleFactor& f : jpeg_scale_factors())
    if (f.num * s.denom == s.num * f.denom) return true;
  return false;
}

}  // namespace

bool jpeg_available() { return true; }

std::vector<ScaleFactor> jpeg_scale_factors() {
  int count = 0;
  const tjscalingfactor* f = tjGetScalingFactors(&count);
  std::vector<ScaleFactor> out;
  for (int i = 0; f != nullptr && i < count; ++i)
    if (f[i].num <= f[i].denom) out.push_back({f[i].num, f[i].denom});
  // TurboJPEG lists them largest first already; the contract promises that order.
  std::sort(out.begin(), out.end(),
            [](ScaleFactor a, ScaleFactor b) { return a.num * b.denom > b.num * a.denom; });
  return out;
}

namespace {

struct Header {
  JpegSize size;
  int colorspace = 0;
};

Header read_header(const std::uint8_t* data, std::size_t size, const std::string& name) {
  tjhandle h = decompressor();
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &width, &height, &subsamp, &colorspace) != 0)
    fail(h, name, "not a readable JPEG header");
  DPL_CHECK(width > 0 && height > 0, name, ": not a readable JPEG header: it gives a size of ", width, " x ", height);
  return {{width, height}, colorspace};
}

}  // namespace

JpegSize read_jpeg_size(const std::uint8_t* data, std::size_t size, const std::string& name) {
  return read_header(data, size, name).size;
}

Image decode_jpeg(const std::uint8_t* data, std::size_t size, const std::string& name, ScaleFactor scale,
                  int channels) {
  DPL_CHECK(channels == 1 || channels == 3, "decode_jpeg: ", name, ": expected 1 (grayscale) or 3 (RGB) channels, got ",
            channels);
  DPL_CHECK(scale.num > 0 && scale.denom > 0 && supported(scale), "decode_jpeg: ", name, ": the scaling factor ",
            scale.num, "/", scale.denom, " is not one the decoder supports (see jpeg_scale_factors())");
  const Header header = read_header(data, size, name);
  const JpegSize full = header.size;
  Image img;
  img.height = scaled_extent(full.height, scale);
  img.width = scaled_extent(full.width, scale);
  img.channels = channels;
  img.pixels.resize(static_cast<std::size_t>(img.height) * static_cast<std::size_t>(img.width) *
                    static_cast<std::size_t>(channels));
  tjhandle h = decompressor();
  // Warnings (a premature end of data, a corrupt marker) are failures: a truncated file would
  // otherwise decode into an image whose lower part is grey, and train on that silently.
  const int flags = TJFLAG_STOPONWARNING;
  if (header.colorspace == TJCS_CMYK || header.colorspace == TJCS_YCCK) {
    std::vector<std::uint8_t> cmyk(static_cast<std::size_t>(img.height) * static_cast<std::size_t>(img.width) * 4);
    if (tjDecompress2(h, data, static_cast<unsigned long>(size), cmyk.data(), img.width, 0, img.height, TJPF_CMYK,
                      flags) != 0)
      fail(h, name, "corrupt or truncated JPEG");
    cmyk_to_rgb_or_grey(cmyk, img);
    return img;
  }
  const int rc = tjDecompress2(h, data, static_cast<unsigned long>(size), img.pixels.data(), img.width, 0,
                               img.height, channels == 3 ? TJPF_RGB : TJPF_GRAY, flags);
  if (rc != 0) fail(h, name, "corrupt or truncated JPEG");
  return img;
}

std::vector<std::uint8_t> encode_jpeg(const Image& image, int quality) {
  DPL_CHECK(image.valid(), "encode_jpeg: the image claims ", image.height, " x ", image.width, " x ", image.channels,
            " but holds ", image.pixels.size(), " bytes");
  DPL_CHECK(image.height > 0 && image.width > 0, "encode_jpeg: expected a non-empty image, got ", image.height,
            " x ", image.width);
  DPL_CHECK(image.channels == 1 || image.channels == 3, "encode_jpeg: expected 1 (grayscale) or 3 (RGB) channels, got ",
            image.channels);
  DPL_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: expected a quality in 1..100, got ", quality);
  tjhandle h = compressor();
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  const bool rgb = image.channels == 3;
  const int rc = tjCompress2(h, image.pixels.data(), image.width, 0, image.height, rgb ? TJPF_RGB : TJPF_GRAY, &buf,
                             &len, rgb ? TJSAMP_420 : TJSAMP_GRAY, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(buf, [](unsigned char* p) { tjFree(p); });
  if (rc != 0) DPL_FAIL("encode_jpeg: TurboJPEG could not encode a ", image.height, " x ", image.width, " x ",
                        image.channels, " image: ", tjGetErrorStr2(h));
  return std::vector<std::uint8_t>(buf, buf + len);
}

}  // namespace dpl::data
