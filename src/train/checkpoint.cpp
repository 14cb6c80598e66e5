#include "dpl/train/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <system_error>

#include "core/stable_hash.hpp"
#include "dpl/comm/agreement.hpp"
#include "dpl/core/error.hpp"
#include "dpl/serialize/safetensors.hpp"
#include "dpl/serialize/weights.hpp"

namespace dpl::train {

namespace {
using Named = std::vector<std::pair<std::string, Tensor>>;
using Json = nlohmann::ordered_json;

constexpr const char* kModel = "model/";
constexpr const char* kOptimizer = "optimizer/";
// The global data source's position: the job's, so stored once, without a rank prefix.
constexpr const char* kDataCounters = "data/counters";
constexpr const char* kDataSettings = "data/settings";
constexpr const char* kGlobalBatchKey = "global_batch";

std::string rank_prefix(int rank) { return detail::concat("rank", rank, "/"); }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string hex(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::uint64_t checksum(const Tensor& host) {
  return detail::StableHash().add_bytes(host.raw_data(), host.nbytes()).value();
}

// The words of generator and iterator states travel as int64 tensors, bit for bit.
Tensor words_tensor(const std::vector<std::uint64_t>& words) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(words.size())}, kInt64);
  if (!words.empty()) std::memcpy(t.raw_data(), words.data(), words.size() * sizeof(std::uint64_t));
  return t;
}
std::vector<std::uint64_t> words_of(const Tensor& t) {
  std::vector<std::uint64_t> words(static_cast<std::size_t>(t.numel()));
  if (!words.empty()) std::memcpy(words.data(), t.raw_data(), words.size() * sizeof(std::uint64_t));
  return words;
}

// Text travels with the other per-rank parts as int64 words: its length in bytes, then the bytes.
Tensor text_tensor(const std::string& text) {
  std::vector<std::uint64_t> words(1 + (text.size() + 7) / 8, 0);
  words[0] = text.size();
  if (!text.empty()) std::memcpy(words.data() + 1, text.data(), text.size());
  return words_tensor(words);
}
std::string text_of(const Tensor& t, const std::string& path, const std::string& name) {
  const std::vector<std::uint64_t> words = words_of(t);
  DPL_CHECK(!words.empty() && words[0] <= (words.size() - 1) * 8, "load_checkpoint: ", path, ": '", name,
            "' must hold a byte count and that many bytes, got ", words.empty() ? 0 : words[0], " bytes in ",
            words.empty() ? 0 : words.size() - 1, " words");
  return std::string(reinterpret_cast<const char*>(words.data() + 1), static_cast<std::size_t>(words[0]));
}

// JSON has no NaN or infinity, and a log's loss may be either.
Json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}
double number_of(const Json& j) {
  if (j.is_string()) return std::strtod(j.get<std::string>().c_str(), nullptr);
  return j.get<double>();
}

// This rank's own parts, named without the rank prefix.
Named rank_parts(const TrainingState& s) {
  Named out;
  if (s.iterator) {
    const data::BatchIteratorState it = s.iterator->state();
    out.emplace_back("iterator/counters", Tensor::from_vector<std::int64_t>(
                                              {it.dataset_size, it.batch_size, it.epoch, it.iteration, it.position,
                                               it.is_new_epoch ? 1 : 0},
                                              {6}));
    out.emplace_back("iterator/order", Tensor::from_vector<std::int64_t>(
                                           it.order, {static_cast<std::int64_t>(it.order.size())}));
    out.emplace_back("iterator/generator", words_tensor(it.generator));
    out.emplace_back("iterator/settings", text_tensor(Json(it.settings).dump()));
  }
  for (const auto& [name, gen] : s.generators) {
    DPL_CHECK(gen != nullptr, "save_checkpoint: generator '", name, "' is null");
    out.emplace_back("generator/" + name, words_tensor(gen->state()));
  }
  for (const auto& [key, text] : s.rank_values) out.emplace_back("value/" + key, text_tensor(text));
  return out;
}

