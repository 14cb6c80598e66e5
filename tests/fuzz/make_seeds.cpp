// Writes the fuzzing harnesses' seed corpora with dpl's own writers (and zlib), so that every seed
// is a valid input that the fuzzer then mutates: fuzz_make_seeds <folder>, normally
// tests/fuzz/seeds. Files it does not write are kept: the inputs findings left there
// (regression-*), and the jpeg harness's CMYK and YCCK JPEGs and PNGs (fixture-*, copies of
// tests/golden/images/, written by tests/golden/make_image_fixtures.py), which dpl cannot encode.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_replica.hpp"
#include "dpl/data/image/jpeg.hpp"
#include "dpl/serialize/safetensors.hpp"
#include "dpl/serialize/weights.hpp"

using namespace dpl;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

fs::path root;

void put(const std::string& harness, const std::string& name, const Bytes& bytes) {
  const fs::path dir = root / harness;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  DPL_CHECK(out.good(), "make_seeds: cannot write ", (dir / name).string());
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// An IDX file of unsigned bytes: magic 0x0000080<dims>, big-endian extents, then the bytes.
Bytes idx(const std::vector<std::uint32_t>& dims) {
  Bytes b{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  std::uint64_t n = 1;
  for (std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(d >> shift));
    n *= d;
  }
  for (std::uint64_t i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(i * 37));
  return b;
}

Bytes gzip(const Bytes& in, int level) {
  z_stream zs{};
  DPL_CHECK(deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
  Bytes out(deflateBound(&zs, static_cast<uLong>(in.size())));
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  DPL_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END, "deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The gzip harness's own input: a control byte (members, level, damage), then the IDX content.
Bytes gzip_input(std::uint8_t control, const Bytes& content) { return cat(Bytes{control}, content); }

data::Image pattern(int height, int width, int channels) {
  data::Image img = data::Image::zeros(height, width, channels);
  for (std::size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<std::uint8_t>((i * 7) ^ (i >> 3));
  return img;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <seed folder, e.g. tests/fuzz/seeds>\n", argv[0]);
    return 2;
  }
  root = argv[1];

  const Bytes images = idx({2, 3, 4}), labels = idx({5}), empty_images = idx({0, 28, 28});
  put("idx", "images-2x3x4", images);
  put("idx", "labels-5", labels);
  put("idx", "images-empty", empty_images);
  put("idx", "images-2x3x4.gz", gzip(images, 6));
  put("idx", "labels-5-two-members.gz", cat(gzip(Bytes(labels.begin(), labels.begin() + 6), 1),
                                             gzip(Bytes(labels.begin() + 6, labels.end()), 9)));

  put("gzip", "images-one-member", gzip_input(0x18, images));                // level 6
  put("gzip", "labels-three-members", gzip_input(0x26, labels));             // 3 members, level 9
  put("gzip", "images-stored-two-members", gzip_input(0x01, images));        // level 0: stored blocks
  put("gzip", "images-truncated", gzip_input(0x58, images));                 // damage 1
  put("gzip", "labels-trailing-byte", gzip_input(0x98, labels));             // damage 2
  put("gzip", "labels-half-member-after", gzip_input(0xd8, labels));         // damage 3
  put("gzip", "raw-labels.gz", gzip(labels, 6));

  put("image_list", "plain", text("train/cat/1.jpg 0\ntrain/dog/2.jpg 1\n/abs/3.jpg 12\n"));
  put("image_list", "blanks-and-crlf", text("\n  a.jpg\t7\r\n\r\nb.jpg   2147483647\r\n\n"));
  put("image_list", "bad-label", text("a.jpg 0\nb.jpg x1\n"));
  put("image_list", "three-fields", text("a.jpg 0\nb c.jpg 1\n"));
  put("image_list", "negative-and-huge", text("a.jpg -1\nb.jpg 99999999999999999999\n"));

  const std::string tmp = (fs::temp_directory_path() / "dpl_make_seeds.safetensors").string();
  {
    Generator init(1);
    nn::MLP model(2, 3, 2, init);
    serialize::save_weights(model, tmp);
    put("safetensors", "mlp-weights", file_bytes(tmp));
  }
  serialize::save_safetensors(
      tmp,
      {{"f32", Tensor::from_vector<float>({1.f, -2.f, 3.5f}, {3})},
       {"i64", Tensor::from_vector<std::int64_t>({1, 2, 3, 4}, {2, 2})},
       {"i32", Tensor::from_vector<std::int32_t>({7}, {1, 1, 1})},
       {"bf16", Tensor::from_vector<float>({0.5f, 0.25f}, {2}).to(kBFloat16)},
       {"f16", Tensor::from_vector<float>({0.5f, 8.f}, {2}).to(kFloat16)},
       {"empty", Tensor::empty({0, 3}, kFloat32)},
       {"scalar", Tensor::from_vector<float>({42.f}, {})}},
      {{"format", "pt"}, {"note", "every dtype"}});
  put("safetensors", "every-dtype", file_bytes(tmp));

  {
    fuzz::Replica r;
    r.step();
    train::TrainingState s = r.state();
    s.values = {{"note", "one step"}};
    train::save_checkpoint(tmp, s);
    put("checkpoint", "after-one-step", file_bytes(tmp));
    r.step();  // the end of the first epoch: the log has an entry
    r.step();
    train::save_checkpoint(tmp, r.state());
    put("checkpoint", "after-three-steps", file_bytes(tmp));
  }
  fs::remove(tmp);

  put("jpeg", "gray-8x8", data::encode_jpeg(pattern(8, 8, 1), 90));
  put("jpeg", "rgb-12x16", data::encode_jpeg(pattern(12, 16, 3), 75));
  put("jpeg", "rgb-17x33-q30", data::encode_jpeg(pattern(17, 33, 3), 30));
  Bytes cut = data::encode_jpeg(pattern(16, 16, 3), 90);
  cut.resize(cut.size() * 2 / 3);
  put("jpeg", "rgb-16x16-truncated", cut);
  std::printf("seeds written under %s\n", root.string().c_str());
  return 0;
}
