#include "dpl/train/extensions/log_report.hpp"

#include <string>
#include <utility>
#include <vector>

#include "dpl/comm/agreement.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

namespace {

// The means over every rank of each rank's means, in rank order so that every rank gets the same
// bits. Ranks observing different keys would average unlike things: refused, naming the ranks.
std::vector<std::pair<std::string, double>> all_rank_means(std::vector<std::pair<std::string, double>> means,
                                                           comm::Communicator& comm) {
  std::string keys;
  std::vector<double> values;
  for (const auto& [key, value] : means) {
    keys += key + "\n";
    values.push_back(value);
  }
  comm::check_ranks_agree(comm, keys,
                          {"LogReport", "the observed keys", "key",
                           "every rank must observe the same keys for the log's all-rank means"});
  const std::vector<double> all = comm::allgather_doubles(comm, values);
  for (std::size_t k = 0; k < means.size(); ++k) {
    double sum = 0.0;
    for (int r = 0; r < comm.size(); ++r) sum += all[static_cast<std::size_t>(r) * values.size() + k];
    means[k].second = sum / comm.size();
  }
  return means;
}

}  // namespace

LogReport::LogReport(std::string filename) : filename_(std::move(filename)) {}

TrainingLog* LogReport::log(Trainer& trainer) {
  // Every rank keeps the log, so that value triggers and early stopping decide alike everywhere;
  // rank 0 alone writes the file.
  if (!log_) log_ = std::make_unique<TrainingLog>(trainer.is_root() ? trainer.out() : std::string(), filename_);
  return log_.get();
}

void LogReport::operator()(Trainer& trainer) {
  auto means = trainer.observation().take_means();
  if (trainer.communicator() != nullptr && trainer.communicator()->size() > 1)
    means = all_rank_means(std::move(means), *trainer.communicator());
  TrainingLog* log = this->log(trainer);
  for (const auto& [key, value] : means) log->observe(key, value);
  const data::BatchSource& it = trainer.updater().iterator();
  log->end_epoch(it.epoch(), it.iteration());
}

}  // namespace dpl::train::extensions