// One line per part that must be present on every rank alike.
std::string parts_description(const TrainingState& s) {
  std::string d = detail::concat("model ", s.model != nullptr, "\noptimizer ", s.optimizer != nullptr, "\niterator ",
                                 s.iterator != nullptr, "\nglobal source ", s.source != nullptr);
  // The global position is rank 0's in the file: every rank must stand where rank 0 does.
  if (s.source) {
    const data::GlobalDataState g = s.source->global_state();
    d += detail::concat(" at iteration ", g.iteration, " of global batch ", g.global_batch);
  }
  for (const auto& [name, gen] : s.generators) d += "\ngenerator " + name;
  for (const auto& [key, text] : s.rank_values) d += "\nvalue " + key;
  return d;
}

// After each rank has done its part of a collective step: returns when every rank succeeded (an
// empty failure), else throws on every rank the same error. Ranks that failed alike throw their
// own message; otherwise the message names the ranks that failed, whichever they are (rank 0 alone
// writes, so a full disk fails there), and gives the first one's message. Costs one allgather of
// 8 bytes when every rank succeeded.
void agree(comm::Communicator* comm, const std::string& failure, const char* operation) {
  if (comm == nullptr || comm->size() == 1) {
    if (!failure.empty()) throw Error(failure);
    return;
  }
  const std::vector<std::uint64_t> outcomes = comm::gather_description_hashes(*comm, failure);
  const std::uint64_t succeeded = detail::stable_hash("");
  std::vector<int> failed;
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    if (outcomes[r] != succeeded) failed.push_back(static_cast<int>(r));
  if (failed.empty()) return;
  const bool alike = failed.size() == outcomes.size() &&
                     std::all_of(outcomes.begin(), outcomes.end(), [&](std::uint64_t h) { return h == outcomes[0]; });
  if (alike) throw Error(failure);
  // The first failing rank's message reaches every rank: its length in words, then the words.
  const int first = failed.front();
  Tensor words = text_tensor(failure);
  Tensor count = Tensor::from_vector<std::int64_t>({words.numel()}, {1});
  comm->broadcast(count, first);
  if (comm->rank() != first) words = Tensor::empty({count.to_vector<std::int64_t>()[0]}, kInt64);
  comm->broadcast(words, first);
  std::string ranks;
  for (const int r : failed) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  DPL_FAIL(operation, " (", comm->name(), "): failed on rank(s) ", ranks, " of ", comm->size(),
           ", so every rank stops; rank ", first, ": ", text_of(words, operation, "the message"));
}

template <typename Fn>
std::string failure_of(const char* operation, const std::string& path, Fn&& fn) {
  try {
    fn();
    return "";
  } catch (const Error& e) {
    // Errors of the parts being restored (a log, an iterator) do not know the file; name it.
    const std::string message = e.what();
    return message.find(path) != std::string::npos ? message : detail::concat(operation, ": ", path, ": ", message);
  } catch (const std::exception& e) {
    return detail::concat(operation, ": ", path, ": ", e.what());
  }
}

Json log_json(const TrainingLog& log) {
  Json entries = Json::array();
  for (const LogEntry& e : log.log()) {
    Json values = Json::array();
    for (const auto& [k, v] : e.values) values.push_back(Json::array({k, number(v)}));
    entries.push_back({{"epoch", e.epoch}, {"iteration", e.iteration}, {"elapsed_time", number(e.elapsed_time)},
                       {"values", values}});
  }
  Json pending = Json::array();
  for (const TrainingLog::Pending& p : log.pending()) pending.push_back(Json::array({p.key, number(p.sum), p.count}));
  return {{"elapsed_time", log.elapsed_time()}, {"entries", entries}, {"pending", pending}};
}

// A whole number of the metadata in [low, high]. nlohmann's get<> would convert a float (1e300)
// to an integer type, which is undefined behaviour beyond the type's range; files are input.
std::int64_t whole_of(const Json& j, const std::string& path, const char* what, std::int64_t low,
                      std::int64_t high) {
  // Unsigned above int64's range compares as such; every other integer fits in int64.
  const bool in_range = j.is_number_unsigned() ? j.get<std::uint64_t>() <= static_cast<std::uint64_t>(high)
                                               : j.is_number_integer() && j.get<std::int64_t>() <= high;
  DPL_CHECK(in_range && j.get<std::int64_t>() >= low, "load_checkpoint: ", path, ": expected ", what,
            " to be a whole number in [", low, ", ", high, "], got ", j.dump());
  return j.get<std::int64_t>();
}

