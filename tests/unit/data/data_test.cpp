// IDX/MNIST reading, Dataset, shards and BatchIterator.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "dpl/data.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// A fresh folder under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("dpl_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}
void put_le32(Bytes& b, std::uint32_t v) {
  for (int s = 0; s <= 24; s += 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

std::uint8_t pixel(std::uint32_t image, std::uint32_t k) { return static_cast<std::uint8_t>((image * 31 + k * 7) % 256); }

Bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  Bytes b = {0, 0, 0x08, 3};
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = 0; k < rows * cols; ++k) b.push_back(pixel(i, k));
  return b;
}

Bytes idx_labels(std::uint32_t n) {
  Bytes b = {0, 0, 0x08, 1};
  put_be32(b, n);
  for (std::uint32_t i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(i % 10));
  return b;
}

std::uint32_t crc32(const Bytes& data) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::uint8_t byte : data) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A valid gzip member whose deflate data are "stored" blocks (no compression): enough to test
// the reader's gzip path without a compressor in the test.
Bytes gzip_stored(const Bytes& data) {
  Bytes out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255};
  std::size_t pos = 0;
  do {
    const std::size_t n = std::min<std::size_t>(65535, data.size() - pos);
    const bool final = pos + n == data.size();
    out.push_back(final ? 1 : 0);
    out.push_back(static_cast<std::uint8_t>(n & 0xFF));
    out.push_back(static_cast<std::uint8_t>(n >> 8));
    out.push_back(static_cast<std::uint8_t>(~n & 0xFF));
    out.push_back(static_cast<std::uint8_t>((~n >> 8) & 0xFF));
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(pos),
               data.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < data.size());
  put_le32(out, crc32(data));
  put_le32(out, static_cast<std::uint32_t>(data.size()));
  return out;
}

void write_file(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// The dpl::Error message of f(), or "" when it does not throw.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dpl::Error& e) {
    return e.what();
  }
  return "";
}

void expect_images(const Tensor& t, std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  ASSERT_EQ(t.dtype(), kFloat32);
  ASSERT_EQ(t.shape(), (Shape{n, rows * cols}));
  const std::vector<float> v = t.to_vector<float>();
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = 0; k < rows * cols; ++k)
      ASSERT_FLOAT_EQ(v[i * rows * cols + k], static_cast<float>(pixel(i, k)) / 255.0f) << i << "," << k;
}

void expect_labels(const Tensor& t, std::uint32_t n) {
  ASSERT_EQ(t.dtype(), kInt32);
  ASSERT_EQ(t.shape(), (Shape{n}));
  const std::vector<std::int32_t> v = t.to_vector<std::int32_t>();
  for (std::uint32_t i = 0; i < n; ++i) ASSERT_EQ(v[i], static_cast<std::int32_t>(i % 10));
}

// A data set whose sample i is (i, -i, 0.5) with label i, so every row names its origin.
Dataset id_dataset(std::int64_t n) {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {static_cast<float>(i), -static_cast<float>(i), 0.5f});
    y.push_back(static_cast<std::int32_t>(i));
  }
  return Dataset(Tensor::from_vector(x, {n, 3}), Tensor::from_vector(y, {n}));
}

std::vector<std::int32_t> ids_of(const Batch& b) {
  const std::vector<std::int32_t> y = b.y.to_vector<std::int32_t>();
  const std::vector<float> x = b.x.to_vector<float>();
  for (std::size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(x[3 * i], static_cast<float>(y[i]));  // images travel with their labels
    EXPECT_EQ(x[3 * i + 1], -static_cast<float>(y[i]));
  }
  return y;
}

// --- IDX ---------------------------------------------------------------------------------------

TEST(DataIdx, ReadsPlainFiles) {
  TempDir dir;
  write_file(dir.file("images"), idx_images(5, 3, 4));
  write_file(dir.file("labels"), idx_labels(5));
  expect_images(read_idx_images(dir.file("images")), 5, 3, 4);
  expect_labels(read_idx_labels(dir.file("labels")), 5);
}

