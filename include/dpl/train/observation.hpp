#pragma once
// The values a training run observes (losses, accuracies, the learning rate), summed until a log
// takes their means.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpl/core/device.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::train {

/// The values observed during training, summed until a LogReport takes their means. Tensor
/// observations are summed on their own device, so an iteration never waits for a GPU to report
/// its loss; numbers are summed on the host. Keys keep the order they were first seen in.
class Observation {
 public:
  /// Adds a one-element float tensor (a loss, an accuracy; float32, or bfloat16/float16 under
  /// mixed precision, summed in float32) to key's sum, on its device.
  void observe(const std::string& key, const Tensor& value);
  /// Adds a number to key's sum.
  void observe(const std::string& key, double value);
  /// Gives key its place in the order without a value yet (so "main/loss" comes first).
  void reserve(const std::string& key);
  /// The mean of every key observed since the last take(), in order (keys with no value left
  /// out), and starts afresh. Reads device sums back: one wait for the device per call.
  std::vector<std::pair<std::string, double>> take_means();
  /// The sums not yet taken, as JSON text (exact: float32 sums convert to double exactly).
  std::string to_json() const;
  /// Restores sums saved by to_json, putting tensor sums on device. Throws dpl::Error for text
  /// that is not what to_json writes.
  void restore_json(const std::string& text, Device device);
  /// The sums of several ranks' to_json texts (each a rank of another run) averaged key by key,
  /// as to_json writes them: what each rank of a job with another number of ranks restores, so
  /// that the log's mean over the ranks of each rank's means stays what the saving job's would
  /// have been (to rounding). Requires at least one text; throws dpl::Error for text that is not
  /// what to_json writes, or texts whose keys or counts differ.
  static std::string average_json(const std::vector<std::string>& texts);
  /// While into is not null, observe(key, tensor) appends (key, tensor) to *into instead of
  /// adding the value up, and observe(key, number) throws dpl::Error. A recorded training step
  /// (StandardUpdater::set_graph_capture) uses it: the tensors are the recording's own buffers,
  /// observed anew after each replay, and a host number would be frozen at the recording.
  void record_into(std::vector<std::pair<std::string, Tensor>>* into) { recording_ = into; }

 private:
  struct Sum {
    std::string key;
    Tensor device_sum;  // float32, one element; undefined when only numbers were observed
    double host_sum = 0.0;
    std::int64_t count = 0;
  };
  Sum& slot(const std::string& key);
  std::vector<Sum> sums_;
  std::vector<std::pair<std::string, Tensor>>* recording_ = nullptr;
};

}  // namespace dpl::train