void restore_log(TrainingLog& log, const Json& j, const std::string& path) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::vector<LogEntry> entries;
  for (const Json& e : j.at("entries")) {
    LogEntry entry;
    entry.epoch = whole_of(e.at("epoch"), path, "the log's \"epoch\"", 0, kMax);
    entry.iteration = whole_of(e.at("iteration"), path, "the log's \"iteration\"", 0, kMax);
    entry.elapsed_time = number_of(e.at("elapsed_time"));
    for (const Json& kv : e.at("values")) entry.values.emplace_back(kv.at(0).get<std::string>(), number_of(kv.at(1)));
    entries.push_back(std::move(entry));
  }
  std::vector<TrainingLog::Pending> pending;
  for (const Json& p : j.at("pending")) {
    const std::int64_t count = whole_of(p.at(2), path, "a pending count of the log", 1, kMax);
    pending.push_back({p.at(0).get<std::string>(), number_of(p.at(1)), count});
  }
  log.restore(std::move(entries), std::move(pending), number_of(j.at("elapsed_time")));
}

// A metadata entry, parsed; a missing or malformed one names the file and the key.
Json metadata_json(const serialize::SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata.find(key);
  DPL_CHECK(it != file.metadata.end(), "load_checkpoint: ", file.path, " has no \"", key, "\" in its metadata");
  try {
    return Json::parse(it->second);
  } catch (const std::exception& e) {
    DPL_FAIL("load_checkpoint: ", file.path, ": metadata \"", key, "\" is not valid JSON: ", e.what());
  }
}

// A list of [name, value] strings, as the iterators' settings are stored; `name` is its tensor's.
std::vector<std::pair<std::string, std::string>> settings_of(const Tensor& t, const std::string& path,
                                                             const std::string& name) {
  const Json j = Json::parse(text_of(t, path, name), nullptr, false);
  bool pairs = j.is_array();
  for (const Json& kv : j)
    pairs = pairs && kv.is_array() && kv.size() == 2 && kv.at(0).is_string() && kv.at(1).is_string();
  DPL_CHECK(pairs, "load_checkpoint: ", path, ": '", name, "' must be a JSON list of [name, value] strings");
  std::vector<std::pair<std::string, std::string>> out;
  for (const Json& kv : j) out.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
  return out;
}

// Rank 0 gets every rank's parts, in rank order; the other ranks get nothing. Collective.
std::vector<Named> gather_parts(const Named& mine, comm::Communicator* comm) {
  std::vector<Named> all;
  if (comm == nullptr || comm->size() == 1) {
    all.push_back(mine);
    return all;
  }
  const int size = comm->size();
  const auto k = static_cast<std::int64_t>(mine.size());
  Tensor lengths = Tensor::empty({k}, kInt64);
  for (std::int64_t i = 0; i < k; ++i) lengths.set<std::int64_t>({i}, mine[static_cast<std::size_t>(i)].second.numel());
  Tensor all_lengths = Tensor::empty({k * size}, kInt64);
  comm->allgather(lengths, all_lengths);
  if (comm->rank() != 0) {
    for (std::int64_t i = 0; i < k; ++i) comm->send(mine[static_cast<std::size_t>(i)].second, 0, static_cast<int>(i));
    return all;
  }
  all.push_back(mine);
  for (int r = 1; r < size; ++r) {
    Named theirs;
    for (std::int64_t i = 0; i < k; ++i) {
      Tensor t = Tensor::empty({all_lengths.at<std::int64_t>({r * k + i})}, kInt64);
      comm->recv(t, r, static_cast<int>(i));
      theirs.emplace_back(mine[static_cast<std::size_t>(i)].first, t);
    }
    all.push_back(std::move(theirs));
  }
  return all;
}
}  // namespace

