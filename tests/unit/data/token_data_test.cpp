// Token data for language models: token shards, the byte and GPT-2 tokenizers, the window loader.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "dpl/core/error.hpp"
#include "dpl/data/token_loader.hpp"
#include "dpl/data/token_shard.hpp"
#include "dpl/data/tokenizer.hpp"
#include "support/expect_error.hpp"
#include "support/file_bytes.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
namespace fs = std::filesystem;
using test::Bytes;
using test::read_bytes;
using test::write_bytes;

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)


void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

void put_le32_at(Bytes& b, std::size_t offset, std::int32_t value) {
  const auto v = static_cast<std::uint32_t>(value);
  for (int k = 0; k < 4; ++k) b[offset + static_cast<std::size_t>(k)] = static_cast<unsigned char>(v >> (8 * k));
}

std::int32_t le32_at(const Bytes& b, std::size_t offset) {
  std::uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(b[offset + static_cast<std::size_t>(k)]) << (8 * k);
  return static_cast<std::int32_t>(v);
}

// --- token shards ------------------------------------------------------------------------------

TEST(TokenShard, WritesLlmcLayoutAndReadsItBack) {
  test::TempDir dir("dpl_token_data_test");
  const std::vector<std::uint16_t> tokens = {0, 1, 255, 256, 12345, 50256, 65535, 7};
  const std::string path = dir.file("a.bin");
  write_token_shard(path, tokens);

  const Bytes b = read_bytes(path);
  ASSERT_EQ(b.size(), 1024u + 2 * tokens.size());
  EXPECT_EQ(le32_at(b, 0), 20240520);
  EXPECT_EQ(le32_at(b, 4), 1);
  EXPECT_EQ(le32_at(b, 8), static_cast<std::int32_t>(tokens.size()));
  for (std::size_t i = 12; i < 1024; ++i) ASSERT_EQ(b[i], 0) << "header byte " << i;
  // Little-endian uint16 after the header: 12345 = 0x3039.
  EXPECT_EQ(b[1024 + 2 * 4], 0x39);
  EXPECT_EQ(b[1024 + 2 * 4 + 1], 0x30);
  EXPECT_FALSE(fs::exists(path + ".partial"));

  EXPECT_EQ(token_shard_size(path), static_cast<std::int64_t>(tokens.size()));
  const TokenShard shard(path);
  EXPECT_EQ(shard.path(), path);
  EXPECT_EQ(shard.size(), static_cast<std::int64_t>(tokens.size()));
  EXPECT_EQ(shard.tokens(), tokens);
  EXPECT_EQ(shard.at(6), 65535);
  EXPECT_CONTAINS(test::error_message([&] { shard.at(8); }), "[0, 8)");
}

TEST(TokenShard, EmptyAndLargeShardsRoundTrip) {
  test::TempDir dir("dpl_token_data_test");
  write_token_shard(dir.file("empty.bin"), {});
  EXPECT_EQ(TokenShard(dir.file("empty.bin")).size(), 0);
  // More tokens than one read or write chunk.
  std::vector<std::uint16_t> many(200000);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::uint16_t>(i * 7919);
  write_token_shard(dir.file("many.bin"), many);
  EXPECT_EQ(TokenShard(dir.file("many.bin")).tokens(), many);
  // Rewriting replaces the file.
  write_token_shard(dir.file("many.bin"), {3, 2, 1});
  EXPECT_EQ(TokenShard(dir.file("many.bin")).tokens(), (std::vector<std::uint16_t>{3, 2, 1}));
}

