// The safetensors reader on arbitrary bytes: load_safetensors must return tensors that fit in the
// file and keep its promises, or raise dpl::Error. What it accepts then goes through
// serialize::load_weights into a small model, whose matching of names, dtypes and shapes must likewise
// succeed or raise dpl::Error.
#include <cstdint>
#include <string>

#include "dpl/nn/layers.hpp"
#include "dpl/serialize/safetensors.hpp"
#include "dpl/serialize/weights.hpp"
#include "fuzz_util.hpp"

using namespace dpl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemoryFile file("dpl-fuzz-safetensors");
  // The model of the seeds (make_seeds.cpp writes its weights); only its values change here.
  static Generator init(1);
  static nn::MLP model(2, 3, 2, init);
  const std::string& path = file.write(data, size);
  serialize::SafetensorsFile loaded;
  if (!fuzz::accepts([&] { loaded = serialize::load_safetensors(path); })) return 0;

  std::size_t total = 0;
  for (const auto& [name, t] : loaded.tensors) {
    fuzz::require(t.defined() && t.is_contiguous() && t.device().is_cpu(),
                  "load_safetensors: tensor '" + name + "' is not a contiguous host tensor");
    total += t.nbytes();
  }
  fuzz::require(total <= size, "load_safetensors: the tensors hold more bytes than the file");
  const bool strict = size % 2 == 0;
  fuzz::accepts([&] { serialize::load_weights(model, loaded.tensors, path, strict); });
  return 0;
}
