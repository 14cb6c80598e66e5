// The image-list parser ("relative/path.jpg label" lines) on arbitrary bytes: read_image_list
// must return entries that keep its promises or raise dpl::Error.
#include <cstdint>
#include <string>

#include "dpl/data/image/labeled_image_dataset.hpp"
#include "fuzz_util.hpp"

using namespace dpl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemoryFile file("dpl-fuzz-list");
  const std::string& path = file.write(data, size);
  fuzz::accepts([&] {
    const std::vector<data::ImageListEntry> entries = data::read_image_list(path);
    std::int64_t previous_line = 0;
    for (const data::ImageListEntry& e : entries) {
      fuzz::require(e.label >= 0, "read_image_list: a negative label was accepted");
      fuzz::require(e.line > previous_line, "read_image_list: line numbers that do not increase");
      fuzz::require(!e.path.empty(), "read_image_list: an empty path");
      for (const char c : e.path)
        fuzz::require(c != ' ' && c != '\t' && c != '\n', "read_image_list: a path holding a blank");
      previous_line = e.line;
    }
    // The lines a list has are an upper bound for its entries (each entry is one line).
    std::int64_t lines = 1;
    for (std::size_t i = 0; i < size; ++i) lines += data[i] == '\n';
    fuzz::require(static_cast<std::int64_t>(entries.size()) <= lines && previous_line <= lines,
                  "read_image_list: more entries or lines than the file has");
  });
  return 0;
}