TEST(TokenShard, RefusesEachHeaderCorruptionNamingTheField) {
  test::TempDir dir("dpl_token_data_test");
  const std::string good = dir.file("good.bin");
  write_token_shard(good, {1, 2, 3, 4, 5});
  const Bytes original = read_bytes(good);
  const std::string bad = dir.file("bad.bin");

  Bytes b = original;
  put_le32_at(b, 0, 20240521);
  write_bytes(bad, b);
  std::string msg = test::error_message([&] { TokenShard s(bad); });
  EXPECT_CONTAINS(msg, bad);
  EXPECT_CONTAINS(msg, "field 0 (magic) is 20240521");
  EXPECT_CONTAINS(msg, "expected 20240520");

  b = original;
  put_le32_at(b, 4, 2);
  write_bytes(bad, b);
  msg = test::error_message([&] { TokenShard s(bad); });
  EXPECT_CONTAINS(msg, "field 1 (version) is 2");
  EXPECT_CONTAINS(msg, "expected 1");

  b = original;
  put_le32_at(b, 8, 6);  // one token more than the file holds
  write_bytes(bad, b);
  msg = test::error_message([&] { token_shard_size(bad); });
  EXPECT_CONTAINS(msg, "field 2 (token count) is 6");
  EXPECT_CONTAINS(msg, "1036 bytes, but it holds 1034");
  EXPECT_CONTAINS(msg, "truncated");

  b = original;
  put_le32_at(b, 8, 4);
  write_bytes(bad, b);
  msg = test::error_message([&] { TokenShard s(bad); });
  EXPECT_CONTAINS(msg, "field 2 (token count) is 4");
  EXPECT_CONTAINS(msg, "trailing bytes");

  b = original;
  put_le32_at(b, 8, -1);
  write_bytes(bad, b);
  EXPECT_CONTAINS(test::error_message([&] { TokenShard s(bad); }), "field 2 (token count) is -1; expected a count >= 0");

  b = original;
  b.resize(1031);  // the last token cut in half
  write_bytes(bad, b);
  EXPECT_CONTAINS(test::error_message([&] { TokenShard s(bad); }), "1034 bytes, but it holds 1031 (truncated)");

  b.resize(500);  // not even a header
  write_bytes(bad, b);
  msg = test::error_message([&] { TokenShard s(bad); });
  EXPECT_CONTAINS(msg, "truncated: it holds 500 bytes");
  EXPECT_CONTAINS(msg, "header of 1024 bytes");

  EXPECT_CONTAINS(test::error_message([&] { TokenShard s(dir.file("missing.bin")); }), "cannot open " + dir.file("missing.bin"));
  EXPECT_CONTAINS(test::error_message([&] { TokenShard s(dir.file("")); }), "is a folder");
}

TEST(TokenShard, FailedWriteNamesThePathAndLeavesNothing) {
  test::TempDir dir("dpl_token_data_test");
  const std::string path = dir.file("no/such/folder/x.bin");
  const std::string msg = test::error_message([&] { write_token_shard(path, {1, 2}); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
}

// --- byte tokenizer ----------------------------------------------------------------------------

TEST(ByteTokenizer, EveryByteIsItsTokenAndDecodeInvertsEncode) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.end_of_text(), std::optional<std::int32_t>(0));
  std::string all;
  for (int b = 255; b >= 0; --b) all += static_cast<char>(b);
  all += "\xff\xfe not UTF-8 \xc3\x28 \x80";
  const std::vector<std::int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(ids[i], static_cast<unsigned char>(all[i]));
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_TRUE(tok.encode("").empty());

  const std::string msg = test::error_message([&] { tok.decode({65, 256, 66}); });
  EXPECT_CONTAINS(msg, "expected ids in [0, 256), got 256 at position 1");
  EXPECT_CONTAINS(test::error_message([&] { tok.decode({-1}); }), "got -1");
}

// --- GPT-2 pre-tokenizer and alphabet ----------------------------------------------------------

