#include "dpl/comm/agreement.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "comm/setting_differences.hpp"
#include "core/stable_hash.hpp"
#include "dpl/core/error.hpp"

namespace dpl::comm {

namespace {

// Differing ranks whose first differing line the error spells out; the others are only named,
// so that a job of many ranks gets a message of readable length.
constexpr std::size_t kDetailedRanks = 4;

// Every rank gets root's text: its length, then its bytes packed into int64 words (a dtype every
// communicator moves).
std::string broadcast_text(Communicator& comm, const std::string& text, int root) {
  Tensor len = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(text.size())}, {1});
  comm.broadcast(len, root);
  const std::int64_t n = len.to_vector<std::int64_t>()[0];
  if (n == 0) return {};
  Tensor words = Tensor::zeros({(n + 7) / 8}, kInt64);
  if (comm.rank() == root) std::memcpy(words.raw_data(), text.data(), text.size());
  comm.broadcast(words, root);
  return std::string(static_cast<const char*>(words.raw_data()), static_cast<std::size_t>(n));
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// "Rank R: expected <kind> 'a' as on rank 0, got 'b' (...)": the first line where this rank's
// description leaves rank 0's.
std::string first_difference(int rank, const std::string& reference, const std::string& mine,
                             const std::string& line_kind) {
  const auto a = split_lines(reference), b = split_lines(mine);
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  std::ostringstream os;
  os << "Rank " << rank << ": expected " << line_kind << " '" << (i < a.size() ? a[i] : "(none)")
     << "' as on rank 0, got '" << (i < b.size() ? b[i] : "(none)") << "' (" << b.size() << ' ' << line_kind
     << "s here, " << a.size() << " on rank 0)";
  return os.str();
}

}  // namespace

std::vector<std::uint64_t> gather_description_hashes(Communicator& comm, const std::string& description) {
  const std::uint64_t mine = ::dpl::detail::stable_hash(description);
  std::int64_t word = 0;
  std::memcpy(&word, &mine, sizeof word);  // int64 carries the bits: every communicator moves it
  Tensor send = Tensor::from_vector<std::int64_t>({word}, {1});
  Tensor all = Tensor::empty({comm.size()}, kInt64);
  comm.allgather(send, all);
  std::vector<std::uint64_t> out(static_cast<std::size_t>(comm.size()));
  std::memcpy(out.data(), all.raw_data(), out.size() * sizeof(std::uint64_t));
  return out;
}

std::vector<int> ranks_differing_from_rank0(Communicator& comm, const std::string& description) {
  const auto hashes = gather_description_hashes(comm, description);
  std::vector<int> out;
  for (std::size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0]) out.push_back(static_cast<int>(r));
  return out;
}

void check_ranks_agree(Communicator& comm, const std::string& description, const AgreementError& error) {
  const std::vector<int> differing = ranks_differing_from_rank0(comm, description);
  if (differing.empty()) return;
  // Every rank holds the same list, so every rank takes this path and makes the same broadcasts.
  const std::string reference = broadcast_text(comm, comm.rank() == 0 ? description : std::string(), 0);
  std::ostringstream msg;
  msg << error.operation << " (" << comm.name() << "): " << error.subject << " differ between ranks (rank(s) ";
  for (std::size_t i = 0; i < differing.size(); ++i) msg << (i ? ", " : "") << differing[i];
  msg << " differ from rank 0); " << error.remedy << '.';
  const std::size_t detailed = std::min(differing.size(), kDetailedRanks);
  for (std::size_t i = 0; i < detailed; ++i) {
    const int r = differing[i];
    const std::string mine =
        comm.rank() == r ? first_difference(r, reference, description, error.line_kind) : std::string();
    msg << ' ' << broadcast_text(comm, mine, r) << (i + 1 < detailed ? ";" : "");
  }
  if (differing.size() > detailed) msg << " (and " << differing.size() - detailed << " more ranks)";
  DPL_FAIL(msg.str());
}