void save_checkpoint(const std::string& path, const TrainingState& state, comm::Communicator* comm) {
  const char* who = "save_checkpoint";
  const int rank = comm ? comm->rank() : 0;
  const int size = comm ? comm->size() : 1;
  Named mine;
  std::string failure = failure_of(who, path, [&] {
    DPL_CHECK(state.model != nullptr, who, ": ", path, ": the training state has no model");
    DPL_CHECK(state.iterator == nullptr || state.source == nullptr, who, ": ", path,
              ": the training state has both a per-rank iterator and a global source; a run has one data position");
    mine = rank_parts(state);
  });
  agree(comm, failure, who);
  if (comm != nullptr && size > 1) {
    comm::check_ranks_agree(*comm, parts_description(state),
                            {who, "the parts of the training state", "part",
                             "every rank must save the same parts (model, optimizer, iterator, generator names)"});
  }
  const std::vector<Named> parts = gather_parts(mine, comm);
  // The optimizer's state as a whole (collective when it is sharded between the ranks), on every
  // rank, before rank 0 writes it.
  std::vector<std::pair<std::string, Tensor>> optimizer_state;
  failure = failure_of(who, path, [&] {
    if (state.optimizer) optimizer_state = state.optimizer->gathered_state();
  });
  agree(comm, failure, who);

  failure = failure_of(who, path, [&] {
    if (rank != 0) return;
    Named tensors;
    for (const auto& [name, var] : state.model->named_parameters()) tensors.emplace_back(kModel + name, var.data());
    for (const auto& [name, var] : state.model->named_buffers()) tensors.emplace_back(kModel + name, var.data());
    Json meta_optimizer = Json::object();
    if (state.optimizer) {
      for (const auto& [name, t] : optimizer_state) tensors.emplace_back(kOptimizer + name, t);
      for (const auto& [key, value] : state.optimizer->state_scalars()) meta_optimizer[key] = value;
    }
    std::int64_t global_batch = 0;
    if (state.source) {
      const data::GlobalDataState g = state.source->global_state();
      global_batch = g.global_batch;
      tensors.emplace_back(kDataCounters, Tensor::from_vector<std::int64_t>({g.samples, g.global_batch, g.epoch,
                                                                             g.iteration, g.position,
                                                                             g.is_new_epoch ? 1 : 0},
                                                                            {6}));
      tensors.emplace_back(kDataSettings, text_tensor(Json(g.settings).dump()));
    }
    for (int r = 0; r < size; ++r)
      for (const auto& [name, t] : parts[static_cast<std::size_t>(r)]) tensors.emplace_back(rank_prefix(r) + name, t);

    Json checksums = Json::object();
    for (auto& [name, t] : tensors) {
      t = t.to(Device::cpu()).contiguous();
      checksums[name] = hex(checksum(t));
    }
    std::map<std::string, std::string> metadata{{"format", kCheckpointFormat},
                                                {"ranks", std::to_string(size)},
                                                {"checksums", checksums.dump()},
                                                {"values", Json(state.values).dump()}};
    if (state.optimizer) metadata["optimizer"] = meta_optimizer.dump();
    if (state.log) metadata["log"] = log_json(*state.log).dump();
    if (!state.run_id.empty()) metadata["run"] = state.run_id;
    if (state.source) metadata[kGlobalBatchKey] = std::to_string(global_batch);
    serialize::save_safetensors(path, tensors, metadata);
  });
  agree(comm, failure, who);
}