std::vector<std::string> pieces(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

using Pieces = std::vector<std::string>;

TEST(Gpt2Pretokenize, FollowsGpt2PatternOnAscii) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("don't stop"), (Pieces{"don", "'t", " stop"}));
  EXPECT_EQ(pieces("we're I'll you've he'd I'm it's"),
            (Pieces{"we", "'re", " I", "'ll", " you", "'ve", " he", "'d", " I", "'m", " it", "'s"}));
  EXPECT_EQ(pieces("IT'S"), (Pieces{"IT", "'", "S"}));  // the contractions are lower case only
  EXPECT_EQ(pieces("abc123!!x"), (Pieces{"abc", "123", "!!", "x"}));
  EXPECT_EQ(pieces("a 42 ,b"), (Pieces{"a", " 42", " ,", "b"}));
  // \s+(?!\S): a run of white space leaves its last character to the next word.
  EXPECT_EQ(pieces("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(pieces("a   \n  b"), (Pieces{"a", "   \n ", " b"}));
  EXPECT_EQ(pieces("x\n\ny"), (Pieces{"x", "\n", "\n", "y"}));
  EXPECT_EQ(pieces("\t\tx"), (Pieces{"\t", "\t", "x"}));
  EXPECT_EQ(pieces("  end  "), (Pieces{" ", " end", "  "}));
  EXPECT_EQ(pieces("end "), (Pieces{"end", " "}));
  EXPECT_EQ(pieces("def f(x):\n    return x"),
            (Pieces{"def", " f", "(", "x", "):", "\n   ", " return", " x"}));
  EXPECT_TRUE(pieces("").empty());
}

TEST(Gpt2Pretokenize, TreatsNonAsciiBytesAsLetters) {
  // "naïve café": ï and é are two bytes each and stay inside their words.
  EXPECT_EQ(pieces("na\xc3\xafve caf\xc3\xa9!"), (Pieces{"na\xc3\xafve", " caf\xc3\xa9", "!"}));
  EXPECT_EQ(pieces("\xff\xfe 1"), (Pieces{"\xff\xfe", " 1"}));
}

TEST(Gpt2ByteToUnicode, MatchesGpt2sAlphabet) {
  EXPECT_EQ(gpt2_byte_to_unicode('a'), "a");
  EXPECT_EQ(gpt2_byte_to_unicode('!'), "!");
  EXPECT_EQ(gpt2_byte_to_unicode(' '), "\xc4\xa0");   // U+0120 Ġ
  EXPECT_EQ(gpt2_byte_to_unicode('\n'), "\xc4\x8a");  // U+010A Ċ
  EXPECT_EQ(gpt2_byte_to_unicode(0x00), "\xc4\x80");  // U+0100 Ā
  EXPECT_EQ(gpt2_byte_to_unicode(0x7f), "\xc4\xa1");  // U+0121
  EXPECT_EQ(gpt2_byte_to_unicode(0xad), "\xc5\x83");  // U+0143, the last
  EXPECT_EQ(gpt2_byte_to_unicode(0xe9), "\xc3\xa9");  // é stands for itself
  std::set<std::string> distinct;
  for (int b = 0; b < 256; ++b) distinct.insert(gpt2_byte_to_unicode(static_cast<std::uint8_t>(b)));
  EXPECT_EQ(distinct.size(), 256u);
}

// --- GPT-2 BPE ---------------------------------------------------------------------------------

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A tiny byte-level vocabulary: byte b is id b (written in GPT-2's alphabet), then the merges'
// tokens in rank order from 256, then <|endoftext|>.
struct TinyBpe {
  std::string encoder, merges;
};

TinyBpe write_tiny_bpe(const test::TempDir& dir, const std::vector<std::pair<std::string, std::string>>& merges) {
  std::string json = "{";
  for (int b = 0; b < 256; ++b)
    json += json_string(gpt2_byte_to_unicode(static_cast<std::uint8_t>(b))) + ": " + std::to_string(b) + ",\n";
  int id = 256;
  std::string bpe = "#version: 0.2\n";
  for (const auto& [a, b] : merges) {
    json += json_string(a + b) + ": " + std::to_string(id++) + ",\n";
    bpe += a + " " + b + "\n";
  }
  json += "\"<|endoftext|>\": " + std::to_string(id) + "}";
  TinyBpe files{dir.file("encoder.json"), dir.file("vocab.bpe")};
  write_text(files.encoder, json);
  write_text(files.merges, bpe);
  return files;
}

const std::string kG = "\xc4\xa0";  // Ġ, the space

// Ids 256.. in this order: Ġt, he, Ġthe, ll, ell, aa.
std::vector<std::pair<std::string, std::string>> tiny_merges() {
  return {{kG, "t"}, {"h", "e"}, {kG + "t", "he"}, {"l", "l"}, {"e", "ll"}, {"a", "a"}};
}

TEST(Gpt2Tokenizer, EncodesByMergeRankAsGpt2Does) {
  test::TempDir dir("dpl_token_data_test");
  const TinyBpe files = write_tiny_bpe(dir, tiny_merges());
  const Gpt2Tokenizer tok(files.encoder, files.merges);
  EXPECT_EQ(tok.vocab_size(), 263);
  EXPECT_EQ(tok.merge_count(), 6);
  EXPECT_EQ(tok.end_of_text(), std::optional<std::int32_t>(262));
  EXPECT_EQ(tok.token_id(kG + "the"), std::optional<std::int32_t>(258));
  EXPECT_EQ(tok.token_id("zz"), std::nullopt);

  using Ids = std::vector<std::int32_t>;
  // "the": t h e → (h,e) rank 1 → t he; (t,he) is no merge.
  EXPECT_EQ(tok.encode("the"), (Ids{'t', 257}));
  // " the": Ġ t h e → (Ġ,t) rank 0 → Ġt h e → (h,e) → Ġt he → (Ġt,he) rank 2 → Ġthe.
  EXPECT_EQ(tok.encode(" the"), (Ids{258}));
  // " hello": Ġ h e l l o → he (rank 1) before ll (rank 3); then (he,ll) is no merge, and "e ll"
  // (rank 4) never applies because e went into he first.
  EXPECT_EQ(tok.encode(" hello"), (Ids{' ', 257, 259, 'o'}));
  // "cell": c e l l → ll → (e,ll) rank 4 → c ell.
  EXPECT_EQ(tok.encode("cell"), (Ids{'c', 260}));
  // "aaaaa": every occurrence of (a,a), left to right, without overlap: aa aa a; (aa,aa) is none.
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{261, 261, 'a'}));
  // Pieces are merged separately: "the the" is the + " the".
  EXPECT_EQ(tok.encode("the the"), (Ids{'t', 257, 258}));
  // The special token's text is ordinary text.
  EXPECT_EQ(tok.encode("<|endoftext|>").size(), 13u);

  const std::vector<std::string> texts = {"the hello cell aaaaa", "  x\n\n\ty  ", "na\xc3\xafve \xff\xfe\x80 bytes",
                                         std::string("nul\0byte", 8), "don't IT'S 123 ,.;", ""};
  for (const std::string& s : texts)
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << s;
  EXPECT_EQ(tok.decode({262}), "<|endoftext|>");
  EXPECT_EQ(tok.decode({258, 257}), " thehe");
}

