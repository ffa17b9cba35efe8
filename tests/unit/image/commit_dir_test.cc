// image::CommitDirectory, the one commit of every tree phos builds (images,
// received images, whole-process images, templates): the staged tree
// appears under its final name whole, never over an existing one unless
// asked to exchange, and says whether it became visible.
#include "image/commit_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace phos::image {
namespace {

namespace fs = std::filesystem;

class CommitDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos_commit_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // A staged tree: NAME.tmp/{a.txt, sub/deeper/b.txt} with `text`.
  std::string Stage(const std::string& name, const std::string& text) {
    const std::string dir = root_ + "/" + name + ".tmp";
    fs::create_directories(dir + "/sub/deeper");
    std::ofstream(dir + "/a.txt") << text;
    std::ofstream(dir + "/sub/deeper/b.txt") << text;
    return dir;
  }
  static std::string Read(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  std::string root_;
};

TEST_F(CommitDirTest, EverySyncModeMakesTheTreeAppearWhole) {
  for (CommitSync sync : {CommitSync::kNone, CommitSync::kDirectory, CommitSync::kSubtree, CommitSync::kFilesystem}) {
    const std::string name = "img" + std::to_string(static_cast<int>(sync));
    const std::string staged = Stage(name, "v1");
    bool visible = false;
    const Status s = CommitDirectory(staged, root_ + "/" + name, sync, CommitReplace::kNever, &visible);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(visible);
    EXPECT_FALSE(fs::exists(staged));
    EXPECT_EQ(Read(root_ + "/" + name + "/sub/deeper/b.txt"), "v1");
  }
}

TEST_F(CommitDirTest, NeverOverAnExistingTree) {
  ASSERT_TRUE(CommitDirectory(Stage("img", "old"), root_ + "/img", CommitSync::kDirectory).ok());
  const std::string staged = Stage("img", "new");
  bool visible = true;
  const Status s = CommitDirectory(staged, root_ + "/img", CommitSync::kDirectory, CommitReplace::kNever, &visible);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_FALSE(visible);
  EXPECT_EQ(Read(root_ + "/img/a.txt"), "old");  // the existing tree is untouched
  EXPECT_EQ(Read(staged + "/a.txt"), "new");     // and the staged one left for the caller
}

TEST_F(CommitDirTest, ExchangeReplacesTheOldTreeAndRemovesIt) {
  ASSERT_TRUE(CommitDirectory(Stage("tpl", "old"), root_ + "/tpl", CommitSync::kDirectory).ok());
  const std::string staged = Stage("tpl", "new");
  bool visible = false;
  const Status s =
      CommitDirectory(staged, root_ + "/tpl", CommitSync::kDirectory, CommitReplace::kExchange, &visible);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(visible);
  EXPECT_EQ(Read(root_ + "/tpl/sub/deeper/b.txt"), "new");
  EXPECT_FALSE(fs::exists(staged));  // the old copy went with it
}

TEST_F(CommitDirTest, AMissingStagedTreeIsAnErrorNamingIt) {
  bool visible = true;
  const Status s =
      CommitDirectory(root_ + "/nothing.tmp", root_ + "/nothing", CommitSync::kNone, CommitReplace::kNever, &visible);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(visible);
  EXPECT_NE(s.ToString().find("nothing.tmp"), std::string::npos) << s.ToString();
  const Status d = CommitDirectory(root_ + "/nothing.tmp", root_ + "/nothing", CommitSync::kDirectory);
  EXPECT_NE(d.ToString().find("nothing.tmp"), std::string::npos) << d.ToString();
}

}  // namespace
}  // namespace phos::image
