#pragma once
// An in-memory data set of (sample, label) pairs, and the MNIST loader.

#include <cstdint>
#include <string>
#include <vector>

#include "dpl/core/random.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// Where the Debian package dataset-fashion-mnist installs its files; load_mnist's default.
inline constexpr const char* kDefaultMnistDir = "/usr/share/datasets/fashion-mnist";

/// Samples and their labels, both on the host: images of shape (N, ...) in float32 and labels of
/// shape (N,) in int32. Copying a Dataset copies tensor views, not the data (see Tensor).
/// A default-constructed Dataset is empty and has no sample shape; it is what ranks other than
/// the root pass to scatter_dataset.
class Dataset {
 public:
  /// An empty data set (size() == 0, images() and labels() undefined).
  Dataset() = default;
  /// Requires: images defined, float32, on the host, with at least one dimension; labels int32,
  /// on the host, of shape (images.size(0),). Non-contiguous inputs are copied to contiguous ones.
  /// Throws dpl::Error naming the mismatch (dtype, device, shape or the two counts).
  Dataset(Tensor images, Tensor labels);

  /// Number of samples N.
  std::int64_t size() const { return size_; }
  /// True when size() == 0.
  bool empty() const { return size_ == 0; }
  /// (N, ...) float32, contiguous; undefined for a default-constructed Dataset.
  const Tensor& images() const { return images_; }
  /// (N,) int32, contiguous; undefined for a default-constructed Dataset.
  const Tensor& labels() const { return labels_; }
  /// The shape of one sample (images' shape without its first extent); empty when undefined.
  Shape sample_shape() const;
  /// Elements per sample (product of sample_shape()); 0 when undefined.
  std::int64_t sample_numel() const;

  /// Samples [start, start+length) as a view that shares this data set's memory.
  /// Requires 0 <= start, 0 <= length, start+length <= size(); throws dpl::Error otherwise.
  Dataset slice(std::int64_t start, std::int64_t length) const;
  /// A new data set holding copies of the samples at indices, in that order (repeats allowed).
  /// Requires every index in [0, size()); throws dpl::Error naming the first bad index.
  Dataset gather(const std::vector<std::int64_t>& indices) const;

 private:
  Tensor images_;
  Tensor labels_;
  std::int64_t size_ = 0;
};

/// Loads one split of an MNIST-format data set (MNIST, Fashion-MNIST) from dir.
/// split "train" reads train-images-idx3-ubyte and train-labels-idx1-ubyte, split "test" reads
/// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte; each name may also carry a ".gz" suffix
/// (the plain file wins when both exist; compression is detected from the content).
///
/// Requires: split is "train" or "test"; the two files exist and hold the same number of samples.
/// Ensures: images (N, rows*cols) float32 in [0, 1] and labels (N,) int32.
/// Throws dpl::Error for an unknown split; for a missing file, naming the paths tried and saying
/// to install the Debian package dataset-fashion-mnist or pass --data; for an image/label count
/// mismatch, naming both files and both counts; and whatever read_idx_* throws.
Dataset load_mnist(const std::string& dir = kDefaultMnistDir, const std::string& split = "train");

/// A uniformly random permutation of 0..n-1 drawn from gen (Fisher-Yates), the same sequence for
/// the same generator state on every rank. Requires n >= 0.
std::vector<std::int64_t> permutation(std::int64_t n, Generator& gen);

}  // namespace dpl::data