TEST(Gpt2Tokenizer, RefusesBadFilesSayingWhatWasExpected) {
  test::TempDir dir("dpl_token_data_test");
  const TinyBpe files = write_tiny_bpe(dir, tiny_merges());
  const std::string missing = dir.file("nope.json");
  std::string msg = test::error_message([&] { Gpt2Tokenizer t(missing, files.merges); });
  EXPECT_CONTAINS(msg, "cannot open encoder.json " + missing);

  const std::string bad_json = dir.file("bad.json");
  write_text(bad_json, "{\"a\": 1,");
  msg = test::error_message([&] { Gpt2Tokenizer t(bad_json, files.merges); });
  EXPECT_CONTAINS(msg, bad_json + " is not valid JSON");

  write_text(bad_json, "[1, 2]");
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(bad_json, files.merges); }), "holds a JSON array; expected an object");

  write_text(bad_json, "{\"a\": \"x\"}");
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(bad_json, files.merges); }), "expected an integer id");

  write_text(bad_json, "{\"a\": 70000}");
  msg = test::error_message([&] { Gpt2Tokenizer t(bad_json, files.merges); });
  EXPECT_CONTAINS(msg, "has id 70000; expected an id in [0, 65536)");

  write_text(bad_json, "{\"a\": 3, \"b\": 3}");
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(bad_json, files.merges); }), "id 3 is given to both");

  write_text(bad_json, "{\"a\": 0, \"b\": 1}");
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(bad_json, files.merges); }), "has no token for byte 0x00");

  write_text(bad_json, "{\"a b\": 0}");  // a raw space is not in the alphabet (it is written Ġ)
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(bad_json, files.merges); }), "holds U+0020 at byte 1");

  const std::string bad_bpe = dir.file("bad.bpe");
  write_text(bad_bpe, "h e\n");
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(files.encoder, bad_bpe); }), "expected \"#version: ...\"");

  write_text(bad_bpe, "#version: 0.2\nh e\nq z\n");
  msg = test::error_message([&] { Gpt2Tokenizer t(files.encoder, bad_bpe); });
  EXPECT_CONTAINS(msg, "line 3: merge \"q z\": the merged token \"qz\" is not a token of");

  write_text(bad_bpe, "#version: 0.2\nh e\nhe\n");
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(files.encoder, bad_bpe); }), "line 3 is \"he\"; expected a merge");

  write_text(bad_bpe, "#version: 0.2\nh e\nh e\n");
  EXPECT_CONTAINS(test::error_message([&] { Gpt2Tokenizer t(files.encoder, bad_bpe); }), "line 3: merge \"h e\" repeats line 2");

  const Gpt2Tokenizer tok(files.encoder, files.merges);
  EXPECT_CONTAINS(test::error_message([&] { tok.decode({1, 263}); }), "got 263 at position 1");
  EXPECT_CONTAINS(test::error_message([&] { tok.decode({-5}); }), "got -5 at position 0");
}

TEST(Gpt2Tokenizer, AVocabularyWithGapsDecodesOnlyItsIds) {
  test::TempDir dir("dpl_token_data_test");
  const TinyBpe files = write_tiny_bpe(dir, {});
  // Move <|endoftext|> (id 256) to 300: ids 256..299 have no token.
  std::ifstream in(files.encoder);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json.replace(json.find("\"<|endoftext|>\": 256"), 20, "\"<|endoftext|>\": 300");
  write_text(files.encoder, json);
  const Gpt2Tokenizer tok(files.encoder, files.merges);
  EXPECT_EQ(tok.vocab_size(), 301);
  EXPECT_EQ(tok.end_of_text(), std::optional<std::int32_t>(300));
  EXPECT_CONTAINS(test::error_message([&] { tok.decode({270}); }), "got 270 at position 0");
}

