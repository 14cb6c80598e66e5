#include "dpl/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <vector>

#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {

using Bytes = std::vector<unsigned char>;

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string hex8(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", v);
  return buf;
}

Bytes read_whole_file(const char* op, const std::string& path) {
  // Linux opens a folder as a stream whose length reads as huge; name it instead.
  std::error_code ec;
  DPL_CHECK(!std::filesystem::is_directory(path, ec), op, ": ", path, " is a folder; expected an IDX file");
  std::ifstream in(path, std::ios::binary);
  if (!in) DPL_FAIL(op, ": cannot open ", path, ": ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff len = in.tellg();
  DPL_CHECK(len >= 0, op, ": cannot determine the length of ", path);
  in.seekg(0, std::ios::beg);
  Bytes bytes(static_cast<std::size_t>(len));
  if (len > 0) in.read(reinterpret_cast<char*>(bytes.data()), len);
  DPL_CHECK(in.good() || (len == 0), op, ": reading ", path, " failed after ", in.gcount(), " of ", len, " bytes");
  return bytes;
}

bool is_gzip(const Bytes& b) { return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b; }

// How far a decompressed file may grow: given the bytes inflated so far, the most it may hold
// (its header's promise once the header is in, plus one byte to show the excess), or
// kUnbounded while the header is incomplete.
using OutputBound = std::function<std::uint64_t(const Bytes& out)>;
constexpr std::uint64_t kUnbounded = std::numeric_limits<std::uint64_t>::max();

// Inflates every gzip member of `in` (gzip allows several, concatenated), never past what bound
// allows: a stream that would decompress to more stops there, its output cut to the bound, and
// *cut says so. A small file that inflates to gigabytes (a gzip bomb)
// thus costs at most the memory its header promises.
Bytes gunzip(const char* op, const std::string& path, const Bytes& in, const OutputBound& bound, bool* cut) {
  Bytes out;
  *cut = false;
  // The trailer's ISIZE is the last member's size mod 2^32: a good first guess for one member,
  // used once the header's promise bounds it.
  std::uint64_t isize = 0;
  if (in.size() >= 18) {
    const std::size_t k = in.size() - 4;
    isize = static_cast<std::uint32_t>(in[k]) | static_cast<std::uint32_t>(in[k + 1]) << 8 |
            static_cast<std::uint32_t>(in[k + 2]) << 16 | static_cast<std::uint32_t>(in[k + 3]) << 24;
  }
  z_stream zs{};
  DPL_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, op, ": zlib could not start inflating ", path);
  struct End {
    z_stream* s;
    ~End() { inflateEnd(s); }
  } end{&zs};

  std::size_t consumed = 0;  // input bytes handed to zlib so far
  constexpr std::size_t kChunk = 1 << 20;
  std::uint64_t limit = kUnbounded;
  while (true) {
    if (zs.avail_in == 0 && consumed < in.size()) {
      const std::size_t n = std::min<std::size_t>(in.size() - consumed, std::numeric_limits<uInt>::max());
      zs.next_in = const_cast<Bytef*>(in.data() + consumed);
      zs.avail_in = static_cast<uInt>(n);
      consumed += n;
    }
    const std::size_t before = out.size();
    std::uint64_t room = std::max<std::size_t>(kChunk, out.capacity() - before);
    if (limit != kUnbounded) room = std::min<std::uint64_t>(room, limit - before);
    out.resize(before + static_cast<std::size_t>(room));
    zs.next_out = out.data() + before;
    zs.avail_out = static_cast<uInt>(std::min<std::uint64_t>(room, std::numeric_limits<uInt>::max()));
    const uInt offered = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(before + (offered - zs.avail_out));
    if (limit == kUnbounded) {
      limit = bound(out);
      // Deflate cannot expand more than about 1032:1, which bounds what a corrupt trailer can ask.
      if (limit != kUnbounded)
        out.reserve(static_cast<std::size_t>(
            std::min({limit, std::max<std::uint64_t>(isize, out.size()), static_cast<std::uint64_t>(in.size()) * 1032})));
    }
    const std::size_t in_pos = consumed - zs.avail_in;
    const bool complete = rc == Z_STREAM_END && in_pos == in.size();
    if (out.size() >= limit && !complete) {
      out.resize(static_cast<std::size_t>(limit));
      *cut = true;
      return out;
    }
    if (rc == Z_STREAM_END) {
      if (complete) break;
      // Another member may follow; anything else after a complete stream is corruption.
      DPL_CHECK(in.size() - in_pos >= 2 && in[in_pos] == 0x1f && in[in_pos + 1] == 0x8b, op, ": ", path,
                ": unexpected bytes after the end of the gzip stream at compressed byte offset ", in_pos,
                " (expected end of file or another gzip member starting with 1f 8b)");
      DPL_CHECK(inflateReset(&zs) == Z_OK, op, ": zlib could not restart inflating ", path);
      continue;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR || rc == Z_MEM_ERROR) {
      DPL_FAIL(op, ": ", path, ": corrupt gzip data near compressed byte offset ", in_pos, " of ", in.size(), " (",
               zs.msg ? zs.msg : "zlib error", ")");
    }
    if (zs.avail_in == 0 && consumed == in.size() && zs.avail_out != 0) {
      // zlib had room to write and all input, yet did not reach the end of the stream.
      DPL_FAIL(op, ": ", path, ": the gzip stream is truncated: it ends at compressed byte offset ", in.size(),
               " (after ", out.size(), " decompressed bytes) without its end-of-stream marker");
    }
  }
  return out;
}

