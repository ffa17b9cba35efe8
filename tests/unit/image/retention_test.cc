// Lifecycle classes: retention plans and the catalog that applies them.
#include <gtest/gtest.h>

#include <algorithm>

#include <fcntl.h>
#include <unistd.h>

#include "image/image_catalog.h"
#include "image/image_reader.h"
#include "image/recovery.h"
#include "image/retention.h"
#include "image_test_util.h"

namespace phos::image {
namespace {

using testing::ScratchDir;

CatalogEntry E(std::string name, std::int64_t t, std::optional<double> metric = std::nullopt) {
  return {std::move(name), t, metric};
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Retention, LatestKeepsNewestN) {
  RetentionPolicy p;
  p.keep_latest = 2;
  auto doomed = PlanRetention(KeepClass::kLatest, p,
                              {E("a", 10), E("b", 40), E("c", 20), E("d", 30)});
  EXPECT_EQ(Sorted(doomed), (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(PlanRetention(KeepClass::kLatest, p, {E("a", 1), E("b", 2)}).empty());
  p.keep_latest = 0;
  EXPECT_EQ(PlanRetention(KeepClass::kLatest, p, {E("a", 1)}).size(), 1u);
}

TEST(Retention, BestKeepsTopKHigherIsBetter) {
  RetentionPolicy p;
  p.keep_best = 2;
  auto doomed = PlanRetention(KeepClass::kBest, p,
                              {E("a", 1, 0.5), E("b", 2, 0.9), E("c", 3, 0.1), E("d", 4, 0.7),
                               E("nometric", 5)});
  EXPECT_EQ(Sorted(doomed), (std::vector<std::string>{"a", "c", "nometric"}));
}

TEST(Retention, BestLowerIsBetter) {
  RetentionPolicy p;
  p.keep_best = 1;
  p.higher_is_better = false;  // e.g. a loss
  auto doomed = PlanRetention(KeepClass::kBest, p,
                              {E("a", 1, 0.5), E("b", 2, 0.9), E("c", 3, 0.1)});
  EXPECT_EQ(Sorted(doomed), (std::vector<std::string>{"a", "b"}));
}

TEST(Retention, BestTiesKeepNewerAndNanRanksLast) {
  RetentionPolicy p;
  p.keep_best = 1;
  auto doomed = PlanRetention(KeepClass::kBest, p,
                              {E("old", 1, 1.0), E("new", 2, 1.0), E("nan", 3, std::nan(""))});
  EXPECT_EQ(Sorted(doomed), (std::vector<std::string>{"nan", "old"}));
}

TEST(Retention, ManualNeverDeletes) {
  RetentionPolicy p;
  p.keep_latest = 0;
  p.keep_best = 0;
  EXPECT_TRUE(PlanRetention(KeepClass::kManual, p, {E("a", 1), E("b", 2, 3.0)}).empty());
}

TEST(Retention, KeepClassNamesAndHints) {
  KeepClass c;
  ASSERT_TRUE(ParseKeepClass("best", &c).ok());
  EXPECT_EQ(c, KeepClass::kBest);
  Status s = ParseKeepClass("forever", &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("latest, best or manual"), std::string::npos);
  EXPECT_EQ(WriteLifeHint(KeepClass::kLatest), static_cast<std::uint64_t>(RWH_WRITE_LIFE_SHORT));
  EXPECT_EQ(WriteLifeHint(KeepClass::kBest), static_cast<std::uint64_t>(RWH_WRITE_LIFE_LONG));
  EXPECT_EQ(WriteLifeHint(KeepClass::kManual), static_cast<std::uint64_t>(RWH_WRITE_LIFE_EXTREME));
  for (KeepClass k : {KeepClass::kLatest, KeepClass::kBest, KeepClass::kManual}) {
    EXPECT_EQ(FromProto(ToProto(k)), k);
  }
}

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    ASSERT_TRUE(ImageCatalog::Open(tmp_ / "images", &catalog_).ok());
  }
  void Write(KeepClass c, const std::string& name, std::optional<double> metric = std::nullopt) {
    v1::Manifest meta = testing::TestMetadata();
    meta.set_keep(ToProto(c));
    if (metric) meta.set_metric(*metric);
    ImageWriterOptions o;
    o.chunk_bytes = 4096;
    Status s = testing::WriteImage(catalog_->PathFor(c, name), testing::MakeBuffers({100}), o, meta);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<std::string> Names(KeepClass c) {
    std::vector<CatalogEntry> entries;
    EXPECT_TRUE(catalog_->List(c, &entries).ok());
    std::vector<std::string> names;
    for (auto& e : entries) names.push_back(e.name);
    return Sorted(names);
  }
  ScratchDir tmp_;
  std::unique_ptr<ImageCatalog> catalog_;
};

TEST_F(CatalogTest, ClassDirectories) {
  EXPECT_TRUE(std::filesystem::is_directory(tmp_ / "images/latest"));
  EXPECT_TRUE(std::filesystem::is_directory(tmp_ / "images/best"));
  EXPECT_TRUE(std::filesystem::is_directory(tmp_ / "images/manual"));
}

TEST_F(CatalogTest, LatestRotation) {
  RetentionPolicy p;
  p.keep_latest = 2;
  for (const char* n : {"c1", "c2", "c3", "c4"}) {
    Write(KeepClass::kLatest, n);
    ASSERT_TRUE(catalog_->ApplyRetention(KeepClass::kLatest, p).ok());
  }
  EXPECT_EQ(Names(KeepClass::kLatest), (std::vector<std::string>{"c3", "c4"}));
  EXPECT_FALSE(std::filesystem::exists(catalog_->PathFor(KeepClass::kLatest, "c1")));
}

TEST_F(CatalogTest, BestTopK) {
  RetentionPolicy p;
  p.keep_best = 2;
  Write(KeepClass::kBest, "e1", 0.60);
  Write(KeepClass::kBest, "e2", 0.80);
  Write(KeepClass::kBest, "e3", 0.70);
  Write(KeepClass::kBest, "e4", 0.65);
  std::vector<std::string> deleted;
  ASSERT_TRUE(catalog_->ApplyRetention(KeepClass::kBest, p, &deleted).ok());
  EXPECT_EQ(Sorted(deleted), (std::vector<std::string>{"e1", "e4"}));
  EXPECT_EQ(Names(KeepClass::kBest), (std::vector<std::string>{"e2", "e3"}));
}

TEST_F(CatalogTest, ManualNeverDeletedAndClassesIndependent) {
  RetentionPolicy p;
  p.keep_latest = 1;
  Write(KeepClass::kManual, "m1");
  Write(KeepClass::kManual, "m2");
  Write(KeepClass::kLatest, "l1");
  Write(KeepClass::kLatest, "l2");
  ASSERT_TRUE(catalog_->ApplyRetention(KeepClass::kManual, p).ok());
  ASSERT_TRUE(catalog_->ApplyRetention(KeepClass::kLatest, p).ok());
  EXPECT_EQ(Names(KeepClass::kManual), (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(Names(KeepClass::kLatest), (std::vector<std::string>{"l2"}));
}

// Each class's files carry its write-life hint (where the kernel keeps
// hints: F_GET_RW_HINT reads them back).
TEST_F(CatalogTest, WriteLifeHintsPerClass) {
  for (KeepClass c : {KeepClass::kLatest, KeepClass::kBest, KeepClass::kManual}) {
    Write(c, "h", 1.0);
    for (const char* file : {"gpu.img", "manifest"}) {
      const std::string path = catalog_->PathFor(c, "h") + "/" + file;
      int fd = ::open(path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0) << path;
      std::uint64_t hint = 0;
      const int rc = ::fcntl(fd, F_GET_RW_HINT, &hint);
      ::close(fd);
      if (rc != 0) GTEST_SKIP() << "kernel/filesystem keeps no write-life hints";
      EXPECT_EQ(hint, WriteLifeHint(c)) << path;
    }
  }
}

TEST_F(CatalogTest, NonImagesAreNeitherListedNorDeleted) {
  RetentionPolicy p;
  p.keep_latest = 0;
  std::filesystem::create_directories(catalog_->PathFor(KeepClass::kLatest, "user-notes"));
  Write(KeepClass::kLatest, "c1");
  ASSERT_TRUE(catalog_->ApplyRetention(KeepClass::kLatest, p).ok());
  EXPECT_TRUE(Names(KeepClass::kLatest).empty());
  EXPECT_TRUE(std::filesystem::exists(catalog_->PathFor(KeepClass::kLatest, "user-notes")));
}

}  // namespace
}  // namespace phos::image