// --- window loader -----------------------------------------------------------------------------

constexpr std::int64_t kT = 4;

// Shards whose tokens are all distinct (a running count from 1000), so a window's first token
// names it. With T = 4: 12, 0 (skipped), 9, 15 and 5 windows, 41 in all.
struct Corpus {
  test::TempDir dir{"dpl_token_data_test"};
  std::vector<std::string> paths;
  std::vector<std::vector<std::uint16_t>> shards;
  // Window w: (shard, first token offset), in shard order, windows every T tokens.
  std::vector<std::pair<std::int64_t, std::int64_t>> windows;
  std::map<std::int64_t, std::int64_t> window_of_first_token;

  explicit Corpus(const std::vector<int>& sizes = {50, 3, 37, 64, 21}) {
    std::uint16_t next = 1000;
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      std::vector<std::uint16_t> tokens;
      for (int i = 0; i < sizes[s]; ++i) tokens.push_back(next++);
      paths.push_back(dir.file("shard_" + std::to_string(s) + ".bin"));
      write_token_shard(paths.back(), tokens);
      for (std::int64_t start = 0; start + kT + 1 <= sizes[s]; start += kT) {
        window_of_first_token[tokens[static_cast<std::size_t>(start)]] = static_cast<std::int64_t>(windows.size());
        windows.emplace_back(static_cast<std::int64_t>(s), start);
      }
      shards.push_back(std::move(tokens));
    }
  }
  std::int64_t num_windows() const { return static_cast<std::int64_t>(windows.size()); }
};

// The windows of a batch, by number, checking every row against the shards: inputs are T
// consecutive tokens of one window, targets the same shifted by one.
std::vector<std::int64_t> windows_of(const Corpus& c, const TokenBatch& b) {
  EXPECT_EQ(b.inputs.dtype(), kInt64);
  EXPECT_EQ(b.targets.dtype(), kInt64);
  EXPECT_EQ(b.inputs.shape(), b.targets.shape());
  const std::vector<std::int64_t> in = b.inputs.to_vector<std::int64_t>();
  const std::vector<std::int64_t> tg = b.targets.to_vector<std::int64_t>();
  std::vector<std::int64_t> out;
  for (std::int64_t row = 0; row < b.inputs.size(0); ++row) {
    const auto it = c.window_of_first_token.find(in[static_cast<std::size_t>(row * kT)]);
    if (it == c.window_of_first_token.end()) {
      ADD_FAILURE() << "row " << row << " starts with token " << in[static_cast<std::size_t>(row * kT)]
                    << ", which starts no window";
      out.push_back(-1);
      continue;
    }
    const auto [shard, start] = c.windows[static_cast<std::size_t>(it->second)];
    const std::vector<std::uint16_t>& tokens = c.shards[static_cast<std::size_t>(shard)];
    for (std::int64_t t = 0; t < kT; ++t) {
      const auto k = static_cast<std::size_t>(row * kT + t);
      EXPECT_EQ(in[k], tokens[static_cast<std::size_t>(start + t)]) << "row " << row << " t " << t;
      EXPECT_EQ(tg[k], tokens[static_cast<std::size_t>(start + t + 1)]) << "row " << row << " t " << t;
    }
    out.push_back(it->second);
  }
  return out;
}

std::vector<std::int64_t> concat(const std::vector<std::vector<std::int64_t>>& parts) {
  std::vector<std::int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void expect_same_state(const TokenLoaderState& a, const TokenLoaderState& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.iteration, b.iteration);
  EXPECT_EQ(a.is_new_epoch, b.is_new_epoch);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.shuffle, b.shuffle);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.num_windows, b.num_windows);
  EXPECT_EQ(a.shards_hash, b.shards_hash);
}

TEST(TokenLoader, WindowsStartEveryTTokensWithinShardsAndSkipShortShards) {
  const Corpus c;
  const TokenLoader loader(c.paths, 3, kT, 0, 1, true, 1);
  EXPECT_EQ(loader.num_windows(), 41);
  EXPECT_EQ(c.num_windows(), 41);
  EXPECT_EQ(loader.skipped_shards(), 1);
  for (std::int64_t w = 0; w < loader.num_windows(); ++w)
    EXPECT_EQ(loader.window_location(w), c.windows[static_cast<std::size_t>(w)]) << "window " << w;
  EXPECT_EQ(loader.batches_per_epoch(), 14);  // ceil(41 / 3)
}

