#include "dpl/data/dataset.hpp"

#include <sys/stat.h>

#include <cerrno>

#include <cstring>
#include <fstream>
#include <numeric>
#include <utility>

#include "data/rows.hpp"
#include "dpl/core/error.hpp"
#include "dpl/data/idx.hpp"

namespace dpl::data {

Dataset::Dataset(Tensor images, Tensor labels) {
  const char* op = "Dataset";
  DPL_CHECK(images.defined(), op, ": the images tensor is undefined");
  DPL_CHECK(labels.defined(), op, ": the labels tensor is undefined");
  DPL_CHECK(images.dtype() == kFloat32, op, ": expected images of dtype float32, got ", images.dtype());
  DPL_CHECK(labels.dtype() == kInt32, op, ": expected labels of dtype int32, got ", labels.dtype());
  DPL_CHECK(images.device().is_cpu(), op, ": expected images on the host, got ", images.device());
  DPL_CHECK(labels.device().is_cpu(), op, ": expected labels on the host, got ", labels.device());
  DPL_CHECK(images.dim() >= 1, op, ": expected images of shape (N, ...), got shape ", shape_str(images.shape()));
  DPL_CHECK(labels.dim() == 1, op, ": expected labels of shape (N,), got shape ", shape_str(labels.shape()));
  DPL_CHECK(images.size(0) == labels.size(0), op, ": ", images.size(0), " images (shape ",
            shape_str(images.shape()), ") but ", labels.size(0), " labels; expected one label per image");
  images_ = images.contiguous();
  labels_ = labels.contiguous();
  size_ = images_.size(0);
}

Shape Dataset::sample_shape() const {
  if (!images_.defined()) return {};
  return Shape(images_.shape().begin() + 1, images_.shape().end());
}

std::int64_t Dataset::sample_numel() const { return images_.defined() ? shape_numel(sample_shape()) : 0; }

Dataset Dataset::slice(std::int64_t start, std::int64_t length) const {
  DPL_CHECK(start >= 0 && length >= 0 && start + length <= size_, "Dataset::slice: the range [", start, ", ",
            start + length, ") lies outside a data set of ", size_, " samples");
  if (!images_.defined()) return Dataset();
  return Dataset(images_.narrow(0, start, length), labels_.narrow(0, start, length));
}

Dataset Dataset::gather(const std::vector<std::int64_t>& indices) const {
  for (std::size_t i = 0; i < indices.size(); ++i) {
    DPL_CHECK(indices[i] >= 0 && indices[i] < size_, "Dataset::gather: index ", indices[i], " at position ", i,
              " is outside a data set of ", size_, " samples");
  }
  if (!images_.defined()) return Dataset();
  const auto n = static_cast<std::int64_t>(indices.size());
  Shape s = images_.shape();
  s[0] = n;
  Tensor x = Tensor::empty(s, kFloat32);
  Tensor y = Tensor::empty({n}, kInt32);
  detail::copy_rows(*this, indices.data(), n, x.data<float>(), y.data<std::int32_t>());
  return Dataset(x, y);
}

namespace detail {
void copy_rows(const Dataset& ds, const std::int64_t* indices, std::int64_t count, float* images_out,
               std::int32_t* labels_out) {
  if (count == 0) return;
  const std::int64_t row = ds.sample_numel();
  const float* src = ds.images().data<float>();
  const std::int32_t* lab = ds.labels().data<std::int32_t>();
  const auto row_bytes = static_cast<std::size_t>(row) * sizeof(float);
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t j = indices[i];
    std::memcpy(images_out + i * row, src + j * row, row_bytes);
    labels_out[i] = lab[j];
  }
}
}  // namespace detail

namespace {
// Whether something is at path, readable or not: a file that exists but cannot be read must reach
// the reader, which names the system's reason (permission denied), not be reported as missing.
bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
}

// The plain file when present, else its .gz sibling.
std::string find_idx(const std::string& dir, const std::string& name) {
  const std::string base = dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
  if (file_exists(base)) return base;
  if (file_exists(base + ".gz")) return base + ".gz";
  DPL_FAIL("load_mnist: neither ", base, " nor ", base,
           ".gz exists; install the Debian package dataset-fashion-mnist (it provides ", kDefaultMnistDir,
           ") or pass --data with a folder that holds the MNIST-format files");
}
}  // namespace

Dataset load_mnist(const std::string& dir, const std::string& split) {
  DPL_CHECK(split == "train" || split == "test", "load_mnist: unknown split \"", split,
            "\"; expected \"train\" or \"test\"");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx_images(images_path);
  Tensor labels = read_idx_labels(labels_path);
  DPL_CHECK(images.size(0) == labels.size(0), "load_mnist: ", images_path, " holds ", images.size(0),
            " images but ", labels_path, " holds ", labels.size(0),
            " labels (the counts at byte offset 4 of the two files disagree); expected one label per image");
  return Dataset(std::move(images), std::move(labels));
}

std::vector<std::int64_t> permutation(std::int64_t n, Generator& gen) {
  DPL_CHECK(n >= 0, "permutation: expected n >= 0, got ", n);
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), std::int64_t{0});
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

}  // namespace dpl::data
