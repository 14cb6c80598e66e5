// Shape and indexing ops, batched matmul and Embedding against PyTorch: tests/golden/shape_golden.txt
// holds small fixed problems and PyTorch's float64 answers, and embedding_state_dict.safetensors a
// PyTorch nn.Embedding's state_dict (both written by tests/golden/make_shape_golden.py). Inputs are
// multiples of 1/64, so the data movement ops must match exactly; the products (inner extent 4)
// are exact in float32 too, with 1e-6 left for the order of the additions.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/golden.hpp"
#include "support/source_tree.hpp"

namespace dpl {
namespace {

using test::expect_golden;
using test::GoldenCase;

constexpr float kTol = 1e-6f;

const GoldenCase& golden(const std::string& name) {
  static const std::vector<GoldenCase> cases = test::load_golden("shape_golden.txt");
  for (const GoldenCase& c : cases)
    if (c.name == name) return c;
  ADD_FAILURE() << "tests/golden/shape_golden.txt has no case " << name;
  static const GoldenCase none;
  return none;
}

// The golden file's numbers as an int64 index tensor.
Tensor as_index(const Tensor& t) {
  std::vector<std::int64_t> v;
  for (float f : t.to_vector<float>()) v.push_back(static_cast<std::int64_t>(f));
  return Tensor::from_vector(v, t.shape());
}

std::vector<std::int64_t> int_params(const GoldenCase& c, const std::string& key) {
  std::vector<std::int64_t> out;
  for (double v : c.params.at(key)) out.push_back(static_cast<std::int64_t>(v));
  return out;
}

// Runs op on the case's leaves (named by `inputs`), then checks y and each leaf's gradient of
// sum(y * gy).
void check_case(const std::string& name, const std::vector<std::string>& inputs,
                const std::function<Variable(const GoldenCase&, const std::vector<Variable>&)>& op) {
  SCOPED_TRACE(name);
  const GoldenCase& c = golden(name);
  ASSERT_FALSE(c.tensors.empty());
  std::vector<Variable> leaves;
  for (const std::string& k : inputs) leaves.emplace_back(c.tensor(k).clone(), true);
  const Variable y = op(c, leaves);
  expect_golden(y.data(), c.tensor("y"), "y", kTol, kTol);
  sum(mul(y, Variable(c.tensor("gy")))).backward();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    expect_golden(leaves[i].grad(), c.tensor("g" + inputs[i]), "g" + inputs[i], kTol, kTol);
}

TEST(ShapeGolden, PadWithPositiveAndNegativePads) {
  for (const char* name : {"pad", "pad_crop"})
    check_case(name, {"x"}, [](const GoldenCase& c, const auto& v) {
      return pad(v[0], int_params(c, "pads"), c.param("value"));
    });
}

TEST(ShapeGolden, CatStackAndChunk) {
  check_case("cat", {"a", "b", "c"}, [](const GoldenCase&, const auto& v) { return cat({v[0], v[1], v[2]}, 1); });
  check_case("stack", {"a", "b"}, [](const GoldenCase&, const auto& v) { return stack({v[0], v[1]}, 1); });
  check_case("chunk", {"x"}, [](const GoldenCase&, const auto& v) {
    std::vector<Variable> pieces = chunk(v[0], 3, 0);
    return cat({pieces[2], pieces[1], pieces[0]}, 0);
  });
}

TEST(ShapeGolden, ViewsIntoOtherOps) {
  check_case("permute_reshape", {"x"},
             [](const GoldenCase&, const auto& v) { return reshape(permute(v[0], {2, 0, 1}), {4, 6}); });
  check_case("transpose_matmul", {"a", "b"},
             [](const GoldenCase&, const auto& v) { return matmul(transpose(v[0], 0, 1), v[1]); });
  check_case("expand", {"x"}, [](const GoldenCase&, const auto& v) { return expand(v[0], {2, 3, 4}); });
}

TEST(ShapeGolden, GatherAndIndexSelect) {
  check_case("gather", {"x"}, [](const GoldenCase& c, const auto& v) {
    return gather(v[0], c.int_param("dim"), as_index(c.tensor("index")));
  });
  check_case("index_select", {"x"}, [](const GoldenCase& c, const auto& v) {
    return index_select(v[0], c.int_param("dim"), as_index(c.tensor("index")));
  });
}

TEST(ShapeGolden, MatmulOfEveryRankAndBmm) {
  const auto product = [](const GoldenCase&, const auto& v) { return matmul(v[0], v[1]); };
  for (const char* name : {"matmul_broadcast", "matmul_vector_batch", "matmul_batch_vector", "matmul_batch_matrix"})
    check_case(name, {"a", "b"}, product);
  check_case("bmm", {"a", "b"}, [](const GoldenCase&, const auto& v) { return bmm(v[0], v[1]); });
}

TEST(ShapeGolden, EmbeddingLoadsAPyTorchStateDictAndGivesItsOutputAndGradient) {
  const GoldenCase& c = golden("embedding");
  ASSERT_FALSE(c.tensors.empty());
  nn::Embedding emb(nn::EmbeddingOptions(10, 4).padding_idx(c.int_param("padding_idx")));
  nn::load_weights(emb, source_path("tests/golden/embedding_state_dict.safetensors"));
  expect_golden(emb.weight().data(), c.tensor("weight"), "weight", 0.f, 0.f);
  for (DType index_type : {kInt64, kInt32}) {
    SCOPED_TRACE(dtype_name(index_type));
    emb.zero_grad();
    Tensor ids = as_index(c.tensor("ids"));
    if (index_type == kInt32) {
      std::vector<std::int32_t> narrow;
      for (std::int64_t v : ids.to_vector<std::int64_t>()) narrow.push_back(static_cast<std::int32_t>(v));
      ids = Tensor::from_vector(narrow, ids.shape());
    }
    const Variable y = emb(Variable(ids));
    expect_golden(y.data(), c.tensor("y"), "y", 0.f, 0.f);
    sum(mul(y, Variable(c.tensor("gy")))).backward();
    expect_golden(emb.weight().grad(), c.tensor("gweight"), "gweight", kTol, kTol);
  }
}

}  // namespace
}  // namespace dpl
