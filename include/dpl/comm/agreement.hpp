#pragma once
// Whether every rank holds the same thing (the same model, the same recorded phases, GPUs of its
// own): each rank describes its own as text, and the ranks compare stable 64-bit hashes of the
// descriptions, so the check costs one allgather of 8 bytes per rank whatever the text's length.

#include <cstdint>
#include <string>
#include <vector>

#include "dpl/comm/communicator.hpp"

namespace dpl::comm {

/// Collective over comm: every rank calls it, in the same order as its other collectives.
/// Returns, on every rank, the stable hash of each rank's description in rank order. Ensures the
/// table is identical on every rank, so that decisions taken from it agree between ranks.
std::vector<std::uint64_t> gather_description_hashes(Communicator& comm, const std::string& description);

/// Collective over comm. Returns the ranks whose description differs from rank 0's, ascending
/// (empty when every rank agrees). Ensures every rank gets the same list.
std::vector<int> ranks_differing_from_rank0(Communicator& comm, const std::string& description);

/// How check_ranks_agree words its error.
struct AgreementError {
  /// The operation that checks, which starts the message (e.g. "GradientReducer.broadcast_parameters").
  std::string operation;
  /// What must agree, plural (e.g. "the models").
  std::string subject;
  /// What one line of a description is (e.g. "parameter").
  std::string line_kind;
  /// What the caller must do about a difference (e.g. "every rank must build the same model").
  std::string remedy;
};

/// Collective over comm. Returns when every rank's description equals rank 0's. Otherwise every
/// rank throws the same dpl::Error, which names the ranks that differ from rank 0 and, for the
/// first few of them, the first line of their description that differs, e.g.
///   "<operation> (<communicator>): <subject> differ between ranks (rank(s) 1, 3 differ from
///   rank 0); <remedy>. Rank 1: expected <line_kind> 'a' as on rank 0, got 'b' (4 <line_kind>s
///   here, 4 on rank 0)"
/// Descriptions are compared line by line for that detail, so give one item per line. The
/// detail costs a few broadcasts, paid only when the ranks differ.
void check_ranks_agree(Communicator& comm, const std::string& description, const AgreementError& error);

/// A setting that every rank of a run must hold alike, as text: a program's batch size, length,
/// communicator, dtype...
struct NamedValue {
  /// How the message names it, e.g. "batch size (-b)".
  std::string name;
  /// Its value on this rank, e.g. "100".
  std::string value;
};

/// Collective over comm, for the start of a run: ranks started with different settings would
/// otherwise run different numbers of steps, or different collectives, and hang. Returns when
/// every rank passed the same names with the same values in the same order. Otherwise every rank
/// throws the same dpl::Error naming each setting that differs and the ranks' values, e.g.
///   "<operation> (<communicator>): setting 'batch size (-b)' differs between ranks: rank 0 has
///   100, rank 1 has 50; every rank must run with the same settings"
/// Costs one allgather of 8 bytes when the ranks agree; the values themselves travel only when
/// they do not.
void check_settings_agree(Communicator& comm, const std::vector<NamedValue>& values, const std::string& operation);

}  // namespace dpl::comm
