// CPU-vs-CUDA agreement of reshape and flatten (op_agreement.hpp).
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include "op_agreement.hpp"

namespace dpl::test {
namespace {

TEST_F(AutogradTest, ReshapeAndFlatten) {
  check("reshape", {{4, 6}}, [](const auto& x) { return reshape(x[0], {3, -1}); });
  check("flatten", {{2, 3, 4}}, [](const auto& x) { return flatten(x[0], 1); });
}

}  // namespace
}  // namespace dpl::test
