// Where a restore puts the GPUs of an image of a process of several GPUs
// (engine/restore_devices.h), and how the image's records of them are
// checked (engine/session_sections.h ReadSessionSections): docs/interposer.md
// "Several GPUs in one process".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "engine/restore_devices.h"
#include "engine/session_sections.h"
#include "engine/session_snapshot.h"
#include "image.pb.h"

namespace phos::engine {
namespace {

class RestoreDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend::SimOptions so;
    so.device_count = 3;
    so.memory_bytes = 1ull << 30;
    ASSERT_TRUE(backend::CreateSimBackend(so, &backend_).ok());
  }
  // An image of a process whose home GPU is `home`, also using `others`.
  static image::v1::SessionHandles Handles(int home, std::initializer_list<int> others) {
    image::v1::SessionHandles h;
    h.set_device(home);
    for (int d : others) h.add_other_devices(d);
    return h;
  }
  std::unique_ptr<backend::Backend> backend_;
};

TEST_F(RestoreDevicesTest, EachGpuGoesWhereTheMapSaysOrStays) {
  RestoreDevices plan;
  ASSERT_TRUE(PlanRestoreDevices(*backend_, Handles(0, {1}), {}, &plan).ok());
  EXPECT_EQ(plan.home, 0);
  EXPECT_EQ(plan.to, (std::map<int, int>{{0, 0}, {1, 1}}));
  ASSERT_TRUE(PlanRestoreDevices(*backend_, Handles(0, {1}), {{0, 2}}, &plan).ok());
  EXPECT_EQ(plan.home, 2);
  EXPECT_EQ(plan.Of(0), 2);
  EXPECT_EQ(plan.Of(1), 1);
  ASSERT_TRUE(PlanRestoreDevices(*backend_, Handles(0, {1}), {{0, 1}, {1, 0}}, &plan).ok());
  EXPECT_EQ(plan.home, 1);
  EXPECT_EQ(plan.Of(1), 0);
}

TEST_F(RestoreDevicesTest, RefusesTwoGpusOntoOneAndGpusThisPhosdLacks) {
  RestoreDevices plan;
  Status s = PlanRestoreDevices(*backend_, Handles(0, {1}), {{0, 1}}, &plan);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("would both go to GPU 1"), std::string::npos) << s.ToString();
  s = PlanRestoreDevices(*backend_, Handles(0, {4}), {}, &plan);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("GPU 4"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("--device-map"), std::string::npos) << s.ToString();
  s = PlanRestoreDevices(*backend_, Handles(0, {1}), {{1, 7}}, &plan);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
}

// The app keeps naming GPUs as when it started: the aliases compose the
// image's own with the plan, and drop those that name their own GPU.
TEST_F(RestoreDevicesTest, AliasesComposeAcrossRestores) {
  RestoreDevices plan;
  image::v1::SessionHandles first = Handles(0, {1});
  ASSERT_TRUE(PlanRestoreDevices(*backend_, first, {{0, 2}}, &plan).ok());
  EXPECT_EQ(RestoredAliases(first, plan), (std::map<int, int>{{0, 2}}));
  // Checkpointed again there (home 2, other 1, app 0 -> 2) and restored
  // with 2=0, 1=2: the app's 0 is phosd's 0 again, its 1 is phosd's 2.
  image::v1::SessionHandles second = Handles(2, {1});
  auto* a = second.add_device_aliases();
  a->set_app(0);
  a->set_phosd(2);
  ASSERT_TRUE(PlanRestoreDevices(*backend_, second, {{2, 0}, {1, 2}}, &plan).ok());
  EXPECT_EQ(RestoredAliases(second, plan), (std::map<int, int>{{1, 2}}));
  // A process of one GPU restored with its GPUs swapped: the GPU it did not
  // use moves too, so its numbering stays a permutation.
  ASSERT_TRUE(PlanRestoreDevices(*backend_, Handles(0, {}), {{0, 1}, {1, 0}}, &plan).ok());
  EXPECT_EQ(plan.to, (std::map<int, int>{{0, 1}}));
  EXPECT_EQ(RestoredAliases(Handles(0, {}), plan), (std::map<int, int>{{0, 1}, {1, 0}}));
}

// A manifest as a checkpoint of a two-GPU session writes it, and damaged
// device records refused as corruption.
class SessionDeviceRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    snap_.buffers = {{0x10000, 4096}, {0x20000, 4096}};
    snap_.streams = {1, 2};
    snap_.events = {3};
    snap_.objects.device = 0;
    snap_.objects.other_devices = {1};
    snap_.objects.buffer_devices = {{0x20000, 1}};
    snap_.objects.streams = {{1, 0, 0, 0}, {2, 0, 0, 1}};
    snap_.objects.events = {{3, 0, 1}};
    SetSessionSections(snap_, &manifest_);
  }
  Status Read(const image::v1::SessionHandles& h) {
    image::v1::Manifest m = manifest_;
    m.set_streams(h.SerializeAsString());
    SessionSnapshot decoded;
    PHOS_RETURN_IF_ERROR(DecodeSnapshot(m.session(), &decoded));
    image::v1::SessionHandles out;
    image::v1::SessionModules modules;
    return ReadSessionSections(m, decoded, &out, &modules);
  }
  image::v1::SessionHandles Written() {
    image::v1::SessionHandles h;
    EXPECT_TRUE(h.ParseFromString(manifest_.streams()));
    return h;
  }
  SessionSnapshot snap_;
  image::v1::Manifest manifest_;
};

