// What overlapping the allreduce with backward rests on: the bucket plan over a gradient arena,
// and autograd's gradient-ready hooks (when they fire, in which order, with final gradients).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/parameter_bag.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Bag = test::ParameterBag;

// Parameters of the given element counts, named p0, p1, ... in registration order.
std::shared_ptr<Bag> bag_of(const std::vector<std::int64_t>& sizes) {
  auto bag = std::make_shared<Bag>();
  for (std::size_t i = 0; i < sizes.size(); ++i) bag->add("p" + std::to_string(i), Tensor::zeros({sizes[i]}));
  return bag;
}

// Every bucket as {begin, end}.
std::vector<std::pair<std::int64_t, std::int64_t>> ranges(const std::vector<parallel::Bucket>& buckets) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& b : buckets) out.emplace_back(b.begin, b.end);
  return out;
}

TEST(BucketPlan, StartsFromTheLastParameterWithASmallFirstBucket) {
  // Aligned to 16 elements: p0 at 0 (100 -> 112), p1 at 112 (16), p2 at 128 (40 -> 48),
  // p3 at 176 (8 -> 16), p4 at 192 (64); 256 elements.
  auto bag = bag_of({100, 16, 40, 8, 64});
  const nn::ParameterArena& arena = bag->arena();
  ASSERT_EQ(arena.numel(), 256);
  // First bucket >= 64 B (16 floats): p4 alone. Others >= 256 B (64 floats): p3 + p2 (64
  // elements with padding), then p1 + p0 (the rest, 128 elements).
  const auto buckets = parallel::plan_buckets(arena, 4, 64, 256);
  EXPECT_THAT(ranges(buckets), ElementsAre(std::make_pair(192, 256), std::make_pair(128, 192),
                                           std::make_pair(0, 128)));
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_THAT(buckets[0].parameters, ElementsAre(4u));
  EXPECT_THAT(buckets[1].parameters, ElementsAre(2u, 3u));
  EXPECT_THAT(buckets[2].parameters, ElementsAre(0u, 1u));
}

TEST(BucketPlan, CoversTheArenaExactlyForAnySizes) {
  auto bag = bag_of({3, 1000, 17, 5, 250, 1, 64, 33});
  const nn::ParameterArena& arena = bag->arena();
  for (std::size_t first : {1u, 4u, 100u, 5000u, 1u << 20})
    for (std::size_t size : {1u, 64u, 999u, 4096u, 1u << 20}) {
      SCOPED_TRACE("first " + std::to_string(first) + " bucket " + std::to_string(size));
      const auto buckets = parallel::plan_buckets(arena, 4, first, size);
      ASSERT_FALSE(buckets.empty());
      EXPECT_EQ(buckets.front().end, arena.numel());
      EXPECT_EQ(buckets.back().begin, 0);
      std::vector<std::size_t> seen;
      for (std::size_t k = 0; k < buckets.size(); ++k) {
        const auto& b = buckets[k];
        EXPECT_LT(b.begin, b.end);
        if (k > 0) {
          EXPECT_EQ(b.end, buckets[k - 1].begin);  // contiguous, walking down the arena
        }
        ASSERT_FALSE(b.parameters.empty());
        // Whole parameters only, inside the bucket.
        for (std::size_t j : b.parameters) {
          const auto& e = arena.entries()[j];
          EXPECT_GE(e.offset, b.begin);
          EXPECT_LE(e.offset + e.numel, b.end);
        }
        // Every bucket but the last holds at least its limit.
        if (k + 1 < buckets.size()) {
          EXPECT_GE(static_cast<std::size_t>(b.end - b.begin) * 4, k == 0 ? first : size);
        }
        seen.insert(seen.begin(), b.parameters.begin(), b.parameters.end());
      }
      EXPECT_THAT(seen, ElementsAre(0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u));
    }
}

TEST(BucketPlan, ABigParameterIsABucketOfItsOwnAndEmptyArenasHaveNone) {
  auto bag = bag_of({16, 4096, 16});
  const auto buckets = parallel::plan_buckets(bag->arena(), 4, 64, 128);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_THAT(buckets[1].parameters, ElementsAre(1u));
  EXPECT_EQ(buckets[1].end - buckets[1].begin, 4096);

  // One bucket for everything when the sizes are larger than the arena.
  EXPECT_EQ(parallel::plan_buckets(bag->arena(), 4, 1 << 20, 1 << 20).size(), 1u);
  // Bytes count in the element size: 16 float32 fill a 64-byte first bucket, 16 bfloat16 do not.
  EXPECT_THAT(parallel::plan_buckets(bag->arena(), 4, 64, 1 << 20).front().parameters, ElementsAre(2u));
  EXPECT_THAT(parallel::plan_buckets(bag->arena(), 2, 64, 1 << 20).front().parameters, ElementsAre(1u, 2u));

  Bag empty;
  EXPECT_TRUE(parallel::plan_buckets(empty.arena(), 4, 64, 64).empty());
}