TEST(TokenLoader, TargetsAreInputsShiftedByOne) {
  const Corpus c;
  TokenLoader loader(c.paths, 5, kT, 0, 1, true, 3);
  for (int step = 0; step < 12; ++step) {
    const TokenBatch b = loader.next();
    ASSERT_EQ(b.inputs.shape(), (Shape{5, kT}));
    // windows_of checks each row against the shard it names, inputs and targets.
    for (std::int64_t w : windows_of(c, b)) EXPECT_GE(w, 0);
  }
}

TEST(TokenLoader, AnEpochVisitsEveryWindowOnceAndStepsWrapIntoTheNext) {
  const Corpus c;
  const std::int64_t n = c.num_windows();  // 41
  TokenLoader loader(c.paths, 5, kT, 0, 1, true, 11);
  std::vector<std::int64_t> stream;
  for (int step = 1; step <= 17; ++step) {
    const std::vector<std::int64_t> w = windows_of(c, loader.next());
    stream.insert(stream.end(), w.begin(), w.end());
    // The 9th step serves windows 40..44 of the stream: it ends epoch 0 (and the 17th, 80..84,
    // ends epoch 1).
    EXPECT_EQ(loader.is_new_epoch(), step == 9 || step == 17) << "step " << step;
    EXPECT_EQ(loader.epoch(), step >= 17 ? 2 : step >= 9 ? 1 : 0) << "step " << step;
    EXPECT_EQ(loader.iteration(), step);
  }
  EXPECT_DOUBLE_EQ(loader.epoch_detail(), 2.0 + 3.0 / 41.0);
  EXPECT_EQ(loader.batches_per_epoch(), 9);

  const std::vector<std::int64_t> first(stream.begin(), stream.begin() + n);
  const std::vector<std::int64_t> second(stream.begin() + n, stream.begin() + 2 * n);
  std::vector<std::int64_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  for (const auto* epoch : {&first, &second}) {
    std::vector<std::int64_t> sorted = *epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all);
  }
  EXPECT_EQ(first, loader.epoch_order(0));
  EXPECT_EQ(second, loader.epoch_order(1));
  EXPECT_NE(first, second);  // each epoch draws its own order
  EXPECT_NE(first, all);     // shuffled
}