TEST(DataIdx, ReadsGzipDetectedByContentNotName) {
  TempDir dir;
  // More than one 64 KiB stored block, and names that say the opposite of the content.
  write_file(dir.file("images.bin"), gzip_stored(idx_images(100, 28, 28)));
  write_file(dir.file("labels.gz"), idx_labels(100));
  write_file(dir.file("labels-gz"), gzip_stored(idx_labels(100)));
  expect_images(read_idx_images(dir.file("images.bin")), 100, 28, 28);
  expect_labels(read_idx_labels(dir.file("labels.gz")), 100);
  expect_labels(read_idx_labels(dir.file("labels-gz")), 100);
}

TEST(DataIdx, ReadsConcatenatedGzipMembers) {
  TempDir dir;
  const Bytes whole = idx_images(3, 2, 2);
  const Bytes a(whole.begin(), whole.begin() + 10), b(whole.begin() + 10, whole.end());
  Bytes two = gzip_stored(a);
  const Bytes gb = gzip_stored(b);
  two.insert(two.end(), gb.begin(), gb.end());
  write_file(dir.file("images"), two);
  expect_images(read_idx_images(dir.file("images")), 3, 2, 2);
}

TEST(DataIdx, EmptyCountIsValid) {
  TempDir dir;
  write_file(dir.file("images"), idx_images(0, 28, 28));
  EXPECT_EQ(read_idx_images(dir.file("images")).shape(), (Shape{0, 784}));
}

// Found by fuzzing (its seeds keep the input): rows x cols was multiplied in int64 and overflowed.
TEST(DataIdx, NoImagesOfMorePixelsThanATensorHoldsAreRefused) {
  TempDir dir;
  Bytes b = idx_images(0, 28, 28);
  for (int i = 8; i < 16; ++i) b[static_cast<std::size_t>(i)] = 0xff;  // 4294967295 x 4294967295
  write_file(dir.file("huge"), b);
  const std::string msg = error_of([&] { read_idx_images(dir.file("huge")); });
  EXPECT_NE(msg.find(dir.file("huge")), std::string::npos) << msg;
  EXPECT_NE(msg.find("4294967295 x 4294967295 = 18446744065119617025 pixels; expected at most 2^63 - 1"),
            std::string::npos)
      << msg;
  b[8] = 0x7f;  // 2147483647 x 4294967295 pixels fit: an empty tensor of that width
  write_file(dir.file("wide"), b);
  EXPECT_EQ(read_idx_images(dir.file("wide")).shape(), (Shape{0, std::int64_t{2147483647} * 4294967295}));
}

