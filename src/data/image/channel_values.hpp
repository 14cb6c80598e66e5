#pragma once
// The per-channel mean and std checks shared by normalize_to_float (the host reference) and
// normalize_images (any device), so that both accept and refuse the same arguments with the same
// messages. Internal header.

#include <vector>

namespace dpl::data::detail {

/// mean and std, one value per channel.
struct ChannelValues {
  std::vector<float> mean;
  std::vector<float> std;
};

/// mean and std expanded to `channels` values each: a vector of `channels` entries as it is, one of
/// a single entry repeated. Throws dpl::Error, naming `op`, for any other count (saying how many
/// were expected and how many came) and for a zero std.
ChannelValues per_channel(const char* op, const std::vector<float>& mean, const std::vector<float>& std, int channels);

}  // namespace dpl::data::detail
