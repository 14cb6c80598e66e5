#pragma once
// Tokenizers that turn text into the token ids a language model trains on: bytes as tokens, and
// GPT-2's byte-level BPE read from its two local files (encoder.json, vocab.bpe).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dpl::data {

/// The largest vocabulary a tokenizer may have: token shards store ids as uint16.
inline constexpr std::int64_t kMaxTokenizerVocab = 65536;

/// What every tokenizer offers: text to ids and back.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// The token ids of text (any bytes; UTF-8 is not required). Ensures every id lies in
  /// [0, vocab_size()) and decode(encode(text)) == text.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  /// The bytes the ids stand for, concatenated. Requires every id to have a token; throws
  /// dpl::Error naming the first id that has none (negative, too large, or a gap in the vocabulary)
  /// and its position.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  /// One more than the largest id; at most kMaxTokenizerVocab.
  virtual std::int64_t vocab_size() const = 0;
  /// The id that separates documents in a token stream, when the vocabulary has one.
  virtual std::optional<std::int32_t> end_of_text() const = 0;
};

/// Each byte is its own token (vocabulary 256); decode is the inverse.
/// The end of a document is byte 0 (NUL), which text files do not contain, so the vocabulary
/// stays 256: a NUL inside a document reads as a document boundary.
class ByteTokenizer final : public Tokenizer {
 public:
  /// The document separator: byte 0.
  static constexpr std::int32_t kEndOfText = 0;

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override { return 256; }
  std::optional<std::int32_t> end_of_text() const override { return kEndOfText; }
};

/// GPT-2's byte-level BPE, loaded from its local files; nothing is ever downloaded.
///
/// encode follows GPT-2's encoder.py: the text is cut into pieces by GPT-2's pre-tokenizer
/// (gpt2_pretokenize, an ASCII approximation of its regular expression), each piece's bytes are
/// written in GPT-2's byte-to-unicode alphabet, and merges are applied by rank (the lowest-ranked
/// adjacent pair first, every occurrence of it left to right) until no adjacent pair is a merge.
/// "<|endoftext|>" inside the text is encoded as ordinary text, as encoder.py does; the separator
/// between documents is end_of_text(), which a caller inserts itself.
/// Copies share the loaded tables; the tokenizer is immutable, so one may serve several threads.
class Gpt2Tokenizer final : public Tokenizer {
 public:
  /// Loads encoder_json (a JSON object: token string in GPT-2's byte-to-unicode alphabet → id)
  /// and vocab_bpe (a "#version" first line, then one merge "a b" per line, in rank order).
  /// Requires: ids distinct, in [0, kMaxTokenizerVocab); every token string written in the
  /// byte-to-unicode alphabet; a token for each of the 256 bytes; each merge's two pieces and
  /// their concatenation tokens of the encoder; no merge twice.
  /// Throws dpl::Error naming the file and what was expected and what came: a missing or
  /// unreadable file, malformed JSON (with the parser's position), a value that is not an integer,
  /// an id out of range or given twice, a token outside the alphabet, a missing byte token, a
  /// missing "#version" line, a merge line that is not two pieces, a piece not in the encoder.
  Gpt2Tokenizer(const std::string& encoder_json, const std::string& vocab_bpe);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override;
  /// The id of "<|endoftext|>" when the encoder has that token.
  std::optional<std::int32_t> end_of_text() const override;
  /// The id of a token written in the byte-to-unicode alphabet ("Ġthe"), if the encoder has it.
  std::optional<std::int32_t> token_id(std::string_view token) const;
  /// Number of merges read from vocab_bpe.
  std::int64_t merge_count() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

/// GPT-2's byte-to-unicode alphabet: the character (as UTF-8) that stands for byte b in its
/// encoder.json and vocab.bpe. Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
/// themselves; the other 68 map, in byte order, to U+0100..U+0143 (so ' ' is "Ġ", '\n' is "Ċ").
std::string gpt2_byte_to_unicode(std::uint8_t b);

/// The pieces GPT-2's pre-tokenizer cuts text into, in order; their concatenation is text.
/// GPT-2 uses the regular expression
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// std::regex has no Unicode classes, so this is a hand-written scanner of that pattern over
/// bytes with ASCII classes: letters are A-Z, a-z and every byte >= 0x80 (so a UTF-8 character
/// is never split and counts as a letter), digits are 0-9, white space is space, \t, \n, \v, \f
/// and \r. It agrees with GPT-2 on ASCII text; non-ASCII digits, punctuation and spaces (e.g.
/// "—", U+00A0) are grouped with letters where GPT-2 would separate them, which changes the
/// tokens of such text but never the round trip.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace dpl::data