TEST(DataIdx, TruncatedDataNamesFileAndOffsets) {
  TempDir dir;
  Bytes b = idx_images(4, 3, 3);  // header 16 bytes + 36 pixels = 52 bytes
  b.resize(b.size() - 5);
  write_file(dir.file("short"), b);
  const std::string msg = error_of([&] { read_idx_images(dir.file("short")); });
  EXPECT_NE(msg.find(dir.file("short")), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 x 3 x 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 16 to 52"), std::string::npos) << msg;  // expected extent
  EXPECT_NE(msg.find("byte offset 47"), std::string::npos) << msg;  // actual end
}

TEST(DataIdx, TruncatedHeader) {
  TempDir dir;
  Bytes b = idx_labels(3);
  b.resize(6);
  write_file(dir.file("l"), b);
  const std::string msg = error_of([&] { read_idx_labels(dir.file("l")); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 6"), std::string::npos) << msg;
  write_file(dir.file("tiny"), Bytes{0, 0});
  EXPECT_NE(error_of([&] { read_idx_labels(dir.file("tiny")); }).find("truncated"), std::string::npos);
}

TEST(DataIdx, TruncatedGzipStream) {
  TempDir dir;
  Bytes gz = gzip_stored(idx_images(10, 4, 4));
  gz.resize(gz.size() / 2);
  write_file(dir.file("images.gz"), gz);
  const std::string msg = error_of([&] { read_idx_images(dir.file("images.gz")); });
  EXPECT_NE(msg.find(dir.file("images.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find("gzip stream is truncated"), std::string::npos) << msg;
}

TEST(DataIdx, CorruptGzipStream) {
  TempDir dir;
  Bytes gz = gzip_stored(idx_labels(10));
  gz[10] = 0x07;  // block type 3 is reserved
  write_file(dir.file("labels.gz"), gz);
  const std::string msg = error_of([&] { read_idx_labels(dir.file("labels.gz")); });
  EXPECT_NE(msg.find("corrupt gzip data"), std::string::npos) << msg;
}

TEST(DataIdx, BadMagicNamesExpectedAndFound) {
  TempDir dir;
  write_file(dir.file("labels"), idx_labels(3));
  std::string msg = error_of([&] { read_idx_images(dir.file("labels")); });
  EXPECT_NE(msg.find(dir.file("labels")), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad magic number 0x00000801 at byte offset 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 0x00000803"), std::string::npos) << msg;

  write_file(dir.file("zip"), Bytes{'P', 'K', 3, 4, 0, 0, 0, 0});
  msg = error_of([&] { read_idx_labels(dir.file("zip")); });
  EXPECT_NE(msg.find("not an IDX file"), std::string::npos) << msg;

  Bytes floats = idx_labels(2);
  floats[2] = 0x0D;
  write_file(dir.file("floats"), floats);
  msg = error_of([&] { read_idx_labels(dir.file("floats")); });
  EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unsigned bytes"), std::string::npos) << msg;
}

TEST(DataIdx, TrailingBytesAreRejected) {
  TempDir dir;
  Bytes b = idx_labels(3);
  b.push_back(0);
  write_file(dir.file("l"), b);
  const std::string msg = error_of([&] { read_idx_labels(dir.file("l")); });
  EXPECT_NE(msg.find("1 unexpected trailing bytes"), std::string::npos) << msg;
}

TEST(DataIdx, MissingFile) {
  const std::string msg = error_of([] { read_idx_labels("/nonexistent/dpl/labels"); });
  EXPECT_NE(msg.find("cannot open /nonexistent/dpl/labels"), std::string::npos) << msg;
}

// --- load_mnist --------------------------------------------------------------------------------

TEST(DataMnist, LoadsBothSplitsFromPlainOrGzipFiles) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte.gz"), gzip_stored(idx_images(7, 2, 3)));
  write_file(dir.file("train-labels-idx1-ubyte"), idx_labels(7));
  write_file(dir.file("t10k-images-idx3-ubyte"), idx_images(3, 2, 3));
  write_file(dir.file("t10k-labels-idx1-ubyte.gz"), gzip_stored(idx_labels(3)));
  const Dataset train = load_mnist(dir.str(), "train");
  const Dataset test = load_mnist(dir.str() + "/", "test");
  EXPECT_EQ(train.size(), 7);
  EXPECT_EQ(test.size(), 3);
  expect_images(train.images(), 7, 2, 3);
  expect_labels(test.labels(), 3);
}

TEST(DataMnist, CountMismatchNamesBothFiles) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), idx_images(5, 2, 2));
  write_file(dir.file("train-labels-idx1-ubyte"), idx_labels(4));
  const std::string msg = error_of([&] { load_mnist(dir.str(), "train"); });
  EXPECT_NE(msg.find(dir.file("train-images-idx3-ubyte") + " holds 5 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("train-labels-idx1-ubyte") + " holds 4 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 4"), std::string::npos) << msg;
}

TEST(DataMnist, MissingFileSaysHowToGetIt) {
  TempDir dir;
  const std::string msg = error_of([&] { load_mnist(dir.str(), "test"); });
  EXPECT_NE(msg.find(dir.file("t10k-images-idx3-ubyte")), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data"), std::string::npos) << msg;
}

TEST(DataMnist, AFolderWhereAFileShouldBeIsNamed) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("train-images-idx3-ubyte"));
  write_file(dir.file("train-labels-idx1-ubyte"), idx_labels(4));
  const std::string msg = error_of([&] { load_mnist(dir.str(), "train"); });
  EXPECT_NE(msg.find(dir.file("train-images-idx3-ubyte") + " is a folder; expected an IDX file"), std::string::npos)
      << msg;
}

// An existing file that cannot be read is not "missing": the reader names the system's reason.
// (root reads every file, so this runs only for other users.)
TEST(DataMnist, AnUnreadableFileIsReportedWithTheReason) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can read any file";
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), idx_images(4, 2, 2));
  write_file(dir.file("train-labels-idx1-ubyte"), idx_labels(4));
  std::filesystem::permissions(dir.file("train-images-idx3-ubyte"), std::filesystem::perms::none);
  const std::string msg = error_of([&] { load_mnist(dir.str(), "train"); });
  EXPECT_NE(msg.find("cannot open " + dir.file("train-images-idx3-ubyte") + ": Permission denied"),
            std::string::npos)
      << msg;
}

TEST(DataMnist, UnknownSplit) {
  const std::string msg = error_of([] { load_mnist(kDefaultMnistDir, "validation"); });
  EXPECT_NE(msg.find("\"validation\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"train\" or \"test\""), std::string::npos) << msg;
}

TEST(DataMnist, RealFashionMnist) {
  const std::string dir = kDefaultMnistDir;
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz") && !fs::exists(dir + "/train-images-idx3-ubyte")) {
    GTEST_SKIP() << dir << " is absent (Debian package dataset-fashion-mnist)";
  }
  const Dataset train = load_mnist();
  const Dataset test = load_mnist(dir, "test");
  ASSERT_EQ(train.images().shape(), (Shape{60000, 784}));
  ASSERT_EQ(test.images().shape(), (Shape{10000, 784}));
  for (const Dataset* ds : {&train, &test}) {
    std::vector<std::int64_t> per_class(10, 0);
    for (std::int32_t y : ds->labels().to_vector<std::int32_t>()) {
      ASSERT_GE(y, 0);
      ASSERT_LE(y, 9);
      ++per_class[static_cast<std::size_t>(y)];
    }
    // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
    for (std::int64_t c : per_class) EXPECT_EQ(c, ds->size() / 10);
    const std::vector<float> px = ds->images().narrow(0, 0, 100).to_vector<float>();
    const auto [lo, hi] = std::minmax_element(px.begin(), px.end());
    EXPECT_GE(*lo, 0.0f);
    EXPECT_LE(*hi, 1.0f);
    EXPECT_GT(*hi, 0.5f);
  }
}

