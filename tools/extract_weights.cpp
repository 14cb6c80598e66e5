// Writes the model held by a training checkpoint (a Trainer snapshot) to a safetensors file of
// weights alone, under the names serialize::save_weights gives them, so that any program (or
// PyTorch, by name) can load the trained model without the optimizer's state and the data
// position the checkpoint also holds.
//
// Usage: extract_weights CHECKPOINT OUTPUT
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>

#include "dpl/serialize/safetensors.hpp"
#include "dpl/train/checkpoint.hpp"

int main(int argc, char** argv) {
  CLI::App app{"extract_weights: writes the model of a training checkpoint as a file of weights"};
  std::string checkpoint, output;
  app.add_option("checkpoint", checkpoint, "the checkpoint (snapshot_iter_<N>.safetensors)")->required();
  app.add_option("output", output, "the weights file to write (replaced atomically)")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto tensors = dpl::train::checkpoint_model_tensors(checkpoint);
    if (tensors.empty()) {
      std::cerr << "extract_weights: " << checkpoint << " holds no model tensors (none named 'model/...')\n";
      return 1;
    }
    dpl::serialize::save_safetensors(output, tensors);
    std::cout << "extract_weights: wrote " << tensors.size() << " tensors to " << output << " (first: '"
              << tensors.front().first << "')\n";
  } catch (const std::exception& e) {
    std::cerr << "extract_weights: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
