#pragma once
// A TokenLoader's position as checkpoint values: train::TrainingState keeps the caller's own
// values as text, rank 0's for every rank, and a TokenLoaderState is global (the same on every
// rank), so the loader needs no per-rank part in the checkpoint.

#include <cstdint>
#include <map>
#include <string>

#include "dpl/core/error.hpp"
#include "dpl/data/token_loader.hpp"

namespace dpl::examples {

/// The state under keys "loader/<field>", every field of TokenLoaderState as decimal text.
inline std::map<std::string, std::string> loader_state_values(const data::TokenLoaderState& s) {
  return {{"loader/epoch", std::to_string(s.epoch)},
          {"loader/position", std::to_string(s.position)},
          {"loader/iteration", std::to_string(s.iteration)},
          {"loader/is_new_epoch", s.is_new_epoch ? "1" : "0"},
          {"loader/global_batch", std::to_string(s.global_batch)},
          {"loader/seq_len", std::to_string(s.seq_len)},
          {"loader/shuffle", s.shuffle ? "1" : "0"},
          {"loader/seed", std::to_string(s.seed)},
          {"loader/num_windows", std::to_string(s.num_windows)},
          {"loader/shards_hash", std::to_string(s.shards_hash)}};
}

/// The state loader_state_values() wrote. Throws dpl::Error naming the checkpoint and the key
/// when one is missing or not a whole number (a checkpoint of another program).
inline data::TokenLoaderState loader_state_from_values(const std::map<std::string, std::string>& values,
                                                       const std::string& checkpoint) {
  const auto whole = [&](const std::string& key) -> std::uint64_t {
    const auto it = values.find(key);
    DPL_CHECK(it != values.end(), checkpoint, " holds no '", key,
              "': expected a checkpoint written by train_gpt2 --snapshot-every");
    const std::string& text = it->second;
    DPL_CHECK(!text.empty() && text.find_first_not_of("0123456789") == std::string::npos, checkpoint, ": '", key,
              "' should be a whole number, got '", text, "'");
    return std::stoull(text);
  };
  const auto count = [&](const std::string& key) { return static_cast<std::int64_t>(whole(key)); };
  data::TokenLoaderState s;
  s.epoch = count("loader/epoch");
  s.position = count("loader/position");
  s.iteration = count("loader/iteration");
  s.is_new_epoch = whole("loader/is_new_epoch") != 0;
  s.global_batch = count("loader/global_batch");
  s.seq_len = count("loader/seq_len");
  s.shuffle = whole("loader/shuffle") != 0;
  s.seed = whole("loader/seed");
  s.num_windows = count("loader/num_windows");
  s.shards_hash = whole("loader/shards_hash");
  return s;
}

}  // namespace dpl::examples
