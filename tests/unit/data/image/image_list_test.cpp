// Image lists (Chainer's LabeledImageDataset format) and every error they raise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dpl/data.hpp"
#include "support/expect_error.hpp"
#include "support/images.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
using dpl::test::TempDir;
using ::testing::HasSubstr;

TEST(ImageList, ParsesPathsLabelsAndLineNumbersSkippingBlankLines) {
  TempDir dir("dpl_image_list");
  const std::string list = dir.file("train.txt");
  test::write_text(list, "n01/a.jpg 0\n\n  n02/b.jpg\t17  \r\n/abs/c.jpg 999\n");
  const std::vector<ImageListEntry> e = read_image_list(list);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].path, "n01/a.jpg");
  EXPECT_EQ(e[0].label, 0);
  EXPECT_EQ(e[0].line, 1);
  EXPECT_EQ(e[1].path, "n02/b.jpg");
  EXPECT_EQ(e[1].label, 17);
  EXPECT_EQ(e[1].line, 3);  // the blank line 2 is skipped but still counted
  EXPECT_EQ(e[2].label, 999);
  EXPECT_EQ(e[2].line, 4);

  // The root prefixes relative paths only.
  const LabeledImageDataset ds(list, "/data/imagenet");
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.channels(), 3);
  EXPECT_EQ(ds.file_path(0), "/data/imagenet/n01/a.jpg");
  EXPECT_EQ(ds.file_path(2), "/abs/c.jpg");
  EXPECT_EQ(LabeledImageDataset(list, "/root/").file_path(1), "/root/n02/b.jpg");
  EXPECT_EQ(LabeledImageDataset(list).file_path(1), "n02/b.jpg");
}

// Some editors start a UTF-8 file with a byte order mark: it is not part of the first path, and
// a byte order mark anywhere else is (a path may hold those bytes).
TEST(ImageList, AByteOrderMarkBeforeTheFirstLineIsNotPartOfItsPath) {
  TempDir dir("dpl_image_list");
  const std::string list = dir.file("bom.txt");
  test::write_text(list, "\xEF\xBB\xBF" "n01/a.jpg 0\n" "\xEF\xBB\xBF" "b.jpg 1\n");
  const std::vector<ImageListEntry> e = read_image_list(list);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].path, "n01/a.jpg");
  EXPECT_EQ(e[1].path, "\xEF\xBB\xBF" "b.jpg");
  // So a missing first image is named without it.
  DPL_EXPECT_ERROR(LabeledImageDataset(list, dir.path().string()).get(0),
                   HasSubstr(list + ":1: cannot open " + dir.file("n01/a.jpg")));
}

TEST(ImageList, BadLinesNameFileLineAndReason) {
  TempDir dir("dpl_image_list");
  const std::string list = dir.file("bad.txt");
  // Each list, and the message it must raise (after "<list>:").
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a.jpg 1\nb.jpg\n", "2: expected `path label`, got `b.jpg` (1 field)"},
      {"a.jpg 1 extra\n", "1: expected `path label`, got `a.jpg 1 extra` (3 fields)"},
      {"a.jpg 1\nb.jpg cat\n", "2: label `cat` is not an integer"},
      {"a.jpg 2.5\n", "1: label `2.5` is not an integer"},
      {"a.jpg 1\nb.jpg 2\nc.jpg -3\n", "3: label -3 is negative; expected a class index >= 0"},
      {"a.jpg 99999999999\n", "1: label 99999999999 does not fit in 32 bits"},
  };
  for (const auto& [text, expected] : cases) {
    test::write_text(list, text);
    DPL_EXPECT_ERROR(read_image_list(list), HasSubstr(list + ":" + expected));
  }
  DPL_EXPECT_ERROR(read_image_list(dir.file("absent.txt")),
                   HasSubstr("cannot open image list " + dir.file("absent.txt") + ": No such file or directory"));
}

TEST(ImageList, MissingImageStopsWithListLineAndSystemReason) {
  TempDir dir("dpl_image_list");
  const std::string list = dir.file("val.txt");
  test::write_text(list, "present.jpg 0\nmissing.jpg 4\n");
  if (jpeg_available()) test::write_jpeg(dir.file("present.jpg"), test::gradient_image(8, 8));
  const LabeledImageDataset ds(list, dir.path().string());
  DPL_EXPECT_ERROR(ds.get(1), HasSubstr(list + ":2: cannot open " + dir.file("missing.jpg") +
                                        ": No such file or directory"));
  DPL_EXPECT_ERROR(ds.get(2), HasSubstr("index 2 is outside the 2 images of " + list));
}

TEST(ImageList, CorruptAndTruncatedJpegsNameListLineFileAndDecoderReason) {
  if (!jpeg_available()) GTEST_SKIP() << "this build has no JPEG codec (libturbojpeg0-dev)";
  TempDir dir("dpl_image_list");
  // Large enough that the tables take a small part of the file, so cutting it in half leaves the
  // header whole and the entropy-coded data short: the header still reads, the pixels do not.
  const std::vector<std::uint8_t> good = encode_jpeg(test::gradient_image(256, 256), 90);
  test::write_bytes(dir.file("truncated.jpg"), std::vector<std::uint8_t>(good.begin(), good.begin() + good.size() / 2));
  test::write_bytes(dir.file("garbage.jpg"), {'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  const std::string list = dir.file("list.txt");
  test::write_bytes(dir.file("good.jpg"), good);
  test::write_text(list, "truncated.jpg 1\ngarbage.jpg 2\ngood.jpg 3\n");
  const LabeledImageDataset ds(list, dir.path().string());

  const std::string truncated = test::error_message([&] { ds.get(0); });
  EXPECT_THAT(truncated, HasSubstr(list + ":1: " + dir.file("truncated.jpg") + ": corrupt or truncated JPEG: "));
  // The decoder's own words follow; libjpeg says the data ended early.
  EXPECT_THAT(truncated, HasSubstr("Premature end of JPEG file"));
  // The crop path (the loader's) reports the same way.
  const CropPlanner plan = [](int h, int w) { return CropRequest{{0, 0, w, h}, 8, 8}; };
  DPL_EXPECT_ERROR(ds.get_for_crop(0, plan), HasSubstr(list + ":1: " + dir.file("truncated.jpg") +
                                                       ": corrupt or truncated JPEG: "));
  DPL_EXPECT_ERROR(ds.get(1), HasSubstr(list + ":2: " + dir.file("garbage.jpg") + ": not a readable JPEG header: "));
  // A failure leaves the thread's decoder usable: the next file decodes at its size.
  const Example ok = ds.get(2);
  EXPECT_EQ(ok.image.width, 256);
  EXPECT_EQ(ok.image.height, 256);
  EXPECT_EQ(ok.label, 3);
  // A header too short to hold a size fails the same way on the same thread.
  test::write_bytes(dir.file("garbage.jpg"), std::vector<std::uint8_t>(good.begin(), good.begin() + 300));
  DPL_EXPECT_ERROR(ds.get_for_crop(1, plan), HasSubstr(list + ":2: " + dir.file("garbage.jpg") +
                                                       ": not a readable JPEG header"));
  EXPECT_EQ(ds.get(2).image.width, 256);
}

}  // namespace
