// LabeledImageDataset beyond the list parser (image_list_test.cpp): what ranks compare of a list,
// and how an entry that is no readable file is named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "dpl/data/image/labeled_image_dataset.hpp"
#include "dpl/data/random_access_dataset.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(LabeledImageDataset, ContentsFingerprintFollowsPathsAndLabelsOnly) {
  test::TempDir dir("dpl_list_fingerprint");
  write_text(dir.file("a.txt"), "cat.jpg 0\ndog.jpg 1\n");
  write_text(dir.file("same_with_crlf.txt"), "cat.jpg 0\r\n\r\ndog.jpg   1\r\n");
  write_text(dir.file("labels_swapped.txt"), "cat.jpg 1\ndog.jpg 0\n");
  write_text(dir.file("other_path.txt"), "cat.jpg 0\ndogs.jpg 1\n");
  const std::string a = data::LabeledImageDataset(dir.file("a.txt")).contents_fingerprint();
  EXPECT_THAT(a, StartsWith("2 entries, hash "));
  EXPECT_EQ(a.size(), std::string("2 entries, hash ").size() + 16);
  EXPECT_EQ(data::LabeledImageDataset(dir.file("same_with_crlf.txt")).contents_fingerprint(), a);
  EXPECT_NE(data::LabeledImageDataset(dir.file("labels_swapped.txt")).contents_fingerprint(), a);
  EXPECT_NE(data::LabeledImageDataset(dir.file("other_path.txt")).contents_fingerprint(), a);
}

TEST(LabeledImageDataset, AFolderNamedLikeAnImageIsRefusedWithListLineAndPath) {
  test::TempDir dir("dpl_list_folder");
  std::filesystem::create_directories(dir.path() / "images" / "x.jpg");
  write_text(dir.file("train.txt"), "\nimages/x.jpg 3\n");
  const data::LabeledImageDataset set(dir.file("train.txt"), dir.path().string());
  const std::string expected = dir.file("train.txt") + ":2: " + dir.path().string() + "/images/x.jpg is a folder";
  DPL_EXPECT_ERROR(set.get(0), AllOf(HasSubstr(expected), HasSubstr("expected an image file")));
  const data::CropPlanner whole = [](int height, int width) {
    return data::CropRequest{{0, 0, width, height}, height, width};
  };
  DPL_EXPECT_ERROR(set.get_for_crop(0, whole), HasSubstr(expected));
}

}  // namespace
