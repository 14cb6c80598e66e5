// Tokenizes text files into token shards (llm.c's .bin format) for training a language model:
//
//   PREFIX_train_000000.bin, PREFIX_train_000001.bin, ...   the training split
//   PREFIX_val_000000.bin, ...                              the validation split
//
// Inputs are files and folders (walked recursively, filtered by --ext); the files are taken in
// sorted path order, so the output depends only on their content and names. Each file is
// tokenized and followed by the end-of-text token. Files, not tokens, are split: every N-th file
// (--val-every, the first included) goes to validation, so no file is half in each split.
//
// Usage: text_to_token_shards INPUT... -o PREFIX [--ext .py]... [--val-every 20]
//                             [--shard-tokens 100000000] [--vocab encoder.json --merges vocab.bpe]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/core/error.hpp"
#include "dpl/data/token_shard.hpp"
#include "dpl/data/tokenizer.hpp"

namespace {

using namespace dpl;
namespace fs = std::filesystem;

struct Options {
  std::vector<std::string> inputs;
  std::string out;
  std::vector<std::string> extensions;
  std::int64_t val_every = 20;
  std::int64_t shard_tokens = 100'000'000;
  std::string vocab;
  std::string merges;
};

bool extension_matches(const fs::path& file, const std::vector<std::string>& extensions) {
  if (extensions.empty()) return true;
  const std::string ext = file.extension().string();
  return std::find(extensions.begin(), extensions.end(), ext) != extensions.end();
}

// Every file named or found under a named folder, sorted by path, each once. Files named on the
// command line are taken whatever their extension; --ext filters what the folders hold.
std::vector<fs::path> collect_files(const Options& o) {
  std::vector<fs::path> files;
  for (const std::string& input : o.inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    if (fs::is_regular_file(st)) {
      files.emplace_back(input);
    } else if (fs::is_directory(st)) {
      // Symbolic links to folders are not followed, so a link cycle cannot loop the walk.
      fs::recursive_directory_iterator it(input, ec), end;
      DPL_CHECK(!ec, "cannot read the folder ", input, ": ", ec.message());
      for (; it != end; it.increment(ec)) {
        DPL_CHECK(!ec, "cannot read the folder ", input, ": ", ec.message());
        std::error_code file_ec;
        if (it->is_regular_file(file_ec) && extension_matches(it->path(), o.extensions)) files.push_back(it->path());
      }
      DPL_CHECK(!ec, "cannot read the folder ", input, ": ", ec.message());
    } else {
      DPL_FAIL("input ", input, ec ? " cannot be read: " + ec.message() : std::string(" is neither a file nor a folder"));
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

std::string read_file(const fs::path& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  DPL_CHECK(in.good(), "cannot open ", path.string(), ": ", errno ? std::strerror(errno) : "unknown reason");
  std::ostringstream text;
  text << in.rdbuf();
  DPL_CHECK(!in.bad(), "reading ", path.string(), " failed");
  return text.str();
}

std::string shard_path(const std::string& prefix, const std::string& split, std::int64_t index) {
  char number[24];
  std::snprintf(number, sizeof number, "%06lld", static_cast<long long>(index));
  return prefix + "_" + split + "_" + number + ".bin";
}

// One split's tokens, cut into shards of at most `capacity` tokens as they come.
class ShardWriter {
 public:
  ShardWriter(std::string prefix, std::string split, std::int64_t capacity)
      : prefix_(std::move(prefix)), split_(std::move(split)), capacity_(capacity) {}

  void add_file(const std::vector<std::int32_t>& ids, std::int32_t end_of_text) {
    for (std::int32_t id : ids) push(id);
    push(end_of_text);
    ++files_;
  }
  // Writes the last, partial shard.
  void finish() {
    if (!buffer_.empty()) flush();
  }

  const std::string& split() const { return split_; }
  std::int64_t files() const { return files_; }
  std::int64_t tokens() const { return tokens_; }
  const std::vector<std::string>& shards() const { return shards_; }

 private:
  void push(std::int32_t id) {
    // Tokenizers refuse vocabularies beyond uint16, so this holds for every id they produce.
    DPL_CHECK(id >= 0 && id < data::kMaxTokenizerVocab, "token id ", id, " does not fit a uint16 token shard");
    buffer_.push_back(static_cast<std::uint16_t>(id));
    ++tokens_;
    if (static_cast<std::int64_t>(buffer_.size()) == capacity_) flush();
  }
  void flush() {
    shards_.push_back(shard_path(prefix_, split_, static_cast<std::int64_t>(shards_.size())));
    data::write_token_shard(shards_.back(), buffer_);
    buffer_.clear();
  }

  std::string prefix_;
  std::string split_;
  std::int64_t capacity_;
  std::vector<std::uint16_t> buffer_;
  std::vector<std::string> shards_;
  std::int64_t files_ = 0;
  std::int64_t tokens_ = 0;
};

// Shards of an earlier run with the same prefix and more shards than this one wrote: left in
// place, a glob over PREFIX_train_*.bin would train on them too.
std::vector<std::string> remove_stale_shards(const std::string& prefix, const ShardWriter& w) {
  std::vector<std::string> removed;
  const fs::path p(prefix);
  const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string start = p.filename().string() + "_" + w.split() + "_";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() != start.size() + 10 || name.compare(0, start.size(), start) != 0 ||
        name.compare(name.size() - 4, 4, ".bin") != 0)
      continue;
    const std::string digits = name.substr(start.size(), 6);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (std::stoll(digits) < static_cast<long long>(w.shards().size())) continue;
    std::error_code gone;
    fs::remove(e.path(), gone);
    DPL_CHECK(!gone, "cannot remove the stale shard ", e.path().string(), ": ", gone.message());
    removed.push_back(e.path().string());
  }
  return removed;
}

// CLI11's Range names a bound of int64's range in all its 19 digits; this says what is meant.
CLI::Validator whole_number(long long low, long long high) {
  const std::string want = high == std::numeric_limits<long long>::max()
                               ? "a whole number >= " + std::to_string(low)
                               : "a whole number in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        try {
          std::size_t used = 0;
          const long long v = std::stoll(text, &used);
          if (used == text.size() && v >= low && v <= high) return "";
        } catch (const std::exception&) {
        }
        return "expected " + want + ", got '" + text + "'";
      },
      high == std::numeric_limits<long long>::max() ? "N >= " + std::to_string(low) : want);
}

