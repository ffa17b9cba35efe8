// A job image's manifest (image/job_manifest.h): written, read back; damaged
// bytes, another format version and rank directories outside the job are
// refused by name (parser label: re-run under ASan+UBSan).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "image/job_manifest.h"

namespace phos::image {
namespace {

v1::JobManifest TwoRanks() {
  v1::JobManifest m;
  m.set_format_version(2);
  m.set_mode("cow");
  m.set_cut_us(1234);
  for (int r = 0; r < 2; ++r) {
    auto* rank = m.add_ranks();
    rank->set_dir("rank-" + std::to_string(r));
    rank->set_pid(100 + r);
    rank->add_cmdline("train");
  }
  auto* c = m.add_cut();
  c->set_unique_id(std::string(128, 'x'));
  c->set_nranks(2);
  c->set_collectives(42);
  return m;
}

TEST(JobManifest, WrittenAndReadBack) {
  const std::string dir = testing::TempDir() + "/job_manifest_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(IsJobImage(dir));
  ASSERT_TRUE(WriteJobManifest(dir, TwoRanks()).ok());
  EXPECT_TRUE(IsJobImage(dir));
  v1::JobManifest back;
  ASSERT_TRUE(ReadJobManifest(dir, &back).ok());
  EXPECT_EQ(back.ranks_size(), 2);
  EXPECT_EQ(back.ranks(1).dir(), "rank-1");
  EXPECT_EQ(back.cut(0).collectives(), 42u);
  std::filesystem::remove_all(dir);
}

TEST(JobManifest, DamagedBytesAreRefusedByName) {
  const std::string good = EncodeJobManifest(TwoRanks());
  v1::JobManifest m;
  EXPECT_TRUE(DecodeJobManifest(good, "job", &m).ok());
  // Every truncation is refused or parses to something checked: never a crash.
  for (size_t n = 0; n < good.size(); ++n) (void)DecodeJobManifest(good.substr(0, n), "job", &m);
  const Status magic = DecodeJobManifest("phosjoX" + good.substr(7), "job", &m);
  EXPECT_EQ(magic.code(), Status::Code::kCorruption);
  EXPECT_NE(magic.message().find("magic"), std::string::npos) << magic.ToString();
  std::string other = good;
  other[8] = 9;  // format version 9
  const Status version = DecodeJobManifest(other, "job", &m);
  EXPECT_EQ(version.code(), Status::Code::kCorruption);
  EXPECT_NE(version.message().find("version 9"), std::string::npos) << version.ToString();
  v1::JobManifest escape = TwoRanks();
  escape.mutable_ranks(1)->set_dir("../elsewhere");
  const Status outside = DecodeJobManifest(EncodeJobManifest(escape), "job", &m);
  EXPECT_EQ(outside.code(), Status::Code::kCorruption);
  EXPECT_NE(outside.message().find("outside the job directory"), std::string::npos) << outside.ToString();
  v1::JobManifest none;
  EXPECT_EQ(DecodeJobManifest(EncodeJobManifest(none), "job", &m).code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace phos::image
