#include "dpl/train/observation.hpp"

#include <limits>
#include <nlohmann/json.hpp>

#include "dpl/autograd/ops.hpp"
#include "dpl/core/error.hpp"

namespace dpl::train {

Observation::Sum& Observation::slot(const std::string& key) {
  for (Sum& s : sums_)
    if (s.key == key) return s;
  sums_.push_back(Sum{key, Tensor(), 0.0, 0});
  return sums_.back();
}

void Observation::reserve(const std::string& key) { slot(key); }

void Observation::observe(const std::string& key, const Tensor& value) {
  if (recording_ != nullptr) {
    recording_->emplace_back(key, value);
    return;
  }
  const bool floating = value.defined() && (value.dtype() == kFloat32 || value.dtype() == kBFloat16 ||
                                            value.dtype() == kFloat16);
  DPL_CHECK(floating && value.numel() == 1, "Observation::observe: expected '", key,
            "' to be a one-element float32, bfloat16 or float16 tensor, got ",
            value.defined() ? detail::concat(value.dtype(), " of shape ", shape_str(value.shape())) : "undefined");
  Sum& s = slot(key);
  NoGradGuard no_grad;
  // 16-bit values (a loss under mixed precision) are summed in float32, so long sums keep their
  // digits; the cast stays on the value's device.
  const Tensor v = (value.dtype() == kFloat32 ? value : value.to(kFloat32)).reshape({});
  s.device_sum = s.device_sum.defined() ? add(Variable(s.device_sum), Variable(v)).data() : v.clone();
  ++s.count;
}

void Observation::observe(const std::string& key, double value) {
  DPL_CHECK(recording_ == nullptr, "Observation::observe: '", key, "' is a host number, observed while a training ",
            "step is recorded as a CUDA graph, where it would keep its first value; observe a one-element tensor");
  Sum& s = slot(key);
  s.host_sum += value;
  ++s.count;
}

std::vector<std::pair<std::string, double>> Observation::take_means() {
  std::vector<std::pair<std::string, double>> out;
  for (Sum& s : sums_) {
    if (s.count == 0) continue;
    const double total = s.host_sum + (s.device_sum.defined() ? static_cast<double>(s.device_sum.item()) : 0.0);
    out.emplace_back(s.key, total / static_cast<double>(s.count));
    s.device_sum = Tensor();
    s.host_sum = 0.0;
    s.count = 0;
  }
  return out;
}

std::string Observation::to_json() const {
  nlohmann::ordered_json sums = nlohmann::ordered_json::array();
  for (const Sum& s : sums_) {
    nlohmann::ordered_json device = nullptr;
    if (s.device_sum.defined()) device = static_cast<double>(s.device_sum.item());
    sums.push_back(nlohmann::ordered_json::array({s.key, device, s.host_sum, s.count}));
  }
  return sums.dump();
}

void Observation::restore_json(const std::string& text, Device device) {
  std::vector<Sum> sums;
  try {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    for (const auto& e : j) {
      // get<std::int64_t>() of a float beyond int64's range (1e300) is undefined behaviour, and a
      // checkpoint's values are input: take counts only as the integers to_json writes.
      const auto& count = e.at(3);
      constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
      const bool whole = count.is_number_unsigned() ? count.get<std::uint64_t>() <= kMax
                                                    : count.is_number_integer() && count.get<std::int64_t>() >= 0;
      DPL_CHECK(whole, "Observation::restore_json: expected counts that are whole numbers >= 0, got ", count.dump(),
                " in '", text, "'");
      Sum s{e.at(0).get<std::string>(), Tensor(), e.at(2).get<double>(), count.get<std::int64_t>()};
      if (!e.at(1).is_null())
        s.device_sum = Tensor::full({}, e.at(1).get<double>(), TensorOptions(kFloat32, device));
      sums.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    DPL_FAIL("Observation::restore_json: expected the text Observation::to_json writes, got '", text, "' (",
             e.what(), ")");
  }
  sums_ = std::move(sums);
}

std::string Observation::average_json(const std::vector<std::string>& texts) {
  DPL_CHECK(!texts.empty(), "Observation::average_json: expected at least one rank's sums, got none");
  std::vector<Observation> ranks(texts.size());
  for (std::size_t r = 0; r < texts.size(); ++r) ranks[r].restore_json(texts[r], Device::cpu());
  Observation mean = ranks[0];
  const auto n = static_cast<double>(texts.size());
  for (std::size_t k = 0; k < mean.sums_.size(); ++k) {
    Sum& m = mean.sums_[k];
    double device = 0.0, host = 0.0;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const std::vector<Sum>& theirs = ranks[r].sums_;
      // Every rank observes the same keys every step, so the counts agree; sums of other counts
      // would weigh the ranks unequally.
      DPL_CHECK(theirs.size() == mean.sums_.size() && theirs[k].key == m.key && theirs[k].count == m.count,
                "Observation::average_json: rank ", r, "'s sums differ in keys or counts from rank 0's: '", texts[r],
                "' against '", texts[0], "'");
      if (theirs[k].device_sum.defined()) device += static_cast<double>(theirs[k].device_sum.item());
      host += theirs[k].host_sum;
    }
    if (m.device_sum.defined()) m.device_sum = Tensor::full({}, device / n, TensorOptions(kFloat32, Device::cpu()));
    m.host_sum = host / n;
  }
  return mean.to_json();
}

}  // namespace dpl::train