// --- Dataset -----------------------------------------------------------------------------------

TEST(DataDataset, ValidatesItsTensors) {
  const Tensor x = Tensor::zeros({4, 3});
  EXPECT_NE(error_of([&] { Dataset(x, Tensor::zeros({3}, kInt32)); }).find("4 images"), std::string::npos);
  EXPECT_NE(error_of([&] { Dataset(x, Tensor::zeros({4})); }).find("int32"), std::string::npos);
  EXPECT_NE(error_of([&] { Dataset(Tensor::zeros({4, 3}, kInt32), Tensor::zeros({4}, kInt32)); }).find("float32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Dataset(x, Tensor::zeros({4, 1}, kInt32)); }).find("(N,)"), std::string::npos);
  const Dataset empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.sample_numel(), 0);
}

TEST(DataDataset, SliceSharesAndGatherCopies) {
  const Dataset ds = id_dataset(10);
  EXPECT_EQ(ds.sample_shape(), (Shape{3}));
  const Dataset s = ds.slice(2, 5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_TRUE(s.images().shares_storage_with(ds.images()));
  EXPECT_EQ(s.labels().to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 3, 4, 5, 6}));
  const Dataset g = ds.gather({9, 0, 9});
  EXPECT_FALSE(g.images().shares_storage_with(ds.images()));
  EXPECT_EQ(g.labels().to_vector<std::int32_t>(), (std::vector<std::int32_t>{9, 0, 9}));
  EXPECT_EQ(g.images().to_vector<float>()[3], 0.0f);
  EXPECT_NE(error_of([&] { ds.slice(8, 3); }).find("[8, 11)"), std::string::npos);
  EXPECT_NE(error_of([&] { ds.gather({1, 10}); }).find("index 10 at position 1"), std::string::npos);
}

TEST(DataDataset, PermutationIsSeeded) {
  Generator a(5), b(5), c(6);
  const auto pa = permutation(100, a), pb = permutation(100, b), pc = permutation(100, c);
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);
  std::vector<std::int64_t> sorted = pa;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> iota(100);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
}

// --- shards ------------------------------------------------------------------------------------

