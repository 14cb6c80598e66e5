// CPU-vs-CUDA agreement of the shape and indexing ops and of batched matmul (op_agreement.hpp);
// cat, permute-then-contiguous and pad also in bfloat16 and float16 (dtype_agreement.hpp).
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include "dtype_agreement.hpp"
#include "op_agreement.hpp"

namespace dpl::test {
namespace {

TEST_F(AutogradTest, ReshapeAndFlatten) {
  check("reshape", {{4, 6}}, [](const auto& x) { return reshape(x[0], {3, -1}); });
  check("flatten", {{2, 3, 4}}, [](const auto& x) { return flatten(x[0], 1); });
}

}  // namespace
}  // namespace dpl::test

// --- views, joins, splits, padding and indexing ------------------------------------------------

namespace dpl::test {
namespace {

TEST_F(AutogradTest, ViewsOnTheDevice) {
  check("view", {{4, 6}}, [](const auto& x) { return view(x[0], {2, 12}); });
  check("transpose", {{3, 5, 4}}, [](const auto& x) { return transpose(x[0], 0, 2); });
  check("permute then reshape (a copy)", {{2, 3, 4}},
        [](const auto& x) { return reshape(permute(x[0], {2, 0, 1}), {4, 6}); });
  check("squeeze, unsqueeze", {{3, 1, 4}}, [](const auto& x) { return unsqueeze(squeeze(x[0]), 0); });
  check("narrow", {{5, 6}}, [](const auto& x) { return narrow(x[0], 1, 2, 3); });
  check("slice with a step", {{9, 4}}, [](const auto& x) { return slice(x[0], 0, 1, 8, 3); });
  check("expand", {{3, 1}}, [](const auto& x) { return expand(x[0], {2, 3, 5}); });
  check("contiguous", {{4, 5}}, [](const auto& x) { return contiguous(transpose(x[0], 0, 1)); });
}

TEST_F(AutogradTest, JoinsSplitsAndPaddingOnTheDevice) {
  check("cat", {{2, 3}, {2, 5}}, [](const auto& x) { return cat({x[1], x[0], x[1]}, 1); });
  check("stack", {{3, 4}, {3, 4}}, [](const auto& x) { return stack({x[0], x[1]}, 0); });
  check("split in another order", {{7, 3}}, [](const auto& x) {
    const std::vector<Variable> p = split(x[0], 3, 0);
    return cat({p[2], p[0]}, 0);
  });
  check("chunk", {{4, 6}}, [](const auto& x) {
    const std::vector<Variable> p = chunk(x[0], 3, 1);
    return mul(p[0], p[2]);
  });
  check("pad", {{2, 3, 4}}, [](const auto& x) { return pad(x[0], {1, 2, -1, 1}, 0.5); });
}

// cat joins its inputs in one pass over the output (up to 16 inputs per launch), 16 bytes per
// thread where every row and pointer allows; the strided copy behind contiguous and pad moves 16
// bytes per thread where the innermost dimension is contiguous on both sides and extents, strides
// and pointers allow. Odd rows and the odd pads copy element by element.
using CopyDtypes = DtypeAgreementTest;

TEST_F(CopyDtypes, CatPermutePadInEveryDtype) {
  check_dtypes("cat of 3 along the last dimension", {{2, 3, 16}, {2, 3, 8}, {2, 3, 24}},
               [](const auto& x) { return cat({x[0], x[1], x[2]}, -1); });
  check_dtypes("cat of 3 along dimension 0", {{2, 3, 16}, {1, 3, 16}, {3, 3, 16}},
               [](const auto& x) { return cat({x[0], x[1], x[2]}, 0); });
  check_dtypes("cat of odd rows", {{2, 3, 5}, {2, 3, 3}}, [](const auto& x) { return cat({x[0], x[1]}, -1); });
  check_dtypes("cat of 18 (two launches on the GPU)", std::vector<Shape>(18, Shape{2, 3, 8}),
               [](const auto& x) { return cat(x, -1); });
  check_dtypes("cat of 18 odd ones", std::vector<Shape>(18, Shape{2, 1, 3}), [](const auto& x) { return cat(x, 1); });
  check_dtypes("permute(0, 2, 1, 3).contiguous()", {{2, 5, 3, 16}},
               [](const auto& x) { return contiguous(permute(x[0], {0, 2, 1, 3})); });
  check_dtypes("pad the last two dimensions", {{2, 3, 6, 16}},
               [](const auto& x) { return pad(x[0], {8, 8, 1, 1}, 0.0); });
  check_dtypes("pad with negative pads", {{2, 3, 6, 7}},
               [](const auto& x) { return pad(x[0], {-1, 2, 1, -2}, 0.5); });
}

TEST_F(AutogradTest, IndexingOnTheDevice) {
  const Tensor rows = Tensor::from_vector<std::int64_t>({4, 0, 4, 2, 4}, {5});
  check("index_select", {{5, 3, 2}}, [&](const auto& x) {
    return index_select(x[0], 0, x[0].device() == gpu() ? on_gpu(rows) : rows);
  });
  const Tensor index = Tensor::from_vector<std::int32_t>({0, 2, 2, 1, 1, 1, 2, 0}, {2, 4});
  check("gather", {{3, 4}}, [&](const auto& x) {
    return gather(x[0], 0, x[0].device() == gpu() ? on_gpu(index) : index);
  });
  const Tensor ids = Tensor::from_vector<std::int64_t>({1, 3, 3, 0, 2, 3}, {2, 3});
  check("embedding with a padding row", {{4, 8}}, [&](const auto& x) {
    return embedding(x[0].device() == gpu() ? on_gpu(ids) : ids, x[0], 3);
  });
}

TEST_F(AutogradTest, BatchedMatmulOnTheDevice) {
  check("matmul broadcast", {{2, 1, 3, 7}, {4, 7, 5}}, [](const auto& x) { return matmul(x[0], x[1]); }, 1e-5f, 1e-4f);
  check("matmul vector", {{7}, {3, 7, 2}}, [](const auto& x) { return matmul(x[0], x[1]); }, 1e-5f, 1e-4f);
  check("bmm", {{3, 4, 7}, {3, 7, 5}}, [](const auto& x) { return bmm(x[0], x[1]); }, 1e-5f, 1e-4f);
  check("bmm of transposed views", {{3, 7, 4}, {3, 5, 7}},
        [](const auto& x) { return bmm(transpose(x[0], 1, 2), transpose(x[1], 1, 2)); }, 1e-5f, 1e-4f);
  check("attention scores", {{2, 3, 6, 8}, {2, 3, 5, 8}},
        [](const auto& x) { return matmul(x[0], transpose(x[1], -2, -1)); }, 1e-5f, 1e-4f);
  check("linear of a transposed 3-D input", {{7, 2, 3}, {5, 7}},
        [](const auto& x) { return linear(permute(x[0], {1, 2, 0}), x[1]); }, 1e-5f, 1e-4f);
}

}  // namespace
}  // namespace dpl::test