TEST(BucketPlan, RefusesZeroSizes) {
  auto bag = bag_of({16});
  DPL_EXPECT_ERROR(parallel::plan_buckets(bag->arena(), 4, 0, 64),
                   AllOf(HasSubstr("plan_buckets"), HasSubstr(">= 1 byte"), HasSubstr("first bucket 0")));
  DPL_EXPECT_ERROR(parallel::plan_buckets(bag->arena(), 4, 64, 0), HasSubstr("bucket 0"));
  DPL_EXPECT_ERROR(parallel::plan_buckets(bag->arena(), 0, 64, 64), HasSubstr("got element 0"));
}

TEST(GradientReadyHooks, FireOnceInTheOrderBackwardFinishesTheLeavesWithFinalGradients) {
  // y = sum(relu(x*w1 + b1) * w2): backward finishes w2 first, then w1 and b1 (one node).
  Variable x(Tensor::full({4}, 0.5), false);
  Variable w1(Tensor::full({4}, 2.0), true), b1(Tensor::full({4}, 1.0), true), w2(Tensor::full({4}, 3.0), true);
  std::vector<std::string> order;
  std::vector<float> seen_w2;
  const int owner = 0;
  w2.add_gradient_ready_hook(&owner, [&] {
    order.push_back("w2");
    seen_w2 = w2.grad().to_vector<float>();
  });
  w1.add_gradient_ready_hook(&owner, [&] { order.push_back("w1"); });
  b1.add_gradient_ready_hook(&owner, [&] { order.push_back("b1"); });
  Variable y = sum(mul(relu(add(mul(x, w1), b1)), w2));
  y.backward();
  // sum -> mul(., w2) finishes w2; relu; add(., b1) finishes b1; mul(x, w1) finishes w1.
  EXPECT_THAT(order, ElementsAre("w2", "b1", "w1"));
  // The gradient the hook saw is the final one: relu(0.5*2+1) = 2 per element.
  EXPECT_THAT(seen_w2, ElementsAre(2.f, 2.f, 2.f, 2.f));
  EXPECT_THAT(w2.grad().to_vector<float>(), ElementsAre(2.f, 2.f, 2.f, 2.f));

  // A second backward fires them again; after removal they stay quiet.
  order.clear();
  sum(mul(x, w2)).backward();
  EXPECT_THAT(order, ElementsAre("w2"));
  order.clear();
  w2.remove_gradient_ready_hooks(&owner);
  w2.remove_gradient_ready_hooks(&order);  // another owner: nothing to remove
  sum(mul(x, w2)).backward();
  EXPECT_TRUE(order.empty());
}

TEST(GradientReadyHooks, ALeafUsedTwiceIsReadyOnlyAfterItsLastUse) {
  // w is used by the first op and the last one; its hook must wait for both shares.
  Variable w(Tensor::full({3}, 1.0), true), v(Tensor::full({3}, 2.0), true);
  std::vector<float> at_hook;
  int w_fired = 0, v_fired = 0;
  const int owner = 0;
  v.add_gradient_ready_hook(&owner, [&] { ++v_fired; });
  w.add_gradient_ready_hook(&owner, [&] {
    at_hook = w.grad().to_vector<float>();
    ++w_fired;
  });
  // y = sum((w * v) * w) = sum(v w^2): dy/dw = 2 v w = 4, dy/dv = w^2 = 1.
  Variable y = sum(mul(mul(w, v), w));
  y.backward();
  EXPECT_THAT(at_hook, ElementsAre(4.f, 4.f, 4.f));
  EXPECT_EQ(w_fired, 1);
  EXPECT_EQ(v_fired, 1);
  EXPECT_THAT(v.grad().to_vector<float>(), ElementsAre(1.f, 1.f, 1.f));
}

TEST(GradientReadyHooks, ALeafThatIsTheRootFiresToo) {
  Variable w(Tensor::full({1}, 3.0), true);
  int fired = 0;
  const int owner = 0;
  w.add_gradient_ready_hook(&owner, [&] { ++fired; });
  w.backward();
  EXPECT_EQ(fired, 1);
}

TEST(GradientReadyHooks, RefuseWhatCannotBeFinal) {
  const int owner = 0;
  Variable w(Tensor::ones({2}), true);
  Variable no_grad(Tensor::ones({2}), false);
  DPL_EXPECT_ERROR(mul(w, w).add_gradient_ready_hook(&owner, [] {}),
                   AllOf(HasSubstr("expected a leaf that requires gradients"), HasSubstr("the result of an op")));
  DPL_EXPECT_ERROR(no_grad.add_gradient_ready_hook(&owner, [] {}), HasSubstr("a leaf without requires_grad"));
  DPL_EXPECT_ERROR(w.add_gradient_ready_hook(&owner, std::function<void()>()),
                   HasSubstr("expected a callable hook, got an empty one"));
}

}  // namespace
}  // namespace dpl