TEST_F(SessionDeviceRecordsTest, ACheckpointNamesTheGpuOfEveryObjectOffItsHome) {
  const image::v1::SessionHandles h = Written();
  ASSERT_EQ(h.other_devices_size(), 1);
  EXPECT_EQ(h.other_devices(0), 1);
  ASSERT_EQ(h.buffer_devices_size(), 1);
  EXPECT_EQ(h.buffer_devices(0).address(), 0x20000u);
  EXPECT_FALSE(h.streams(0).has_device());  // the home GPU's: not named
  EXPECT_EQ(h.streams(1).device(), 1);
  EXPECT_EQ(h.events(0).device(), 1);
  EXPECT_TRUE(Read(h).ok()) << Read(h).ToString();
}

TEST_F(SessionDeviceRecordsTest, DamagedDeviceRecordsAreCorruption) {
  auto refused = [&](image::v1::SessionHandles h, const char* what) {
    Status s = Read(h);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << what << ": " << s.ToString();
  };
  image::v1::SessionHandles h = Written();
  h.mutable_streams(1)->set_device(2);  // a GPU the session did not use
  refused(h, "stream on an unused GPU");
  h = Written();
  h.mutable_buffer_devices(0)->set_address(0x30000);  // no buffer of the image
  refused(h, "GPU of an unknown buffer");
  h = Written();
  h.mutable_buffer_devices(0)->set_device(0);  // the home GPU is never listed
  refused(h, "buffer listed on the home GPU");
  h = Written();
  h.add_other_devices(1);  // repeated
  refused(h, "repeated other GPU");
  h = Written();
  h.set_device(256);  // more than a ring frame names
  refused(h, "home GPU past 255");
  h = Written();
  auto* a = h.add_device_aliases();
  a->set_app(0);
  a->set_phosd(-1);
  refused(h, "alias to no GPU");
}

// What an in-place restore reads (ReadImageDevices): each range's GPU;
// damaged records refused as corruption; an image without records is of
// one GPU.
TEST_F(SessionDeviceRecordsTest, AnInPlaceRestoreReadsEachRangesGpu) {
  image::v1::Manifest m = manifest_;
  SessionSnapshot decoded;
  ASSERT_TRUE(DecodeSnapshot(m.session(), &decoded).ok());
  ImageDevices d;
  ASSERT_TRUE(ReadImageDevices(m, decoded, &d).ok());
  EXPECT_EQ(d.home, 0);
  EXPECT_EQ(d.others, (std::set<int>{1}));
  EXPECT_EQ(d.ranges, (std::map<std::uint64_t, int>{{0x20000, 1}}));
  auto refused = [&](const std::string& streams, const char* what) {
    image::v1::Manifest bad = m;
    bad.set_streams(streams);
    Status s = ReadImageDevices(bad, decoded, &d);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << what << ": " << s.ToString();
  };
  image::v1::SessionHandles h = Written();
  h.mutable_buffer_devices(0)->set_device(2);
  refused(h.SerializeAsString(), "buffer on a GPU the process did not use");
  h = Written();
  h.mutable_buffer_devices(0)->set_address(0x30000);
  refused(h.SerializeAsString(), "buffer that is none of the image's");
  h = Written();
  h.set_device(300);
  refused(h.SerializeAsString(), "home GPU past 255");
  refused(std::string("\xff\xff\xff", 3), "records that do not parse");
  m.clear_streams();
  ASSERT_TRUE(ReadImageDevices(m, decoded, &d).ok());
  EXPECT_EQ(d.home, -1);
  EXPECT_TRUE(d.others.empty() && d.ranges.empty());
}

// session_sections_fuzz's seeds (tests/fuzz/make_session_sections_seeds.py)
// are manifests ReadSessionSections accepts, so the fuzzer's mutations
// start past its checks.
TEST(SessionSectionsSeedsTest, EverySeedIsAccepted) {
  int seeds = 0;
  for (const auto& e : std::filesystem::directory_iterator(PHOS_SECTIONS_CORPUS)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    image::v1::Manifest m;
    ASSERT_TRUE(m.ParseFromString(bytes)) << e.path();
    SessionSnapshot snap;
    ASSERT_TRUE(DecodeSnapshot(m.session(), &snap).ok()) << e.path();
    image::v1::SessionHandles h;
    image::v1::SessionModules modules;
    Status s = ReadSessionSections(m, snap, &h, &modules);
    EXPECT_TRUE(s.ok()) << e.path() << ": " << s.ToString();
    ++seeds;
  }
  EXPECT_GE(seeds, 3);
}

}  // namespace
}  // namespace phos::engine
