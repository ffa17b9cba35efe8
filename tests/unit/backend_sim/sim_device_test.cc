// The sim's device model and what it cannot do yet (kernels).
#include "sim_test_util.h"

namespace phos::backend::sim_test {
namespace {

TEST(SimDevice, PropertiesModelAnH100AndSayPhosSim) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  EXPECT_EQ(f.backend->name(), "sim");
  EXPECT_NE(f.backend->detail().find("phos sim"), std::string::npos) << f.backend->detail();
  EXPECT_EQ(f.backend->device_count(), 1);
  DeviceProperties p;
  SIM_ASSERT_OK(f.backend->GetDeviceProperties(0, &p));
  EXPECT_NE(p.name.find("phos sim"), std::string::npos) << p.name;
  EXPECT_NE(p.name.find("H100"), std::string::npos) << p.name;
  EXPECT_EQ(p.compute_capability_major, 9);
  EXPECT_EQ(p.compute_capability_minor, 0);
  EXPECT_EQ(p.multiprocessor_count, 132);
  EXPECT_EQ(p.total_memory, 80ull << 30);
  EXPECT_EQ(p.max_threads_per_block, 1024);
  EXPECT_EQ(p.warp_size, 32);
  EXPECT_EQ(p.shared_memory_per_block, 48u * 1024);
  EXPECT_EQ(p.shared_memory_per_block_optin, 227u * 1024);
  EXPECT_EQ(p.async_engine_count, 2);
  EXPECT_EQ(p.unified_addressing, 1);
  EXPECT_EQ(p.uuid.rfind("GPU-", 0), 0u);
}

TEST(SimDevice, EveryDeviceHasItsOwnOrdinalAndUuid) {
  SimOptions o;
  o.device_count = 3;
  o.memory_bytes = 1ull << 30;
  std::unique_ptr<Backend> b;
  SIM_ASSERT_OK(CreateSimBackend(o, &b));
  EXPECT_EQ(b->device_count(), 3);
  DeviceProperties p0, p2;
  SIM_ASSERT_OK(b->GetDeviceProperties(0, &p0));
  SIM_ASSERT_OK(b->GetDeviceProperties(2, &p2));
  EXPECT_EQ(p2.ordinal, 2);
  EXPECT_NE(p0.uuid, p2.uuid);
  EXPECT_EQ(p2.total_memory, 1ull << 30);
  SIM_EXPECT_CODE(b->GetDeviceProperties(3, &p0), kInvalidArgument);
}

}  // namespace
}  // namespace phos::backend::sim_test