TEST(TokenLoader, OrderIsAFunctionOfSeedAndEpoch) {
  const Corpus c;
  TokenLoader a(c.paths, 4, kT, 0, 1, true, 5), b(c.paths, 4, kT, 0, 1, true, 5), d(c.paths, 4, kT, 0, 1, true, 6);
  bool differs = false;
  for (int step = 0; step < 25; ++step) {
    const std::vector<std::int64_t> wa = windows_of(c, a.next()), wb = windows_of(c, b.next()),
                                    wd = windows_of(c, d.next());
    EXPECT_EQ(wa, wb) << "step " << step;
    differs = differs || wa != wd;
  }
  EXPECT_TRUE(differs);
  EXPECT_NE(a.epoch_order(0), d.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  // A loader of another batch size and process count has the same epochs.
  const TokenLoader e(c.paths, 7, kT, 1, 3, true, 5);
  EXPECT_EQ(e.epoch_order(4), a.epoch_order(4));

  // Without shuffling, the order is the windows' own: shard by shard, in file order.
  TokenLoader plain(c.paths, 4, kT, 0, 1, false, 5);
  std::vector<std::int64_t> stream;
  for (int step = 0; step < 11; ++step) {
    const std::vector<std::int64_t> w = windows_of(c, plain.next());
    stream.insert(stream.end(), w.begin(), w.end());
  }
  for (std::size_t i = 0; i < stream.size(); ++i) EXPECT_EQ(stream[i], static_cast<std::int64_t>(i % 41)) << i;
}

TEST(TokenLoader, RanksTogetherServeTheSingleProcessGlobalBatch) {
  const Corpus c;
  constexpr std::int64_t kGlobal = 6;
  TokenLoader single(c.paths, kGlobal, kT, 0, 1, true, 9);
  std::vector<std::vector<std::int64_t>> reference;
  for (int step = 0; step < 20; ++step) reference.push_back(windows_of(c, single.next()));

  for (int p : {1, 2, 3}) {
    std::vector<TokenLoader> ranks;
    for (int r = 0; r < p; ++r) ranks.push_back(TokenLoader::with_global_batch(c.paths, kGlobal, kT, r, p, true, 9));
    EXPECT_EQ(ranks[0].batch_size(), kGlobal / p);
    for (int step = 0; step < 20; ++step) {
      std::vector<std::vector<std::int64_t>> parts;
      for (TokenLoader& l : ranks) parts.push_back(windows_of(c, l.next()));
      EXPECT_EQ(concat(parts), reference[static_cast<std::size_t>(step)]) << "p = " << p << ", step " << step;
      for (const TokenLoader& l : ranks) {
        EXPECT_EQ(l.iteration(), step + 1);
        EXPECT_EQ(l.epoch(), (step + 1) * kGlobal / 41);
      }
    }
  }
}

TEST(TokenLoader, AStateSavedByFourProcessesContinuesOnTwoAndThree) {
  const Corpus c;
  constexpr std::int64_t kGlobal = 12;
  constexpr int kSaveAt = 5, kMore = 7;
  TokenLoader single(c.paths, kGlobal, kT, 0, 1, true, 21);
  std::vector<std::vector<std::int64_t>> reference;
  for (int step = 0; step < kSaveAt + kMore; ++step) reference.push_back(windows_of(c, single.next()));

  std::vector<TokenLoader> four;
  for (int r = 0; r < 4; ++r) four.push_back(TokenLoader(c.paths, 3, kT, r, 4, true, 21));
  for (int step = 0; step < kSaveAt; ++step) {
    std::vector<std::vector<std::int64_t>> parts;
    for (TokenLoader& l : four) parts.push_back(windows_of(c, l.next()));
    ASSERT_EQ(concat(parts), reference[static_cast<std::size_t>(step)]);
  }
  const TokenLoaderState saved = four[0].state();
  for (const TokenLoader& l : four) expect_same_state(l.state(), saved);  // the state is global
  EXPECT_EQ(saved.epoch, 1);      // 60 windows served of 41 per epoch
  EXPECT_EQ(saved.position, 19);
  EXPECT_EQ(saved.global_batch, kGlobal);

  for (int q : {2, 3}) {
    std::vector<TokenLoader> ranks;
    for (int r = 0; r < q; ++r) {
      ranks.push_back(TokenLoader::with_global_batch(c.paths, kGlobal, kT, r, q, true, 21));
      ranks.back().load_state(saved);
      EXPECT_EQ(ranks.back().iteration(), kSaveAt);
    }
    for (int step = kSaveAt; step < kSaveAt + kMore; ++step) {
      std::vector<std::vector<std::int64_t>> parts;
      for (TokenLoader& l : ranks) parts.push_back(windows_of(c, l.next()));
      EXPECT_EQ(concat(parts), reference[static_cast<std::size_t>(step)]) << "q = " << q << ", step " << step;
    }
    expect_same_state(ranks[0].state(), single.state());
  }
}

TEST(TokenLoader, AGlobalBatchLargerThanAnEpochSpansSeveralEpochs) {
  const Corpus c({9});  // two windows
  TokenLoader loader(c.paths, 5, kT, 0, 1, true, 2);
  const std::vector<std::int64_t> w = windows_of(c, loader.next());
  const std::vector<std::int64_t> o0 = loader.epoch_order(0), o1 = loader.epoch_order(1), o2 = loader.epoch_order(2);
  EXPECT_EQ(w, (std::vector<std::int64_t>{o0[0], o0[1], o1[0], o1[1], o2[0]}));
  EXPECT_EQ(loader.epoch(), 2);
  EXPECT_TRUE(loader.is_new_epoch());
  EXPECT_DOUBLE_EQ(loader.epoch_detail(), 2.5);
}

TEST(TokenLoader, LoadStateRefusesAMismatchAndLeavesTheLoaderUnchanged) {
  const Corpus c;
  TokenLoader loader(c.paths, 4, kT, 0, 1, true, 8), twin(c.paths, 4, kT, 0, 1, true, 8);
  for (int step = 0; step < 13; ++step) {
    loader.next();
    twin.next();
  }
  const TokenLoaderState good = loader.state();
  struct Case {
    const char* expected;
    void (*change)(TokenLoaderState&);
  };
  const Case cases[] = {
      {"seed was 9 when saved, is 8 now", [](TokenLoaderState& s) { s.seed = 9; }},
      {"seq_len was 5 when saved, is 4 now", [](TokenLoaderState& s) { s.seq_len = 5; }},
      {"shuffle was off when saved, is on now", [](TokenLoaderState& s) { s.shuffle = false; }},
      {"number of windows was 40 when saved, is 41 now", [](TokenLoaderState& s) { s.num_windows = 40; }},
      {"hash of the shard sizes", [](TokenLoaderState& s) { s.shards_hash ^= 1; }},
      {"global batch (B x processes) was 8 when saved, is 4 now", [](TokenLoaderState& s) { s.global_batch = 8; }},
      {"expected a position in [0, 41), got 41", [](TokenLoaderState& s) { s.position = 41; }},
      {"expected epoch and iteration >= 0", [](TokenLoaderState& s) { s.epoch = -1; }},
      {"the counters disagree", [](TokenLoaderState& s) { s.iteration += 1; }},
  };
  for (const Case& k : cases) {
    TokenLoaderState bad = good;
    k.change(bad);
    const std::string msg = test::error_message([&] { loader.load_state(bad); });
    EXPECT_CONTAINS(msg, k.expected);
    expect_same_state(loader.state(), good);
  }
  // Two settings at once are both named.
  TokenLoaderState two = good;
  two.seed = 1;
  two.seq_len = 8;
  const std::string msg = test::error_message([&] { loader.load_state(two); });
  EXPECT_CONTAINS(msg, "seq_len was 8");
  EXPECT_CONTAINS(msg, "seed was 1");

  // The same shards in another order number their windows differently.
  std::vector<std::string> reversed(c.paths.rbegin(), c.paths.rend());
  TokenLoader other(reversed, 4, kT, 0, 1, true, 8);
  EXPECT_CONTAINS(test::error_message([&] { other.load_state(good); }), "hash of the shard sizes");

  // Nothing moved: the loader goes on exactly as its twin.
  for (int step = 0; step < 5; ++step) EXPECT_EQ(windows_of(c, loader.next()), windows_of(c, twin.next()));
  // And a good state loads (onto a fresh loader).
  TokenLoader fresh(c.paths, 4, kT, 0, 1, true, 8);
  fresh.load_state(twin.state());
  EXPECT_EQ(windows_of(c, fresh.next()), windows_of(c, twin.next()));
}

TEST(TokenLoader, RefusesBadArgumentsAndShards) {
  const Corpus c;
  std::string msg = test::error_message([&] { TokenLoader::with_global_batch(c.paths, 10, kT, 0, 3); });
  EXPECT_CONTAINS(msg, "a global batch of 10 windows does not divide among 3 processes");
  EXPECT_CONTAINS(msg, "one of 1, 2, 5, 10");
  EXPECT_CONTAINS(test::error_message([&] { TokenLoader l({}, 1, kT); }), "expected at least one token shard");
  EXPECT_CONTAINS(test::error_message([&] { TokenLoader l(c.paths, 0, kT); }), "expected batch_size >= 1, got 0");
  EXPECT_CONTAINS(test::error_message([&] { TokenLoader l(c.paths, 1, 0); }), "expected seq_len >= 1, got 0");
  EXPECT_CONTAINS(test::error_message([&] { TokenLoader l(c.paths, 1, kT, 2, 2); }), "expected a rank in [0, 2), got 2");

  // No shard holds T + 1 = 65 tokens.
  msg = test::error_message([&] { TokenLoader l(c.paths, 1, 64); });
  EXPECT_CONTAINS(msg, "none of the 5 shard(s) holds a window of seq_len + 1 = 65 tokens");
  EXPECT_CONTAINS(msg, "the longest, of 64 tokens");
  // T = 63: only the shard of 64 tokens has a window.
  const TokenLoader one(c.paths, 1, 63);
  EXPECT_EQ(one.num_windows(), 1);
  EXPECT_EQ(one.skipped_shards(), 4);

  std::vector<std::string> with_bad = c.paths;
  with_bad.push_back(c.dir.file("missing.bin"));
  EXPECT_CONTAINS(test::error_message([&] { TokenLoader l(with_bad, 1, kT); }), "cannot open " + c.dir.file("missing.bin"));
}

TEST(TokenLoader, AShardThatChangedSinceTheStartIsNamed) {
  const Corpus c({20, 20});
  TokenLoader loader(c.paths, 2, kT, 0, 1, false, 0);
  write_token_shard(c.paths[0], std::vector<std::uint16_t>(30, 1));
  const std::string msg = test::error_message([&] { loader.next(); });
  EXPECT_CONTAINS(msg, c.paths[0] + " holds 30 tokens now but held 20");
  EXPECT_EQ(loader.iteration(), 0);
}

}  // namespace
