// The IDX reader's gzip path inflates no further than the header promises: a small file that
// would decompress to gigabytes (a gzip bomb) is refused with dpl::Error, within little memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "dpl/data/idx.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Bytes = std::vector<unsigned char>;

// An IDX label file of n labels.
Bytes idx_labels(std::uint32_t n) {
  Bytes b{0, 0, 8, 1, static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
          static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
  for (std::uint32_t i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(i % 10));
  return b;
}

// Bits into bytes, least significant first, as deflate packs them.
struct BitWriter {
  Bytes bytes;
  int used = 8;  // bits used of the last byte
  void put(std::uint32_t value, int n) {
    for (int i = 0; i < n; ++i) {
      if (used == 8) {
        bytes.push_back(0);
        used = 0;
      }
      bytes.back() = static_cast<unsigned char>(bytes.back() | ((value >> i) & 1u) << used++);
    }
  }
  // A Huffman code goes in most significant bit first.
  void put_code(std::uint32_t code, int n) {
    for (int i = n - 1; i >= 0; --i) put(code >> i & 1u, 1);
  }
};

std::uint32_t crc32_of(const Bytes& data) {
  std::uint32_t crc = 0xffffffffu;
  for (const unsigned char byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_le32(Bytes& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// One gzip member: content in a stored block, then `blocks` fixed-Huffman blocks that each repeat
// the last byte 32006 x 258 times (8.3 MB of output from 52 kB of file), then an empty final
// block and the trailer (whose checksum covers the content alone, as a forger's might).
Bytes gzip_bomb(const Bytes& content, std::size_t blocks) {
  Bytes out{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  const auto n = static_cast<std::uint16_t>(content.size());
  out.insert(out.end(), {0, static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                         static_cast<unsigned char>(~n), static_cast<unsigned char>(~n >> 8)});
  out.insert(out.end(), content.begin(), content.end());
  // 3 header bits, 13 bits per run (length 258: code 285; distance 1: code 0), 7 bits of end:
  // 32006 runs fill whole bytes, so the block can be repeated as bytes.
  BitWriter block;
  block.put(0, 1);  // not the final block
  block.put(1, 2);  // fixed Huffman codes
  for (int run = 0; run < 32006; ++run) {
    block.put_code(0xc5, 8);
    block.put_code(0, 5);
  }
  block.put_code(0, 7);
  EXPECT_EQ(block.used, 8);
  for (std::size_t i = 0; i < blocks; ++i) out.insert(out.end(), block.bytes.begin(), block.bytes.end());
  out.insert(out.end(), {1, 0, 0, 0xff, 0xff});  // the final block: stored, empty
  put_le32(out, crc32_of(content));
  put_le32(out, static_cast<std::uint32_t>(content.size()));
  return out;
}

void write_file(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// This process's resident memory now, in bytes.
long resident_bytes() {
  long pages = 0, resident = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// The most resident memory this process has had, in bytes.
long peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss * 1024L;  // kilobytes on Linux
}

TEST(IdxGzipBound, ABombOfTwentyMegabytesIsRefusedWithinAHundredMegabytes) {
  test::TempDir dir("dpl_gzip_bomb");
  const std::string path = dir.file("labels.gz");
  {
    // 10 labels, then 3.2 GB more in about 20 MB of file.
    const Bytes bomb = gzip_bomb(idx_labels(10), 384);
    ASSERT_GT(bomb.size(), 19u << 20);
    write_file(path, bomb);
  }
  const long before = resident_bytes();
  DPL_EXPECT_ERROR(data::read_idx_labels(path),
                   AllOf(HasSubstr(path), HasSubstr("decompresses to more than the 18 bytes its header promises"),
                         HasSubstr("count: 10"), HasSubstr("without inflating the rest")));
  const long grew = peak_resident_bytes() - before;
  EXPECT_LT(grew, 100L << 20) << "peak resident memory grew by " << grew / (1 << 20) << " MiB";
}

TEST(IdxGzipBound, OneByteBeyondThePromiseIsRefusedAndThePromiseItselfReads) {
  test::TempDir dir("dpl_gzip_bound");
  Bytes content = idx_labels(7);
  write_file(dir.file("exact.gz"), gzip_bomb(content, 0));
  EXPECT_EQ(data::read_idx_labels(dir.file("exact.gz")).numel(), 7);
  content.push_back(3);
  write_file(dir.file("longer.gz"), gzip_bomb(content, 0));
  DPL_EXPECT_ERROR(data::read_idx_labels(dir.file("longer.gz")),
                   HasSubstr("1 unexpected trailing bytes: its header promises data ending at byte offset 15"));
  // The header's promise, not the stream, bounds the images too: a bomb after valid images.
  Bytes images{0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  images.resize(images.size() + 12, 7);
  write_file(dir.file("images.gz"), gzip_bomb(images, 64));
  DPL_EXPECT_ERROR(data::read_idx_images(dir.file("images.gz")),
                   HasSubstr("decompresses to more than the 28 bytes its header promises (count, rows, cols: 2 x 2 x 3)"));
}

}  // namespace