void check_settings_agree(Communicator& comm, const std::vector<NamedValue>& values, const std::string& operation) {
  const std::string mine = detail::encode_settings(values);
  const std::vector<std::uint64_t> hashes = gather_description_hashes(comm, mine);
  if (std::all_of(hashes.begin(), hashes.end(), [&](std::uint64_t h) { return h == hashes[0]; })) return;
  // Every rank holds the same table: one broadcast per distinct text, from its lowest rank.
  std::map<std::uint64_t, std::string> texts;
  for (std::size_t r = 0; r < hashes.size(); ++r) {
    if (texts.count(hashes[r])) continue;
    const int root = static_cast<int>(r);
    texts[hashes[r]] = broadcast_text(comm, comm.rank() == root ? mine : std::string(), root);
  }
  std::vector<std::string> by_rank;
  for (const std::uint64_t h : hashes) by_rank.push_back(texts[h]);
  std::string differences = detail::setting_differences(by_rank);
  // Equal hashes of different texts aside, the texts differ; say so even if no value does.
  if (differences.empty()) differences = "the ranks gave different lists of settings";
  DPL_FAIL(operation, " (", comm.name(), "): ", differences, "; every rank must run with the same settings");
}

namespace detail {

namespace {

// Separators that no flag value or setting name contains (ASCII unit and record separators).
constexpr char kNameEnd = '\x1f';
constexpr char kValueEnd = '\x1e';

std::vector<std::pair<std::string, std::string>> decode_settings(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t name_end = text.find(kNameEnd, pos);
    const std::size_t value_end = text.find(kValueEnd, name_end == std::string::npos ? pos : name_end);
    if (name_end == std::string::npos || value_end == std::string::npos) break;
    out.emplace_back(text.substr(pos, name_end - pos), text.substr(name_end + 1, value_end - name_end - 1));
    pos = value_end + 1;
  }
  return out;
}

// "rank 0", "ranks 0, 2", "ranks 0, 1, 2, 3, 4, 5 and 10 more".
std::string ranks_text(const std::vector<int>& ranks) {
  constexpr std::size_t kListed = 6;
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < ranks.size() && i < kListed; ++i) os << (i ? ", " : "") << ranks[i];
  if (ranks.size() > kListed) os << " and " << ranks.size() - kListed << " more";
  return os.str();
}

}  // namespace

std::string encode_settings(const std::vector<NamedValue>& values) {
  std::string out;
  for (const NamedValue& v : values) out += v.name + kNameEnd + v.value + kValueEnd;
  return out;
}

std::string setting_differences(const std::vector<std::string>& encoded_by_rank) {
  std::vector<std::vector<std::pair<std::string, std::string>>> decoded;
  std::vector<std::string> names;  // in the order the ranks list them, rank 0's first
  for (const std::string& text : encoded_by_rank) {
    decoded.push_back(decode_settings(text));
    for (const auto& nv : decoded.back())
      if (std::find(names.begin(), names.end(), nv.first) == names.end()) names.push_back(nv.first);
  }
  std::ostringstream os;
  for (const std::string& name : names) {
    // value -> ranks, in the order of the lowest rank holding each value
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (std::size_t r = 0; r < decoded.size(); ++r) {
      std::string value = "(not given)";
      for (const auto& nv : decoded[r])
        if (nv.first == name) value = nv.second;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
      if (it == groups.end()) groups.push_back({value, {static_cast<int>(r)}});
      else it->second.push_back(static_cast<int>(r));
    }
    if (groups.size() < 2) continue;
    os << (os.tellp() > 0 ? "; " : "") << "setting '" << name << "' differs between ranks: ";
    for (std::size_t g = 0; g < groups.size(); ++g) {
      os << (g ? ", " : "") << ranks_text(groups[g].second) << (groups[g].second.size() == 1 ? " has " : " have ")
         << (groups[g].first.empty() ? "''" : groups[g].first);
    }
  }
  return os.str();
}

}  // namespace detail

}  // namespace dpl::comm