namespace {

// The checkpoint at path, after checking that it is one (its format tag) and that no tensor
// changed since it was written (each tensor's checksum). Throws dpl::Error naming `who` and path.
serialize::SafetensorsFile read_verified(const std::string& path, const char* who) {
  serialize::SafetensorsFile file = serialize::load_safetensors(path);
  const auto format = file.metadata.find("format");
  DPL_CHECK(format != file.metadata.end() && format->second == kCheckpointFormat, who, ": ", path,
            " is not a dpl checkpoint: expected \"format\": \"", kCheckpointFormat, "\" in its metadata, got ",
            format == file.metadata.end() ? std::string("none") : "\"" + format->second + "\"",
            " (a file of weights alone loads with serialize::load_weights)");
  const Json checksums = metadata_json(file, "checksums");
  for (const auto& [name, t] : file.tensors) {
    DPL_CHECK(checksums.contains(name), who, ": ", path, " is damaged: tensor '", name, "' has no checksum");
    const std::string sum = hex(checksum(t));
    DPL_CHECK(checksums.at(name).get<std::string>() == sum, who, ": ", path, " is damaged: tensor '", name,
              "' does not match its checksum (", checksums.at(name).get<std::string>(), " written, ", sum,
              " read); the file changed after it was written");
  }
  DPL_CHECK(checksums.size() == file.tensors.size(), who, ": ", path, " is damaged: its metadata lists ",
            checksums.size(), " tensors, the file holds ", file.tensors.size());
  return file;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> checkpoint_model_tensors(const std::string& path) {
  serialize::SafetensorsFile file = read_verified(path, "checkpoint_model_tensors");
  std::vector<std::pair<std::string, Tensor>> model;
  for (auto& [name, t] : file.tensors)
    if (starts_with(name, kModel)) model.emplace_back(name.substr(std::strlen(kModel)), std::move(t));
  return model;
}

void load_model_from_checkpoint(nn::Module& model, const std::string& path, bool strict) {
  serialize::load_weights(model, checkpoint_model_tensors(path), path + " (its model)", strict);
}

void load_checkpoint(const std::string& path, TrainingState& state, comm::Communicator* comm) {
  const char* who = "load_checkpoint";
  const int rank = comm ? comm->rank() : 0;
  const int size = comm ? comm->size() : 1;

  serialize::SafetensorsFile file;
  Named model_tensors, optimizer_tensors;
  std::map<std::string, const Tensor*> own;  // this rank's parts, without the prefix
  std::int64_t saved_ranks = 0;
  std::uint64_t content_hash = 0;
  std::vector<std::pair<std::string, std::string>> iterator_settings;
  data::GlobalDataState global;
  std::string failure = failure_of(who, path, [&] {
    DPL_CHECK(state.model != nullptr, who, ": ", path, ": the training state has no model");
    file = read_verified(path, who);

    for (const auto& [name, t] : file.tensors) {
      if (starts_with(name, kModel)) model_tensors.emplace_back(name.substr(std::strlen(kModel)), t);
      if (starts_with(name, kOptimizer)) optimizer_tensors.emplace_back(name.substr(std::strlen(kOptimizer)), t);
      if (starts_with(name, rank_prefix(rank))) own[name.substr(rank_prefix(rank).size())] = &t;
    }
    const std::string mismatch = serialize::weights_mismatch(*state.model, model_tensors);
    DPL_CHECK(mismatch.empty(), who, ": ", path, " does not fit the model (tensors under \"", kModel, "\"): ",
              mismatch);
    if (state.optimizer) {
      metadata_json(file, "optimizer");
      for (const auto& [name, live] : state.optimizer->state()) {
        const std::string full = kOptimizer + name;
        DPL_CHECK(file.contains(full), who, ": ", path, " lacks the optimizer's state tensor '", full, "'");
      }
    }
    saved_ranks =
        whole_of(metadata_json(file, "ranks"), path, "\"ranks\" in the metadata", 1, std::numeric_limits<int>::max());
    const bool has_global = file.contains(kDataCounters);
    const bool has_iterators = file.contains(rank_prefix(0) + "iterator/counters");
    if (state.iterator) {
      DPL_CHECK(!has_global, who, ": ", path, " holds the job's global data position (a data::GlobalBatchSource), "
                "but this run draws from a per-rank data::BatchIterator; resume it with the global source it was "
                "saved with");
      DPL_CHECK(saved_ranks == size, who, ": ", path, " was saved by ", saved_ranks, " processes, this job has ", size,
                "; each rank's data iterator resumes only with the same number of processes (a run that draws "
                "from a data::GlobalBatchSource resumes on another number: docs/training-state.md)");
      for (const char* part : {"iterator/counters", "iterator/order", "iterator/generator"})
        DPL_CHECK(own.count(part) == 1, who, ": ", path, " lacks '", rank_prefix(rank), part, "'");
      DPL_CHECK(own.at("iterator/counters")->numel() == 6 && own.at("iterator/counters")->dtype() == kInt64, who,
                ": ", path, ": '", rank_prefix(rank), "iterator/counters' must be 6 int64 values");
      // Absent from checkpoints written before the settings were recorded: nothing to compare.
      if (own.count("iterator/settings") == 1)
        iterator_settings = settings_of(*own.at("iterator/settings"), path, rank_prefix(rank) + "iterator/settings");
    }
    if (state.source) {
      DPL_CHECK(has_global, who, ": ", path, " holds no global data position",
                has_iterators ? detail::concat(": it holds each rank's own data iterator (a run of ", saved_ranks,
                                               " processes that each shuffled their own shard), which this run's "
                                               "global source cannot continue")
                              : std::string(),
                "; resume it with the kind of data source it was saved with");
      const Tensor& c = file.at(kDataCounters);
      DPL_CHECK(c.numel() == 6 && c.dtype() == kInt64, who, ": ", path, ": '", kDataCounters,
                "' must be 6 int64 values");
      DPL_CHECK(file.contains(kDataSettings), who, ": ", path, " lacks '", kDataSettings, "'");
      const std::vector<std::int64_t> v = c.to_vector<std::int64_t>();
      global.samples = v[0];
      global.global_batch = v[1];
      global.epoch = v[2];
      global.iteration = v[3];
      global.position = v[4];
      global.is_new_epoch = v[5] != 0;
      global.settings = settings_of(file.at(kDataSettings), path, kDataSettings);
      // The data order first: the error then says what differs, not only that the counters do.
      data::check_same_data_order(global, state.source->global_state(), "the data source");
    }
    // With another number of processes no saved rank is this one: generators are seeded afresh
    // from rank 0's, values come back as every saved rank's.
    const bool same_ranks = saved_ranks == size;
    for (const auto& [name, gen] : state.generators) {
      const std::string part = (same_ranks ? rank_prefix(rank) : rank_prefix(0)) + "generator/" + name;
      DPL_CHECK(file.contains(part), who, ": ", path, " lacks '", part, "'");
    }
    if (state.log) metadata_json(file, "log");

    detail::StableHash h;
    for (const auto& [key, value] : file.metadata) h.add(key).add("=").add(value).add("\n");
    content_hash = h.value();
  });
  agree(comm, failure, who);
  if (comm != nullptr && size > 1) {
    comm::check_ranks_agree(*comm, "checkpoint " + hex(content_hash),
                            {who, "the checkpoints read", "checkpoint",
                             "every rank must read the same intact file (a shared file system, or identical copies)"});
  }

  failure = failure_of(who, path, [&] {
    const bool same_ranks = saved_ranks == size;
    if (state.iterator) {
      const std::vector<std::int64_t> c = own.at("iterator/counters")->to_vector<std::int64_t>();
      data::BatchIteratorState it;
      it.dataset_size = c[0];
      it.batch_size = c[1];
      it.epoch = c[2];
      it.iteration = c[3];
      it.position = c[4];
      it.is_new_epoch = c[5] != 0;
      it.order = own.at("iterator/order")->to_vector<std::int64_t>();
      it.generator = words_of(*own.at("iterator/generator"));
      it.settings = iterator_settings;
      state.iterator->load_state(it);
    }
    if (state.source) state.source->load_global_state(global);
    for (auto& [name, gen] : state.generators) {
      if (same_ranks) {
        gen->set_state(words_of(*own.at("generator/" + name)));
        continue;
      }
      const std::vector<std::uint64_t> words = words_of(file.at(rank_prefix(0) + "generator/" + name));
      detail::StableHash h;
      h.add(name).add_bytes(words.data(), words.size() * sizeof(std::uint64_t));
      const std::uint64_t where[] = {static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(size)};
      h.add_bytes(where, sizeof where);
      gen->seed(h.value());
    }
    state.saved_rank_values.clear();
    for (auto& [key, text] : state.rank_values) {
      if (same_ranks) {
        if (own.count("value/" + key) == 1)
          text = text_of(*own.at("value/" + key), path, rank_prefix(rank) + "value/" + key);
        continue;
      }
      std::vector<std::string> saved;
      for (std::int64_t r = 0; r < saved_ranks; ++r) {
        const std::string name = rank_prefix(static_cast<int>(r)) + "value/" + key;
        if (file.contains(name)) saved.push_back(text_of(file.at(name), path, name));
      }
      if (!saved.empty()) state.saved_rank_values[key] = std::move(saved);
    }
    if (state.optimizer) {
      std::map<std::string, double> scalars;
      const Json saved = metadata_json(file, "optimizer");
      for (const auto& [key, value] : saved.items()) scalars[key] = value.get<double>();
      state.optimizer->load_state(optimizer_tensors, scalars);
    }
    serialize::load_weights(*state.model, model_tensors, path);
    if (state.log) restore_log(*state.log, metadata_json(file, "log"), path);
    state.values.clear();
    const Json values = metadata_json(file, "values");
    for (const auto& [key, value] : values.items()) state.values[key] = value.get<std::string>();
    const auto run = file.metadata.find("run");
    if (run != file.metadata.end()) state.run_id = run->second;
  });
  agree(comm, failure, who);
}

std::string checkpoint_name(std::int64_t iteration) {
  return detail::concat("snapshot_iter_", iteration, ".safetensors");
}

std::vector<std::string> list_checkpoints(const std::string& folder) {
  namespace fs = std::filesystem;
  static const std::regex pattern("snapshot_iter_([0-9]+)\\.safetensors");
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoll(m[1].str()), it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [iteration, p] : found) out.push_back(std::move(p));
  return out;
}

std::string new_run_id() {
  std::random_device device;
  detail::StableHash h;
  const auto words = {static_cast<std::uint64_t>(device()) << 32 | device(),
                      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()),
                      static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()),
                      static_cast<std::uint64_t>(::getpid())};
  for (const std::uint64_t w : words) h.add_bytes(&w, sizeof w);
  return hex(h.value());
}