std::string count_of(std::int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

int run(const Options& o) {
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::string described;
  if (!o.vocab.empty()) {
    tokenizer = std::make_unique<data::Gpt2Tokenizer>(o.vocab, o.merges);
    described = "GPT-2 BPE (" + std::to_string(tokenizer->vocab_size()) + " tokens), files end with <|endoftext|>";
    DPL_CHECK(tokenizer->end_of_text().has_value(), o.vocab,
              " has no \"<|endoftext|>\" token; expected one, to separate the files in the token stream");
  } else {
    tokenizer = std::make_unique<data::ByteTokenizer>();
    described = "bytes (256 tokens), files end with byte 0";
  }
  const std::int32_t end_of_text = *tokenizer->end_of_text();

  const std::vector<fs::path> files = collect_files(o);
  std::string filter;
  for (const std::string& e : o.extensions) filter += (filter.empty() ? " with extension " : " or ") + e;
  DPL_CHECK(!files.empty(), "no input files found", filter, "; expected at least 2 (one for each split)");
  DPL_CHECK(files.size() >= 2, "found 1 input file (", files[0].string(), ")", filter,
            "; expected at least 2, so that training and validation each get a file");

  const fs::path parent = fs::path(o.out).parent_path();
  if (!parent.empty()) {
    std::error_code made;
    fs::create_directories(parent, made);
    DPL_CHECK(!made, "cannot create the output folder ", parent.string(), ": ", made.message());
  }
  ShardWriter train(o.out, "train", o.shard_tokens), val(o.out, "val", o.shard_tokens);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string text = read_file(files[i]);
    ShardWriter& split = i % static_cast<std::size_t>(o.val_every) == 0 ? val : train;
    split.add_file(tokenizer->encode(text), end_of_text);
  }
  train.finish();
  val.finish();

  std::cout << "tokenizer: " << described << "\n";
  for (const ShardWriter* w : {&train, &val}) {
    std::cout << w->split() << ": " << count_of(w->files(), "file", "files") << ", "
              << count_of(w->tokens(), "token", "tokens") << " in "
              << count_of(static_cast<std::int64_t>(w->shards().size()), "shard", "shards") << " ("
              << w->shards().front();
    if (w->shards().size() > 1) std::cout << " ... " << w->shards().back();
    std::cout << ")\n";
    for (const std::string& stale : remove_stale_shards(o.out, *w))
      std::cout << "removed " << stale << ", a shard of an earlier run with this prefix\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Tokenizes text files into token shards (llm.c's .bin format): PREFIX_train_NNNNNN.bin and "
               "PREFIX_val_NNNNNN.bin");
  app.add_option("inputs", o.inputs, "files and folders (folders are walked recursively)")->required();
  app.add_option("-o,--out", o.out, "output prefix: writes PREFIX_train_000000.bin, ..., PREFIX_val_000000.bin")
      ->required();
  app.add_option("--ext", o.extensions,
                 "take only files with this extension from folders (repeatable: --ext .py --ext .txt)")
      ->allow_extra_args(false);  // one value per --ext, so that inputs may follow it
  app.add_option("--val-every", o.val_every,
                 "every N-th file in sorted order, the first included, goes to validation")
      ->capture_default_str()
      ->check(whole_number(2, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--shard-tokens", o.shard_tokens, "at most this many tokens per shard")
      ->capture_default_str()
      ->check(whole_number(1, std::numeric_limits<std::int32_t>::max()));
  auto* vocab = app.add_option("--vocab", o.vocab, "GPT-2's encoder.json: selects GPT-2 BPE (needs --merges)");
  auto* merges = app.add_option("--merges", o.merges, "GPT-2's vocab.bpe (needs --vocab)");
  vocab->needs(merges);
  merges->needs(vocab);
  CLI11_PARSE(app, argc, argv);
  for (std::string& e : o.extensions)
    if (!e.empty() && e[0] != '.') e = "." + e;  // "py" means ".py"

  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "text_to_token_shards: " << e.what() << "\n";
    return 1;
  }
}