std::uint32_t be32(const Bytes& b, std::size_t at) {
  return static_cast<std::uint32_t>(b[at]) << 24 | static_cast<std::uint32_t>(b[at + 1]) << 16 |
         static_cast<std::uint32_t>(b[at + 2]) << 8 | static_cast<std::uint32_t>(b[at + 3]);
}

const char* idx_type_name(unsigned code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

// Extents as the messages write them: "60000 x 28 x 28".
std::string dims_text(const std::vector<std::uint32_t>& dims) {
  std::string text;
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? " x " : "") + std::to_string(dims[i]);
  return text;
}

// The payload of an unsigned-byte IDX file of `ndims` dimensions, after every header check.
struct IdxBytes {
  Bytes bytes;                     // the whole (decompressed) file
  std::vector<std::uint32_t> dims;
  std::size_t data_offset = 0;     // where the elements start
};

IdxBytes read_ubyte_idx(const char* op, const std::string& path, unsigned ndims, const char* kind,
                        const char* dims_meaning) {
  IdxBytes r;
  Bytes raw = read_whole_file(op, path);
  const bool gz = is_gzip(raw);
  const std::uint32_t expected_magic = 0x00000800u | ndims;
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  // Inflating stops one byte past what the header promises; a header that is wrong, or whose
  // extents overflow, stops it at once, and the checks below name what is wrong.
  const OutputBound bound = [&](const Bytes& out) -> std::uint64_t {
    if (out.size() < header) return kUnbounded;
    if (be32(out, 0) != expected_magic) return header;
    std::uint64_t elements = 1;
    for (unsigned i = 0; i < ndims; ++i) {
      const std::uint64_t d = be32(out, 4 + 4 * i);
      if (d != 0 && elements > (kUnbounded - header - 1) / d) return header;
      elements *= d;
    }
    return header + elements + 1;
  };
  bool cut = false;
  r.bytes = gz ? gunzip(op, path, raw, bound, &cut) : std::move(raw);
  const Bytes& b = r.bytes;
  const std::string where = gz ? " (offsets count decompressed bytes)" : "";

  DPL_CHECK(b.size() >= 4, op, ": ", path, " is truncated: it holds ", b.size(),
            " bytes but an IDX file starts with a 4-byte magic number (expected ", hex32(expected_magic), " for ",
            kind, ")", where);
  const std::uint32_t magic = be32(b, 0);
  DPL_CHECK(b[0] == 0 && b[1] == 0, op, ": ", path, ": bad magic number ", hex32(magic),
            " at byte offset 0; expected ", hex32(expected_magic), " (IDX ", kind,
            "); this is not an IDX file", where);
  DPL_CHECK(b[2] == 0x08, op, ": ", path, ": bad magic number ", hex32(magic), " at byte offset 0; expected ",
            hex32(expected_magic), ": element type byte (offset 2) is ", hex8(b[2]), " (", idx_type_name(b[2]),
            ") but ", kind, " must be unsigned bytes (0x08)", where);
  DPL_CHECK(b[3] == ndims, op, ": ", path, ": bad magic number ", hex32(magic), " at byte offset 0; expected ",
            hex32(expected_magic), ": the dimension count byte (offset 3) is ", static_cast<unsigned>(b[3]), " but ",
            kind, " have ", ndims, " (", dims_meaning, ")", where);

  DPL_CHECK(b.size() >= header, op, ": ", path, " is truncated: the header of ", kind, " needs ", header,
            " bytes (magic and ", ndims, " extents) but the file ends at byte offset ", b.size(), where);
  std::uint64_t elements = 1;
  bool overflow = false;
  for (unsigned i = 0; i < ndims; ++i) {
    const std::uint32_t d = be32(b, 4 + 4 * i);
    r.dims.push_back(d);
    if (d != 0 && elements > std::numeric_limits<std::uint64_t>::max() / d) overflow = true;
    elements *= d;
  }
  DPL_CHECK(!overflow, op, ": ", path, ": the extents in the header (", dims_meaning,
            ") multiply to more elements than any file can hold");
  const std::uint64_t expected_len = header + elements;
  DPL_CHECK(!cut, op, ": ", path, " decompresses to more than the ", expected_len, " bytes its header promises (",
            dims_meaning, ": ", dims_text(r.dims), "); refused after inflating ", b.size(),
            " bytes, without inflating the rest");
  if (b.size() < expected_len) {
    DPL_FAIL(op, ": ", path, " is truncated: its header promises ", dims_text(r.dims), " (", dims_meaning, ") = ", elements,
             " bytes of data from byte offset ", header, " to ", expected_len, ", but the file ends at byte offset ",
             b.size(), where);
  }
  DPL_CHECK(b.size() == expected_len, op, ": ", path, " has ", b.size() - expected_len,
            " unexpected trailing bytes: its header promises data ending at byte offset ", expected_len,
            " but the file is ", b.size(), " bytes long", where);
  r.data_offset = header;
  return r;
}

}  // namespace

