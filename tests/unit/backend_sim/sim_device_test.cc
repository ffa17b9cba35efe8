// The sim's device model and what it cannot do yet (kernels).
#include "phos_device_attributes.h"
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

// Every CUdevice_attribute of the toolkit's cuda.h (generated list) has a
// modelled value; the ones DeviceProperties also carries agree with it.
TEST(SimDevice, EveryAttributeOfCudaHIsModelled) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  for (const interposer::EnumeratorInfo& e : interposer::kCuDeviceAttributes) {
    std::int64_t v = -12345;
    Status s = f.backend->GetDeviceAttribute(0, e.value, &v);
    EXPECT_TRUE(s.ok()) << e.name << " (" << e.value << "): " << s.ToString();
    EXPECT_NE(v, -12345) << e.name;
  }
  DeviceProperties p;
  SIM_ASSERT_OK(f.backend->GetDeviceProperties(0, &p));
  auto attr = [&](int a) {
    std::int64_t v = 0;
    EXPECT_TRUE(f.backend->GetDeviceAttribute(0, a, &v).ok()) << a;
    return v;
  };
  EXPECT_EQ(attr(1), p.max_threads_per_block);
  EXPECT_EQ(attr(8), static_cast<std::int64_t>(p.shared_memory_per_block));
  EXPECT_EQ(attr(16), p.multiprocessor_count);
  EXPECT_EQ(attr(40), p.async_engine_count);
  EXPECT_EQ(attr(75), p.compute_capability_major);
  EXPECT_EQ(attr(97), static_cast<std::int64_t>(p.shared_memory_per_block_optin));
  EXPECT_EQ(attr(20), 0);  // COMPUTE_MODE: default
  std::int64_t v = 0;
  SIM_EXPECT_CODE(f.backend->GetDeviceAttribute(0, 0, &v), kInvalidArgument);
  SIM_EXPECT_CODE(f.backend->GetDeviceAttribute(0, interposer::kDeviceAttributeSlots, &v), kInvalidArgument);
  SIM_EXPECT_CODE(f.backend->GetDeviceAttribute(1, 1, &v), kInvalidArgument);
}

}  // namespace
}  // namespace phos::backend::sim_test