TEST(DataShard, EqualLengthsCoverEverySampleOnce) {
  for (std::int64_t n : {1, 2, 3, 5, 10, 11, 12, 60000, 60001}) {
    for (int size : {1, 2, 3, 4, 7, 8}) {
      std::vector<int> owners(static_cast<std::size_t>(n), 0);
      std::int64_t expect_begin = 0;
      for (int r = 0; r < size; ++r) {
        const Shard s = shard_of(n, size, r);
        EXPECT_EQ(s.length, (n + size - 1) / size);
        EXPECT_EQ(s.begin, expect_begin);
        EXPECT_LE(s.length - s.unique, 1);
        EXPECT_GE(s.length - s.unique, 0);
        for (std::int64_t k = 0; k < s.unique; ++k) ++owners[static_cast<std::size_t>(s.begin + k)];
        expect_begin += s.unique;
        const Shard u = shard_of(n, size, r, false);
        EXPECT_EQ(u.length, u.unique);
        EXPECT_EQ(u.unique, s.unique);
      }
      EXPECT_EQ(expect_begin, n);
      for (int o : owners) ASSERT_EQ(o, 1) << "n=" << n << " size=" << size;
    }
  }
  EXPECT_THROW(shard_of(0, 2, 0), dpl::Error);
  EXPECT_EQ(shard_of(0, 2, 1, false).length, 0);
  EXPECT_THROW(shard_of(10, 2, 2), dpl::Error);
}

// --- BatchIterator -----------------------------------------------------------------------------

