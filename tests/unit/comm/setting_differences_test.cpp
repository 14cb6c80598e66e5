// The words of a settings mismatch (src/comm/setting_differences.hpp), without MPI: which settings
// differ, and which ranks hold which value.
#include "comm/setting_differences.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dpl::comm::detail {
namespace {

std::string text(const std::vector<NamedValue>& values) { return encode_settings(values); }

TEST(SettingDifferences, EqualSettingsSayNothing) {
  const std::string a = text({{"batch size", "100"}, {"epochs", "20"}});
  EXPECT_EQ(setting_differences({a, a, a}), "");
  EXPECT_EQ(setting_differences({}), "");
}

TEST(SettingDifferences, NamesTheSettingAndEachRanksValue) {
  EXPECT_EQ(setting_differences({text({{"batch size", "100"}, {"epochs", "20"}}),
                                 text({{"batch size", "50"}, {"epochs", "20"}})}),
            "setting 'batch size' differs between ranks: rank 0 has 100, rank 1 has 50");
}

TEST(SettingDifferences, GroupsRanksByValueAndListsEverySettingThatDiffers) {
  const std::string a = text({{"epochs", "1"}, {"dtype", "bf16"}});
  const std::string b = text({{"epochs", "2"}, {"dtype", "fp32"}});
  EXPECT_EQ(setting_differences({a, b, a, b}),
            "setting 'epochs' differs between ranks: ranks 0, 2 have 1, ranks 1, 3 have 2; "
            "setting 'dtype' differs between ranks: ranks 0, 2 have bf16, ranks 1, 3 have fp32");
}

TEST(SettingDifferences, AMissingSettingAndAnEmptyValueAreShown) {
  EXPECT_EQ(setting_differences({text({{"resume", ""}, {"layout", "nhwc"}}), text({{"resume", "x.dpl"}})}),
            "setting 'resume' differs between ranks: rank 0 has '', rank 1 has x.dpl; "
            "setting 'layout' differs between ranks: rank 0 has nhwc, rank 1 has (not given)");
}

TEST(SettingDifferences, LongRankListsAreCut) {
  std::vector<std::string> ranks(10, text({{"b", "1"}}));
  ranks[9] = text({{"b", "2"}});
  EXPECT_EQ(setting_differences(ranks),
            "setting 'b' differs between ranks: ranks 0, 1, 2, 3, 4, 5 and 3 more have 1, rank 9 has 2");
}

}  // namespace
}  // namespace dpl::comm::detail
