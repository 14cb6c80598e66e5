#pragma once
// The words of a settings mismatch, shared by create_communicator's request check (over raw MPI,
// before any communicator exists) and check_settings_agree (over a communicator). Pure functions,
// so that the wording can be tested without MPI.

#include <string>
#include <vector>

#include "dpl/comm/agreement.hpp"

namespace dpl::comm::detail {

/// The named values as one text, the same on every rank for the same list: what the ranks hash
/// and, when the hashes differ, exchange.
std::string encode_settings(const std::vector<NamedValue>& values);

/// From every rank's encode_settings text (index = rank): each setting whose value is not the same
/// on every rank, as "setting 'batch size' differs between ranks: rank 0 has 100, rank 1 has 50",
/// several joined by "; ". Ranks with the same value are listed together ("ranks 0, 2 have 100");
/// a setting a rank did not give reads "(not given)". Empty when every rank has the same values.
std::string setting_differences(const std::vector<std::string>& encoded_by_rank);

}  // namespace dpl::comm::detail
