#include "dpl/serialize/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/atomic_file.hpp"
#include "dpl/core/error.hpp"

namespace dpl::serialize {

// The format's bytes are little-endian and tensors are written and read as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace {

constexpr const char* kMetadataKey = "__metadata__";
constexpr std::uint64_t kHeaderLengthBytes = 8;
// One write() or pread() moves at most this much; Linux caps a single call near 2 GiB anyway.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

const char* format_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return "F32";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat16: return "F16";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
    case DType::kUInt8: return "U8";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64,
                  DType::kUInt8}) {
    if (s == format_dtype(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

using detail::errno_text;

// Closes a descriptor when the scope ends, whatever way it ends.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// ------------------------------------------------------------------------------------------------
// writing

// Everything save_safetensors writes, prepared before any file is touched so that bad input never
// creates one.
struct Prepared {
  std::string header;  // JSON, padded with spaces to a multiple of 8
  std::vector<Tensor> host;
};

Prepared prepare(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[kMetadataKey] = std::move(meta);
  }
  Prepared out;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DPL_CHECK(!name.empty(), "save_safetensors: ", path, ": a tensor has an empty name");
    DPL_CHECK(name != kMetadataKey, "save_safetensors: ", path, ": '", kMetadataKey,
              "' is reserved for the metadata and cannot name a tensor");
    DPL_CHECK(names.insert(name).second, "save_safetensors: ", path, ": the name '", name, "' appears twice");
    DPL_CHECK(t.defined(), "save_safetensors: ", path, ": tensor '", name, "' is undefined");
    Tensor h = t.to(Device::cpu()).contiguous();
    const std::uint64_t n = h.nbytes();
    header[name] = {{"dtype", format_dtype(h.dtype())}, {"shape", h.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    out.host.push_back(std::move(h));
  }
  try {
    out.header = header.dump();
  } catch (const nlohmann::json::exception& e) {
    // Names and metadata must be UTF-8 for the header to be JSON.
    DPL_FAIL("save_safetensors: ", path, ": cannot encode the header: ", e.what());
  }
  out.header.append((8 - out.header.size() % 8) % 8, ' ');
  return out;
}

// ------------------------------------------------------------------------------------------------
// reading

// One tensor as the header describes it.
struct Entry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

std::string json_shape(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The reader's context: the file and where its data section starts, for messages.
struct Reader {
  std::string path;
  std::uint64_t file_size = 0;
  std::uint64_t data_start = 0;

  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    DPL_FAIL("load_safetensors: ", path, ": ", std::forward<Args>(args)...);
  }

  // A non-negative integer JSON value, or an error naming the tensor and the field.
  std::uint64_t count(const nlohmann::json& v, const std::string& name, const char* field) const {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
    fail("tensor '", name, "': expected non-negative integers in \"", field, "\", got ", v.dump());
  }

  Entry entry(const std::string& name, const nlohmann::json& v) const {
    if (!v.is_object()) fail("tensor '", name, "': expected an object with dtype, shape and data_offsets, got ", v.dump());
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) fail("tensor '", name, "': the header entry has no \"", key, "\"");
    Entry e;
    e.name = name;
    const nlohmann::json& dtype = v["dtype"];
    if (!dtype.is_string() || !parse_dtype(dtype.get<std::string>(), &e.dtype))
      fail("tensor '", name, "': unknown dtype ", dtype.dump(), " (dpl reads F32, BF16, F16, I32 and I64)");
    const nlohmann::json& shape = v["shape"];
    if (!shape.is_array()) fail("tensor '", name, "': expected \"shape\" to be an array, got ", shape.dump());
    // span: the bytes of the non-zero extents alone. An empty tensor ([0, 2^62, 2^62]) holds no
    // bytes, but its other extents must still multiply to a count a tensor can hold.
    std::uint64_t span = dtype_size(e.dtype);
    bool empty = false;
    for (const nlohmann::json& d : shape) {
      const std::uint64_t extent = count(d, name, "shape");
      if (extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (extent != 0 && span > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / extent))
        fail("tensor '", name, "': shape ", shape.dump(), " is too large: its non-zero extents must multiply to at "
             "most 2^63 - 1 bytes");
      if (extent == 0) empty = true;
      else span *= extent;
      e.shape.push_back(static_cast<std::int64_t>(extent));
    }
    const std::uint64_t bytes = empty ? 0 : span;
    const nlohmann::json& offsets = v["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
      fail("tensor '", name, "': expected \"data_offsets\" to be [begin, end], got ", offsets.dump());
    e.begin = count(offsets[0], name, "data_offsets");
    e.end = count(offsets[1], name, "data_offsets");
    const std::uint64_t data_size = file_size - data_start;
    if (e.begin > e.end) fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] are reversed");
    if (e.end > data_size)
      fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] reach past the end of the data section (",
           data_size, " bytes, from byte offset ", data_start, " to the end of the file at ", file_size, ")");
    if (e.end - e.begin != bytes)
      fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
           " bytes, but shape ", json_shape(e.shape), " of ", format_dtype(e.dtype), " needs ", bytes);
    return e;
  }

  // The data must be covered exactly: tensors one after another, no overlap, no gap, nothing after.
  void check_layout(std::vector<Entry>& entries) const {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : (a.end != b.end ? a.end < b.end : a.name < b.name);
    });
    std::uint64_t pos = 0;
    const Entry* last = nullptr;
    for (const Entry& e : entries) {
      if (e.begin == e.end) continue;  // an empty tensor occupies no bytes and can sit anywhere
      if (e.begin < pos)
        fail("tensors '", last->name, "' (data_offsets [", last->begin, ", ", last->end, "]) and '", e.name,
             "' (data_offsets [", e.begin, ", ", e.end, "]) overlap");
      if (e.begin > pos)
        fail("bytes ", pos, " to ", e.begin, " of the data section (byte offset ", data_start + pos,
             ") belong to no tensor: a gap before tensor '", e.name, "'");
      pos = e.end;
      last = &e;
    }
    const std::uint64_t data_size = file_size - data_start;
    if (pos < data_size)
      fail(data_size - pos, " trailing bytes after the last tensor, from byte offset ", data_start + pos,
           " to the end of the file at ", file_size);
  }
};

