// Crash recovery: leftover NAME.tmp directories are removed, images and
// foreign directories are kept, and nothing without a manifest is an image.
#include <fstream>

#include <gtest/gtest.h>

#include "image/image_catalog.h"
#include "image/recovery.h"
#include "image_test_util.h"

namespace phos::image {
namespace {

using testing::ScratchDir;

// What a crash mid-checkpoint leaves: NAME.tmp with a partial gpu.img.
void MakeLeftover(const std::string& tmpdir) {
  std::filesystem::create_directories(tmpdir);
  std::ofstream(tmpdir + "/gpu.img") << "partial";
}

TEST(Recovery, RemovesLeftoverTmpKeepsImages) {
  ScratchDir tmp;
  ImageWriterOptions o;
  o.chunk_bytes = 4096;
  ASSERT_TRUE(testing::WriteImage(tmp / "good", testing::MakeBuffers({10}), o).ok());
  MakeLeftover(tmp / "crashed.tmp");
  std::filesystem::create_directories(tmp / "not-an-image");
  std::vector<std::string> removed;
  ASSERT_TRUE(RecoverDirectory(tmp.path(), &removed).ok());
  EXPECT_EQ(removed, (std::vector<std::string>{tmp / "crashed.tmp"}));
  EXPECT_FALSE(std::filesystem::exists(tmp / "crashed.tmp"));
  EXPECT_TRUE(IsImageDirectory(tmp / "good"));
  EXPECT_TRUE(std::filesystem::exists(tmp / "not-an-image"));
  EXPECT_FALSE(IsImageDirectory(tmp / "not-an-image"));
  // A leftover that contains a manifest is still not committed.
  EXPECT_FALSE(IsImageDirectory(tmp / "crashed.tmp"));
}

TEST(Recovery, CatalogOpenCleansClassDirectories) {
  ScratchDir tmp;
  const std::string root = tmp / "images";
  MakeLeftover(root + "/latest/ckpt-7.tmp");
  MakeLeftover(root + "/best/ckpt-8.tmp");
  std::unique_ptr<ImageCatalog> catalog;
  ASSERT_TRUE(ImageCatalog::Open(root, &catalog).ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/latest/ckpt-7.tmp"));
  EXPECT_FALSE(std::filesystem::exists(root + "/best/ckpt-8.tmp"));
}

TEST(Recovery, MissingRootIsFine) {
  ScratchDir tmp;
  EXPECT_TRUE(RecoverDirectory(tmp / "nothing-here").ok());
}

TEST(Recovery, WriterReplacesStaleTmpOfSameName) {
  ScratchDir tmp;
  MakeLeftover(tmp / "ckpt.tmp");
  ImageWriterOptions o;
  o.chunk_bytes = 4096;
  auto buffers = testing::MakeBuffers({5000});
  ASSERT_TRUE(testing::WriteImage(tmp / "ckpt", buffers, o).ok());
  EXPECT_TRUE(IsImageDirectory(tmp / "ckpt"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "ckpt.tmp"));
}

}  // namespace
}  // namespace phos::image
