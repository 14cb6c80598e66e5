#include <gtest/gtest.h>
#include "dpl/dpl.hpp"
TEST(Smoke, Builds) { EXPECT_EQ(dpl::Tensor::ones({2, 3}).numel(), 6); }