TEST(DataBatchIterator, RepeatWrapsBatchesAcrossEpochs) {
  BatchIterator it(id_dataset(10), 4, /*shuffle=*/false, 0, /*repeat=*/true);
  EXPECT_EQ(it.batches_per_epoch(), 3);
  EXPECT_EQ(ids_of(it.next()), (std::vector<std::int32_t>{0, 1, 2, 3}));
  EXPECT_FALSE(it.is_new_epoch());
  EXPECT_DOUBLE_EQ(it.epoch_detail(), 0.4);
  EXPECT_EQ(ids_of(it.next()), (std::vector<std::int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(ids_of(it.next()), (std::vector<std::int32_t>{8, 9, 0, 1}));
  EXPECT_TRUE(it.is_new_epoch());
  EXPECT_EQ(it.epoch(), 1);
  EXPECT_EQ(it.iteration(), 3);
  EXPECT_DOUBLE_EQ(it.epoch_detail(), 1.2);
  EXPECT_EQ(ids_of(it.next()), (std::vector<std::int32_t>{2, 3, 4, 5}));
  EXPECT_FALSE(it.is_new_epoch());
  EXPECT_EQ(ids_of(it.next()), (std::vector<std::int32_t>{6, 7, 8, 9}));
  EXPECT_TRUE(it.is_new_epoch());  // ends exactly on the boundary
  EXPECT_EQ(it.epoch(), 2);
  EXPECT_DOUBLE_EQ(it.epoch_detail(), 2.0);
  EXPECT_TRUE(it.has_next());
}

TEST(DataBatchIterator, WithoutRepeatTheLastBatchIsPartial) {
  BatchIterator it(id_dataset(10), 4, /*shuffle=*/false, 0, /*repeat=*/false);
  EXPECT_EQ(it.next().size(), 4);
  EXPECT_EQ(it.next().size(), 4);
  const Batch last = it.next();
  EXPECT_EQ(ids_of(last), (std::vector<std::int32_t>{8, 9}));
  EXPECT_EQ(last.x.shape(), (Shape{2, 3}));
  EXPECT_TRUE(it.is_new_epoch());
  EXPECT_EQ(it.epoch(), 1);
  EXPECT_FALSE(it.has_next());
  EXPECT_NE(error_of([&] { it.next(); }).find("exhausted"), std::string::npos);
  it.reset();
  EXPECT_TRUE(it.has_next());
  EXPECT_EQ(it.iteration(), 0);
  EXPECT_EQ(ids_of(it.next()), (std::vector<std::int32_t>{0, 1, 2, 3}));
}

TEST(DataBatchIterator, ShuffledEpochsArePermutationsAndReshuffle) {
  const std::int64_t n = 50;
  BatchIterator it(id_dataset(n), 10, /*shuffle=*/true, 123, /*repeat=*/true);
  std::vector<std::vector<std::int32_t>> epochs(3);
  for (auto& e : epochs) {
    for (int b = 0; b < 5; ++b) {
      const std::vector<std::int32_t> ids = ids_of(it.next());
      e.insert(e.end(), ids.begin(), ids.end());
    }
    EXPECT_TRUE(it.is_new_epoch());
  }
  for (const auto& e : epochs) {
    std::vector<std::int32_t> sorted = e;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::int32_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);

  // The same seed gives the same batches; reset() replays them.
  BatchIterator same(id_dataset(n), 10, true, 123, true);
  BatchIterator other(id_dataset(n), 10, true, 124, true);
  std::vector<std::int32_t> first_same, first_other;
  for (int b = 0; b < 5; ++b) {
    const auto s = ids_of(same.next());
    const auto o = ids_of(other.next());
    first_same.insert(first_same.end(), s.begin(), s.end());
    first_other.insert(first_other.end(), o.begin(), o.end());
  }
  EXPECT_EQ(first_same, epochs[0]);
  EXPECT_NE(first_other, epochs[0]);
  it.reset();
  EXPECT_EQ(ids_of(it.next()), std::vector<std::int32_t>(epochs[0].begin(), epochs[0].begin() + 10));
}

TEST(DataBatchIterator, WrappedBatchTakesTheNextEpochsShuffledOrder) {
  // 7 samples, batches of 3: the third batch is sample 7 of epoch 0 plus two of epoch 1.
  BatchIterator it(id_dataset(7), 3, true, 9, true);
  std::vector<std::int32_t> ids;
  for (int b = 0; b < 7; ++b) {  // 21 samples = exactly 3 epochs
    const auto s = ids_of(it.next());
    ids.insert(ids.end(), s.begin(), s.end());
  }
  EXPECT_EQ(it.epoch(), 3);
  EXPECT_TRUE(it.is_new_epoch());
  for (int e = 0; e < 3; ++e) {
    std::set<std::int32_t> seen(ids.begin() + 7 * e, ids.begin() + 7 * (e + 1));
    EXPECT_EQ(seen.size(), 7u) << "epoch " << e;
  }
}

TEST(DataBatchIterator, ReusesBuffersUnlessTheCallerHoldsThem) {
  BatchIterator it(id_dataset(20), 4, false, 0, true);
  const void* first = nullptr;
  {
    const Batch b = it.next();
    first = b.x.raw_data();
  }
  {
    const Batch b = it.next();
    EXPECT_EQ(b.x.raw_data(), first);  // nothing held it: reused, no allocation
  }
  const Batch held = it.next();
  const Batch held2 = it.next();
  const Batch held3 = it.next();
  EXPECT_NE(held.x.raw_data(), held2.x.raw_data());
  EXPECT_NE(held2.x.raw_data(), held3.x.raw_data());
  EXPECT_NE(held.x.raw_data(), held3.x.raw_data());
  // Batches kept by the caller were not overwritten.
  EXPECT_EQ(ids_of(held), (std::vector<std::int32_t>{8, 9, 10, 11}));
  EXPECT_EQ(ids_of(held2), (std::vector<std::int32_t>{12, 13, 14, 15}));
  EXPECT_EQ(ids_of(held3), (std::vector<std::int32_t>{16, 17, 18, 19}));
}

TEST(DataBatchIterator, BatchLargerThanTheDataSet) {
  BatchIterator it(id_dataset(3), 7, false, 0, true);
  EXPECT_EQ(ids_of(it.next()), (std::vector<std::int32_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(it.epoch(), 2);
  EXPECT_TRUE(it.is_new_epoch());
  BatchIterator once(id_dataset(3), 7, false, 0, false);
  EXPECT_EQ(ids_of(once.next()), (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_FALSE(once.has_next());
}

TEST(DataBatchIterator, RejectsBadArguments) {
  EXPECT_NE(error_of([] { BatchIterator(id_dataset(3), 0); }).find("batch_size >= 1"), std::string::npos);
  EXPECT_NE(error_of([] { BatchIterator(Dataset(), 2); }).find("non-empty"), std::string::npos);
}

}  // namespace
