#include "dpl/data/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {

// --- GPT-2's byte-to-unicode alphabet --------------------------------------------------------

// Byte b → the code point standing for it (encoder.py's bytes_to_unicode). Printable bytes keep
// their own code point, so vocabularies stay readable; the rest are moved past U+00FF in order.
const std::array<std::uint32_t, 256>& byte_code_points() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> cp{};
    const auto printable = [](unsigned b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    std::uint32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) cp[b] = printable(b) ? b : next++;
    return cp;
  }();
  return table;
}

// The largest code point of the alphabet is U+0143: an array is the inverse.
constexpr std::uint32_t kAlphabetEnd = 0x144;

const std::array<int, kAlphabetEnd>& code_point_bytes() {
  static const std::array<int, kAlphabetEnd> table = [] {
    std::array<int, kAlphabetEnd> bytes;
    bytes.fill(-1);
    for (unsigned b = 0; b < 256; ++b) bytes[byte_code_points()[b]] = static_cast<int>(b);
    return bytes;
  }();
  return table;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {  // every code point of the alphabet is below U+0800: two bytes
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string hex_code_point(std::uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

// The bytes a token string of the alphabet stands for; throws naming the first character
// outside it. Every character of the alphabet takes one or two bytes of UTF-8.
std::string alphabet_to_bytes(const std::string& token, const std::string& where) {
  std::string out;
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  for (std::size_t i = 0; i < token.size();) {
    std::uint32_t cp = s[i];
    std::size_t len = 1;
    if (s[i] >= 0xC0 && s[i] < 0xE0 && i + 1 < token.size() && (s[i + 1] & 0xC0) == 0x80) {
      cp = (static_cast<std::uint32_t>(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
      len = 2;
    }
    const bool known = (s[i] < 0x80 || len == 2) && cp < kAlphabetEnd && code_point_bytes()[cp] >= 0;
    DPL_CHECK(known, where, ": token \"", token, "\" holds ",
              s[i] < 0x80 || len == 2 ? hex_code_point(cp) : std::string("a character above U+07FF"), " at byte ", i,
              ", which is not in GPT-2's byte-to-unicode alphabet; expected token strings written in that ",
              "alphabet (as in GPT-2's encoder.json)");
    out += static_cast<char>(code_point_bytes()[cp]);
    i += len;
  }
  return out;
}

std::string read_text_file(const std::string& path, const char* what) {
  std::error_code ec;
  DPL_CHECK(!std::filesystem::is_directory(path, ec), "Gpt2Tokenizer: ", path, " is a folder; expected ", what);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) DPL_FAIL("Gpt2Tokenizer: cannot open ", what, " ", path, ": ", errno ? std::strerror(errno) : "unknown reason");
  std::ostringstream text;
  text << in.rdbuf();
  DPL_CHECK(!in.bad(), "Gpt2Tokenizer: reading ", path, " failed");
  return text.str();
}

// --- GPT-2's pre-tokenizer, ASCII classes ----------------------------------------------------

bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_other(unsigned char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }

// Length of the piece starting at i: the first alternative of the pattern that matches there,
// with the regular expression's backtracking worked out by hand.
std::size_t piece_length(std::string_view s, std::size_t i) {
  const std::size_t n = s.size();
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, as GPT-2's pattern is)
  if (at(i) == '\'') {
    for (const std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
      if (s.substr(i, c.size()) == c) return c.size();
  }
  // ` ?X+` for X = letters, digits, other: the optional space is taken only when an X follows,
  // and without it the piece would start with a space, which is none of the three classes.
  const std::size_t j = at(i) == ' ' ? i + 1 : i;
  for (bool (*cls)(unsigned char) : {is_letter, is_digit, is_other}) {
    if (j < n && cls(at(j))) {
      std::size_t k = j + 1;
      while (k < n && cls(at(k))) ++k;
      return k - i;
    }
  }
  // Here at(i) is white space. \s+(?!\S): the run of white space, less its last character when a
  // non-space follows (that character then starts the next piece, " ?X+"); when the run is one
  // character followed by a non-space, \s+ takes it alone.
  std::size_t k = i + 1;
  while (k < n && is_space(at(k))) ++k;
  if (k == n) return k - i;
  return k - 1 > i ? k - 1 - i : 1;
}

}  // namespace

std::string gpt2_byte_to_unicode(std::uint8_t b) {
  std::string out;
  append_utf8(out, byte_code_points()[b]);
  return out;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = piece_length(text, i);
    pieces.push_back(text.substr(i, len));
    i += len;
  }
  return pieces;
}

// --- ByteTokenizer ---------------------------------------------------------------------------

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    DPL_CHECK(ids[i] >= 0 && ids[i] < 256, "ByteTokenizer::decode: expected ids in [0, 256), got ", ids[i],
              " at position ", i);
    out[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return out;
}

// --- Gpt2Tokenizer ---------------------------------------------------------------------------

struct Gpt2Tokenizer::Impl {
  struct Merge {
    std::int32_t rank;
    std::int32_t id;  // the token the pair becomes
  };
  std::unordered_map<std::string, std::int32_t> ids;  // token string (alphabet) → id
  std::vector<std::string> bytes;                     // id → the bytes it stands for
  std::vector<bool> has;                              // id → whether the encoder has it
  std::array<std::int32_t, 256> byte_id{};            // byte → its single-byte token
  std::unordered_map<std::uint64_t, Merge> merges;    // (left id, right id) → merge
  std::optional<std::int32_t> end_of_text;
  std::int64_t vocab_size = 0;

  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32 | static_cast<std::uint32_t>(b);
  }

  // Merging ids rather than strings gives encoder.py's result: every piece is a token, and a
  // token's string and its id determine each other.
  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
    std::vector<std::int32_t> word;
    word.reserve(piece.size());
    for (char c : piece) word.push_back(byte_id[static_cast<unsigned char>(c)]);
    while (word.size() >= 2) {
      const Merge* best = nullptr;
      std::int32_t left = 0, right = 0;
      for (std::size_t i = 0; i + 1 < word.size(); ++i) {
        const auto it = merges.find(key(word[i], word[i + 1]));
        if (it != merges.end() && (best == nullptr || it->second.rank < best->rank)) {
          best = &it->second;
          left = word[i];
          right = word[i + 1];
        }
      }
      if (best == nullptr) break;
      std::size_t w = 0;
      for (std::size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          word[w++] = best->id;
          i += 2;
        } else {
          word[w++] = word[i++];
        }
      }
      word.resize(w);
    }
    out.insert(out.end(), word.begin(), word.end());
  }
};

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json, const std::string& vocab_bpe) {
  auto impl = std::make_shared<Impl>();

  // encoder.json
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_text_file(encoder_json, "encoder.json"));
  } catch (const nlohmann::json::exception& e) {
    DPL_FAIL("Gpt2Tokenizer: ", encoder_json, " is not valid JSON: ", e.what(),
             "; expected encoder.json, an object of token string → id");
  }
  DPL_CHECK(encoder.is_object(), "Gpt2Tokenizer: ", encoder_json, " holds a JSON ", encoder.type_name(),
            "; expected an object of token string → id (encoder.json)");
  std::vector<const std::string*> token_of;  // id → its token string, to name duplicates
  for (auto it = encoder.begin(); it != encoder.end(); ++it) {
    const std::string& token = it.key();
    const nlohmann::json& v = it.value();
    DPL_CHECK(v.is_number_integer(), "Gpt2Tokenizer: ", encoder_json, ": token \"", token, "\" has the value ",
              v.dump(), "; expected an integer id");
    const bool too_large = v.is_number_unsigned() && v.get<std::uint64_t>() >= kMaxTokenizerVocab;
    const std::int64_t id = too_large ? kMaxTokenizerVocab : v.get<std::int64_t>();
    DPL_CHECK(!too_large && id >= 0 && id < kMaxTokenizerVocab, "Gpt2Tokenizer: ", encoder_json, ": token \"", token,
              "\" has id ", v.dump(), "; expected an id in [0, ", kMaxTokenizerVocab,
              ") (token shards store ids as uint16, so a vocabulary holds at most ", kMaxTokenizerVocab,
              " tokens)");
    const auto u = static_cast<std::size_t>(id);
    if (u >= token_of.size()) {
      token_of.resize(u + 1, nullptr);
      impl->bytes.resize(u + 1);
      impl->has.resize(u + 1, false);
    }
    DPL_CHECK(token_of[u] == nullptr, "Gpt2Tokenizer: ", encoder_json, ": id ", id, " is given to both \"",
              *token_of[u], "\" and \"", token, "\"; expected each id once");
    token_of[u] = &token;
    impl->bytes[u] = alphabet_to_bytes(token, encoder_json);
    impl->has[u] = true;
    impl->ids.emplace(token, static_cast<std::int32_t>(id));
  }
  impl->vocab_size = static_cast<std::int64_t>(token_of.size());
  DPL_CHECK(impl->vocab_size > 0, "Gpt2Tokenizer: ", encoder_json, " is an empty object; expected a vocabulary");
  for (unsigned b = 0; b < 256; ++b) {
    const std::string c = gpt2_byte_to_unicode(static_cast<std::uint8_t>(b));
    const auto it = impl->ids.find(c);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", b);
    DPL_CHECK(it != impl->ids.end(), "Gpt2Tokenizer: ", encoder_json, " has no token for byte ", hex, " (\"", c,
              "\"); expected a token for each of the 256 bytes, as a byte-level BPE vocabulary has");
    impl->byte_id[b] = it->second;
  }
  if (const auto it = impl->ids.find("<|endoftext|>"); it != impl->ids.end()) impl->end_of_text = it->second;

  // vocab.bpe
  const std::string merges = read_text_file(vocab_bpe, "vocab.bpe");
  std::istringstream lines(merges);
  std::string line;
  std::getline(lines, line);
  DPL_CHECK(line.rfind("#version", 0) == 0, "Gpt2Tokenizer: ", vocab_bpe, ": the first line is \"", line,
            "\"; expected \"#version: ...\" (GPT-2's vocab.bpe)");
  std::unordered_map<std::uint64_t, std::int64_t> line_of;  // pair → its line, to name repeats
  std::int32_t rank = 0;
  for (std::int64_t number = 2; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    DPL_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                  line.find(' ', space + 1) == std::string::npos,
              "Gpt2Tokenizer: ", vocab_bpe, " line ", number, " is \"", line,
              "\"; expected a merge: two pieces separated by one space");
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    std::int32_t id[3];
    const std::string pieces[3] = {left, right, left + right};
    const char* names[3] = {"its left piece", "its right piece", "the merged token"};
    for (int k = 0; k < 3; ++k) {
      const auto it = impl->ids.find(pieces[k]);
      DPL_CHECK(it != impl->ids.end(), "Gpt2Tokenizer: ", vocab_bpe, " line ", number, ": merge \"", line, "\": ",
                names[k], " \"", pieces[k], "\" is not a token of ", encoder_json,
                "; expected every piece of a merge, and their concatenation, in the encoder");
      id[k] = it->second;
    }
    const std::uint64_t key = Impl::key(id[0], id[1]);
    const auto [seen, fresh] = line_of.emplace(key, number);
    DPL_CHECK(fresh, "Gpt2Tokenizer: ", vocab_bpe, " line ", number, ": merge \"", line, "\" repeats line ",
              seen->second, "; expected each merge once");
    impl->merges.emplace(key, Impl::Merge{rank++, id[2]});
  }
  impl_ = std::move(impl);
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3);
  // Words repeat within a text (identifiers, indentation): their merges are worked out once.
  std::unordered_map<std::string_view, std::vector<std::int32_t>> seen;
  std::vector<std::int32_t> ids;
  for (const std::string_view piece : gpt2_pretokenize(text)) {
    const auto it = seen.find(piece);
    if (it != seen.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      continue;
    }
    ids.clear();
    impl_->bpe(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    seen.emplace(piece, ids);
  }
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    DPL_CHECK(id >= 0 && id < impl_->vocab_size && impl_->has[static_cast<std::size_t>(id)],
              "Gpt2Tokenizer::decode: expected ids of the vocabulary (in [0, ", impl_->vocab_size,
              ") and in encoder.json), got ", id, " at position ", i);
    out += impl_->bytes[static_cast<std::size_t>(id)];
  }
  return out;
}

std::int64_t Gpt2Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<std::int32_t> Gpt2Tokenizer::end_of_text() const { return impl_->end_of_text; }

std::optional<std::int32_t> Gpt2Tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->ids.find(std::string(token));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::int64_t Gpt2Tokenizer::merge_count() const { return static_cast<std::int64_t>(impl_->merges.size()); }

}  // namespace dpl::data