Tensor read_idx_images(const std::string& path) {
  const char* op = "read_idx_images";
  IdxBytes idx = read_ubyte_idx(op, path, 3, "images", "count, rows, cols");
  const auto n = static_cast<std::int64_t>(idx.dims[0]);
  // The header's checks bound count x rows x cols by the file's length, but a file of no images
  // may still claim rows x cols up to 2^64 - 2^33 + 1, which no tensor extent holds.
  const std::uint64_t pixels_u64 = static_cast<std::uint64_t>(idx.dims[1]) * idx.dims[2];
  DPL_CHECK(pixels_u64 <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), op, ": ", path,
            ": the header promises images of ", idx.dims[1], " x ", idx.dims[2], " = ", pixels_u64,
            " pixels; expected at most 2^63 - 1 pixels per image");
  const auto pixels = static_cast<std::int64_t>(pixels_u64);
  Tensor out = Tensor::empty({n, pixels}, kFloat32);
  float* dst = out.data<float>();
  const unsigned char* src = idx.bytes.data() + idx.data_offset;
  constexpr float kScale = 1.0f / 255.0f;
  const std::int64_t total = n * pixels;
  for (std::int64_t i = 0; i < total; ++i) dst[i] = static_cast<float>(src[i]) * kScale;
  return out;
}

Tensor read_idx_labels(const std::string& path) {
  const char* op = "read_idx_labels";
  IdxBytes idx = read_ubyte_idx(op, path, 1, "labels", "count");
  const auto n = static_cast<std::int64_t>(idx.dims[0]);
  Tensor out = Tensor::empty({n}, kInt32);
  std::int32_t* dst = out.data<std::int32_t>();
  const unsigned char* src = idx.bytes.data() + idx.data_offset;
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
  return out;
}

}  // namespace dpl::data