namespace {

// The metadata of the safetensors header at path, read without the tensors; null when the file
// cannot be read as one. A folder may hold many large checkpoints, and pruning reads every one.
Json header_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char length_bytes[8] = {};
  if (!in.read(reinterpret_cast<char*>(length_bytes), sizeof length_bytes)) return nullptr;
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | length_bytes[i];
  constexpr std::uint64_t kMaxHeader = std::uint64_t{1} << 30;  // what no checkpoint's header reaches
  if (length > kMaxHeader) return nullptr;
  std::string header(static_cast<std::size_t>(length), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(length))) return nullptr;
  const Json j = Json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("__metadata__") || !j.at("__metadata__").is_object()) return nullptr;
  return j.at("__metadata__");
}

}  // namespace

std::string checkpoint_run_id(const std::string& path) {
  const Json meta = header_metadata(path);
  if (meta.is_null() || !meta.contains("run") || !meta.at("run").is_string()) return "";
  return meta.at("run").get<std::string>();
}

std::int64_t checkpoint_global_batch(const std::string& path) {
  const char* who = "checkpoint_global_batch";
  const Json meta = header_metadata(path);
  DPL_CHECK(!meta.is_null(), who, ": cannot read ", path, " as a checkpoint (no file, or no safetensors header "
            "with metadata)");
  const bool tagged = meta.contains("format") && meta.at("format") == kCheckpointFormat;
  DPL_CHECK(tagged, who, ": ", path, " is not a dpl checkpoint: expected \"format\": \"", kCheckpointFormat,
            "\" in its metadata");
  if (!meta.contains(kGlobalBatchKey)) return 0;
  const Json& text = meta.at(kGlobalBatchKey);
  const Json value = text.is_string() ? Json::parse(text.get<std::string>(), nullptr, false) : Json();
  return whole_of(value, path, "\"global_batch\" in the metadata", 1, std::numeric_limits<std::int64_t>::max());
}

void remove_old_checkpoints(const std::string& folder, std::int64_t keep, const std::string& run_id) {
  DPL_CHECK(keep >= 1, "remove_old_checkpoints: expected keep >= 1, got ", keep);
  DPL_CHECK(!run_id.empty(), "remove_old_checkpoints: expected the run id whose checkpoints to prune, got none");
  // Another run may share the folder (the default -o): its files are not this run's to delete.
  std::vector<std::string> all;
  for (std::string& p : list_checkpoints(folder))
    if (checkpoint_run_id(p) == run_id) all.push_back(std::move(p));
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i], ec);
    DPL_CHECK(!ec, "remove_old_checkpoints: cannot remove ", all[i], ": ", ec.message());
  }
}

}  // namespace dpl::train
