#include "dpl/comm/agreement.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

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
  const std::uint64_t mine = detail::stable_hash(description);
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

}  // namespace dpl::comm