// Reads exactly n bytes at offset or fails naming what was being read.
void read_at(const Reader& r, int fd, void* dst, std::size_t n, std::uint64_t offset, const std::string& what) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, std::min(n, kMaxChunk), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) r.fail("reading ", what, " at byte offset ", offset, " failed: ", errno_text(errno));
    if (got == 0) r.fail("the file ended at byte offset ", offset, " while reading ", what, " (changed while read?)");
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

}  // namespace

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& e) { return e.first == name; });
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  DPL_FAIL("SafetensorsFile: ", path, " holds no tensor named '", name, "'");
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  DPL_CHECK(!path.empty(), "save_safetensors: expected a file path, got an empty string");
  const Prepared prepared = prepare(path, tensors, metadata);

  detail::AtomicFile file(path, "save_safetensors");
  unsigned char length[kHeaderLengthBytes];
  const std::uint64_t n = prepared.header.size();
  for (std::size_t i = 0; i < kHeaderLengthBytes; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  file.write(length, sizeof length);
  file.write(prepared.header.data(), prepared.header.size());
  for (const Tensor& t : prepared.host)
    if (t.nbytes() > 0) file.write(t.raw_data(), t.nbytes());
  file.commit();
}

SafetensorsFile load_safetensors(const std::string& path) {
  Reader r;
  r.path = path;
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) r.fail("cannot open the file: ", errno_text(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) r.fail("cannot read the file's size: ", errno_text(errno));
  if (!S_ISREG(st.st_mode)) r.fail("not a regular file");
  r.file_size = static_cast<std::uint64_t>(st.st_size);

  if (r.file_size < kHeaderLengthBytes)
    r.fail("truncated: the file is ", r.file_size, " bytes long, shorter than the 8-byte header length at byte offset 0");
  unsigned char length[kHeaderLengthBytes];
  read_at(r, file.fd, length, sizeof length, 0, "the header length");
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < kHeaderLengthBytes; ++i) n |= static_cast<std::uint64_t>(length[i]) << (8 * i);
  if (n > r.file_size - kHeaderLengthBytes)
    r.fail("the header length at byte offset 0 is ", n, " bytes, but only ", r.file_size - kHeaderLengthBytes,
           " bytes follow it before the end of the file at byte offset ", r.file_size,
           " (a truncated file, or not safetensors)");
  r.data_start = kHeaderLengthBytes + n;

  std::string text(static_cast<std::size_t>(n), '\0');
  read_at(r, file.fd, text.data(), text.size(), kHeaderLengthBytes, "the header");
  // nlohmann keeps the last of repeated keys; the format has one entry per name, so note repeats.
  std::set<std::string> keys;
  std::string repeated;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (depth == 1 && event == nlohmann::json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second &&
          repeated.empty())
        repeated = parsed.get<std::string>();
      return true;
    });
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 within the header text.
    r.fail("malformed JSON header near byte offset ", kHeaderLengthBytes + (e.byte > 0 ? e.byte - 1 : 0), ": ",
           e.what());
  } catch (const nlohmann::json::exception& e) {
    // The parser also throws other errors than parse_error: a number beyond a double's range is
    // out_of_range (406), and carries no byte offset.
    r.fail("malformed JSON header: ", e.what());
  }
  if (!header.is_object()) r.fail("expected the header (from byte offset 8) to be a JSON object, got ", header.type_name());
  if (!repeated.empty()) r.fail("the header names '", repeated, "' more than once");

  SafetensorsFile out;
  out.path = path;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) r.fail("expected \"", kMetadataKey, "\" to be an object of strings, got ", value.dump());
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          r.fail("expected \"", kMetadataKey, "\" to map strings to strings, but '", mk, "' is ", mv.dump());
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(r.entry(key, value));
  }
  r.check_layout(entries);

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype));
    if (t.nbytes() > 0)
      read_at(r, file.fd, t.raw_data(), t.nbytes(), r.data_start + e.begin, "tensor '" + e.name + "'");
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace dpl::serialize
