// The checkpoint reader on arbitrary bytes: load_checkpoint must restore a training state that
// still trains, or raise dpl::Error. A checkpoint's checksums cover its tensors, so mutated
// tensor bytes are refused before anything else looks at them; to reach the code behind that
// check, every input that parses as safetensors is also resealed (its checksums recomputed) and
// loaded again. The metadata (log, values, optimizer scalars) is not checksummed and is reached
// directly.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/stable_hash.hpp"
#include "dpl/serialize/safetensors.hpp"
#include "dpl/train/checkpoint.hpp"
#include "checkpoint_replica.hpp"
#include "fuzz_util.hpp"

using namespace dpl;
using dpl::fuzz::Replica;

namespace {

void load_and_train(const std::string& path) {
  Replica r;
  train::TrainingState s = r.state();
  if (fuzz::accepts([&] { train::load_checkpoint(path, s); })) fuzz::accepts([&] { r.step(); });
}

std::string checksum_hex(const Tensor& t) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx",
                static_cast<unsigned long long>(detail::StableHash().add_bytes(t.raw_data(), t.nbytes()).value()));
  return text;
}

// Where resealed inputs go: tmpfs when there is one, since save_safetensors syncs every file.
std::string reseal_path() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  return (dir / ("dpl-fuzz-checkpoint-" + std::to_string(::getpid()) + ".safetensors")).string();
}

struct RemovedAtExit {
  std::string path;
  ~RemovedAtExit() { std::remove(path.c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemoryFile file("dpl-fuzz-checkpoint");
  static const RemovedAtExit resealed{reseal_path()};
  const std::string& path = file.write(data, size);
  load_and_train(path);

  serialize::SafetensorsFile f;
  if (!fuzz::accepts([&] { f = serialize::load_safetensors(path); })) return 0;
  nlohmann::json sums = nlohmann::json::object();
  for (const auto& [name, t] : f.tensors) sums[name] = checksum_hex(t);
  f.metadata["checksums"] = sums.dump();
  if (!fuzz::accepts([&] { serialize::save_safetensors(resealed.path, f.tensors, f.metadata); })) return 0;
  load_and_train(resealed.path);
  return 0;
}
