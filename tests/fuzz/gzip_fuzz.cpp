// The IDX reader's gzip path. Mutated gzip bytes mostly fail zlib's checksum early, so besides
// raw streams (inputs that start with 1f 8b) this harness builds valid ones: the first byte picks
// how many members, the compression level and a damage, the rest is the IDX content. Then:
//  - undamaged, the gzip file must read exactly as the plain content does (same success, same
//    values), whatever the members' split;
//  - truncated, or followed by bytes that are not a whole member, it must raise dpl::Error;
//  - followed by a member of 64 MiB of zeros (a small gzip bomb: control's level bits 12 to 15,
//    undamaged), it must be refused whenever the plain content reads, since the zeros reach past
//    what the header promises; the reader stops inflating there (libFuzzer's -rss_limit_mb
//    catches one that does not stop before a larger bomb).
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dpl/data/idx.hpp"
#include "fuzz_util.hpp"

using namespace dpl;

namespace {

using Bytes = std::vector<std::uint8_t>;

void append_gzip_member(Bytes& out, const std::uint8_t* data, std::size_t size, int level) {
  z_stream zs{};
  fuzz::require(deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK,
                "zlib could not start deflating");
  const std::size_t start = out.size();
  out.resize(start + deflateBound(&zs, static_cast<uLong>(size)));
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = out.data() + start;
  zs.avail_out = static_cast<uInt>(out.size() - start);
  fuzz::require(deflate(&zs, Z_FINISH) == Z_STREAM_END, "zlib could not finish deflating");
  out.resize(start + zs.total_out);
  deflateEnd(&zs);
}

// The outcome of one reader: whether it accepted the file, and the tensor's bytes if it did.
struct Outcome {
  bool ok = false;
  Shape shape;
  std::vector<std::uint8_t> bytes;
};

template <typename Read>
Outcome outcome(Read read, const std::string& path) {
  Outcome o;
  o.ok = fuzz::accepts([&] {
    const Tensor t = read(path);
    o.shape = t.shape();
    const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
    o.bytes.assign(p, p + t.nbytes());
  });
  return o;
}

bool same(const Outcome& a, const Outcome& b) { return a.ok == b.ok && a.shape == b.shape && a.bytes == b.bytes; }

// One gzip member of 64 MiB of zeros (about 64 KiB), compressed once.
const Bytes& zeros_member() {
  static const Bytes member = [] {
    Bytes out;
    const Bytes zeros(std::size_t{64} << 20, 0);
    append_gzip_member(out, zeros.data(), zeros.size(), 9);
    return out;
  }();
  return member;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemoryFile gz_file("dpl-fuzz-gzip");
  static fuzz::MemoryFile plain_file("dpl-fuzz-gzip-plain");
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {  // a raw stream, damaged or not
    const std::string& path = gz_file.write(data, size);
    fuzz::accepts([&] { data::read_idx_images(path); });
    fuzz::accepts([&] { data::read_idx_labels(path); });
    return 0;
  }
  if (size == 0) return 0;
  const unsigned control = data[0];
  const std::uint8_t* content = data + 1;
  const std::size_t n = size - 1;
  const unsigned members = 1 + (control & 3u);
  const int level = static_cast<int>((control >> 2) % 10);
  const unsigned damage = control >> 6;  // 0 none, 1 truncated, 2 a stray byte after, 3 half a member after
  const bool bomb = damage == 0 && ((control >> 2) & 15u) >= 12;

  Bytes gz;
  for (unsigned m = 0; m < members; ++m) {
    const std::size_t begin = n * m / members, end = n * (m + 1) / members;
    append_gzip_member(gz, content + begin, end - begin, level);
  }
  if (damage == 1) gz.resize(gz.size() - std::min<std::size_t>(gz.size() - 2, 1 + n % 8));
  if (damage == 2) gz.push_back(static_cast<std::uint8_t>(n));
  if (damage == 3) gz.insert(gz.end(), {0x1f, 0x8b, 0x08});
  if (bomb) gz.insert(gz.end(), zeros_member().begin(), zeros_member().end());

  const std::string& gz_path = gz_file.write(gz.data(), gz.size());
  const Outcome images = outcome(data::read_idx_images, gz_path);
  const Outcome labels = outcome(data::read_idx_labels, gz_path);
  if (damage != 0) {
    fuzz::require(!images.ok && !labels.ok, "a damaged gzip file (damage " + std::to_string(damage) + ") was accepted");
    return 0;
  }
  // Content that is itself gzip is decompressed once from the plain file but not from ours.
  if (n >= 2 && content[0] == 0x1f && content[1] == 0x8b) return 0;
  const std::string& plain_path = plain_file.write(content, n);
  if (bomb) {
    // Content of exactly the promised length reads; with the zeros after it, it must not.
    fuzz::require(!outcome(data::read_idx_images, plain_path).ok || !images.ok,
                  "read_idx_images accepted a file that decompresses past its header's promise");
    fuzz::require(!outcome(data::read_idx_labels, plain_path).ok || !labels.ok,
                  "read_idx_labels accepted a file that decompresses past its header's promise");
    return 0;
  }
  fuzz::require(same(images, outcome(data::read_idx_images, plain_path)),
                "read_idx_images: the gzip file reads differently from its plain content");
  fuzz::require(same(labels, outcome(data::read_idx_labels, plain_path)),
                "read_idx_labels: the gzip file reads differently from its plain content");
  return 0;
}
