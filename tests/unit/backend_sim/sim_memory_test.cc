// The sim's device memory: a fixed reserved range, reproducible addresses,
// modelled capacity, and what happens when work outlives a buffer.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "sim_test_util.h"

namespace phos::backend::sim_test {
namespace {

constexpr std::uint64_t kDefaultBase = 0x7c0000000000ull;

TEST(SimMemory, FirstAllocationIsAtTheBaseAndAddressesAreReusedExactly) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  DevicePtr a = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(8 * kMiB, 0, &a));
  EXPECT_EQ(a, kDefaultBase);
  SIM_ASSERT_OK(f.ctx->Free(a));
  DevicePtr again = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(8 * kMiB, a, &again));
  EXPECT_EQ(again, a);
  DevicePtr far = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(3 * kMiB, kDefaultBase + (5ull << 30), &far));
  EXPECT_EQ(far, kDefaultBase + (5ull << 30));
  SIM_ASSERT_OK(f.ctx->Free(far));
  SIM_ASSERT_OK(f.ctx->Allocate(3 * kMiB, kDefaultBase + (5ull << 30), &far));
  EXPECT_EQ(far, kDefaultBase + (5ull << 30));
}

TEST(SimMemory, DeviceMemoryIsHostMemoryAtTheDeviceAddress) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  const std::size_t n = kMiB + 7;
  DevicePtr a = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  auto src = RandomBytes(n, 1);
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  EXPECT_EQ(0, std::memcmp(reinterpret_cast<const void*>(a), src.data(), n));
}

// Runs in a forked child: a fresh backend with the default base, one picked
// and one chosen allocation. Writes their addresses to `fd`.
int ChildAllocate(int fd) {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Context> ctx;
  if (!CreateSimBackend(SimOptions(), &backend).ok()) return 2;
  if (!backend->CreateContext(0, &ctx).ok()) return 3;
  DevicePtr addrs[2] = {0, 0};
  if (!ctx->Allocate(8 * kMiB, 0, &addrs[0]).ok()) return 4;
  if (!ctx->Allocate(4 * kMiB, kDefaultBase + (3ull << 30), &addrs[1]).ok()) return 5;
  std::memset(reinterpret_cast<void*>(addrs[1]), 0x5a, 4096);  // really mapped read/write
  if (write(fd, addrs, sizeof addrs) != static_cast<ssize_t>(sizeof addrs)) return 6;
  return 0;
}

TEST(SimMemory, ForkedChildReservesTheSameBaseAndGetsTheSameAddresses) {
  // Fork before this process holds a backend (a child would inherit its
  // reservation); both processes then hold the same range at once.
  int fds[2];
  ASSERT_EQ(0, pipe(fds));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    _exit(ChildAllocate(fds[1]));
  }
  close(fds[1]);
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  DevicePtr mine[2] = {0, 0};
  SIM_ASSERT_OK(f.ctx->Allocate(8 * kMiB, 0, &mine[0]));
  SIM_ASSERT_OK(f.ctx->Allocate(4 * kMiB, kDefaultBase + (3ull << 30), &mine[1]));
  DevicePtr theirs[2] = {0, 0};
  ssize_t got = read(fds[0], theirs, sizeof theirs);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(pid, waitpid(pid, &status, 0));
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(0, WEXITSTATUS(status)) << "child failed at step " << WEXITSTATUS(status);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof theirs));
  EXPECT_EQ(theirs[0], mine[0]);
  EXPECT_EQ(theirs[1], mine[1]);
  EXPECT_EQ(mine[0], kDefaultBase);
  EXPECT_EQ(mine[1], kDefaultBase + (3ull << 30));
}

TEST(SimMemory, SecondBackendOnATakenRangeFailsNamingTheAddress) {
  std::unique_ptr<Backend> first, second;
  SIM_ASSERT_OK(CreateSimBackend(SimOptions(), &first));
  Status s = CreateSimBackend(SimOptions(), &second);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("0x7c0000000000"), std::string::npos) << s.message();
  // A disjoint range works alongside.
  SimOptions other;
  other.va_base = kDefaultBase + other.va_size;
  other.va_size = 64ull << 30;
  SIM_ASSERT_OK(CreateSimBackend(other, &second));
  // The range is free again once the first backend is gone.
  first.reset();
  SIM_ASSERT_OK(CreateSimBackend(SimOptions(), &first));
}

TEST(SimMemory, OutOfMemoryBeyondTheModelledCapacity) {
  SimOptions o;
  o.memory_bytes = 64 * kMiB;
  SimFixture f;
  SIM_ASSERT_OK(f.Init(o));
  std::uint64_t free_bytes = 0, total = 0;
  SIM_ASSERT_OK(f.ctx->GetMemoryInfo(&free_bytes, &total));
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(free_bytes, 64 * kMiB);
  DevicePtr x = 0;
  SIM_EXPECT_CODE(f.ctx->Allocate(64 * kMiB + 1, 0, &x), kOutOfMemory);
  DevicePtr a = 0, b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(32 * kMiB, 0, &a));
  std::unique_ptr<Context> other;
  SIM_ASSERT_OK(f.backend->CreateContext(0, &other));
  SIM_ASSERT_OK(other->Allocate(30 * kMiB, 0, &b));
  // 2 MiB left; capacity is counted across contexts, in 2 MiB granules.
  SIM_ASSERT_OK(f.ctx->GetMemoryInfo(&free_bytes, &total));
  EXPECT_EQ(free_bytes, 2 * kMiB);
  SIM_EXPECT_CODE(f.ctx->Allocate(2 * kMiB + 1, 0, &x), kOutOfMemory);
  SIM_EXPECT_CODE(other->Allocate(4 * kMiB, 0, &x), kOutOfMemory);
  SIM_ASSERT_OK(f.ctx->Allocate(1, 0, &x));
  SIM_EXPECT_CODE(f.ctx->Allocate(1, 0, &x), kOutOfMemory);
  SIM_ASSERT_OK(f.backend->GetMemoryInfo(0, &free_bytes, &total));
  EXPECT_EQ(free_bytes, 0u);
  other.reset();  // frees b
  SIM_ASSERT_OK(f.ctx->Allocate(30 * kMiB, 0, &x));
}

TEST(SimMemory, DevicesHaveTheirOwnCapacityButShareTheAddressSpace) {
  SimOptions o;
  o.device_count = 2;
  o.memory_bytes = 16 * kMiB;
  std::unique_ptr<Backend> backend;
  SIM_ASSERT_OK(CreateSimBackend(o, &backend));
  std::unique_ptr<Context> c0, c1;
  SIM_ASSERT_OK(backend->CreateContext(0, &c0));
  SIM_ASSERT_OK(backend->CreateContext(1, &c1));
  EXPECT_EQ(c1->device(), 1);
  DevicePtr a = 0, b = 0, x = 0;
  SIM_ASSERT_OK(c0->Allocate(16 * kMiB, 0, &a));
  SIM_EXPECT_CODE(c0->Allocate(1, 0, &x), kOutOfMemory);
  SIM_ASSERT_OK(c1->Allocate(16 * kMiB, 0, &b));
  EXPECT_NE(a, b);
  SIM_EXPECT_CODE(c1->Allocate(2 * kMiB, a, &x), kAlreadyExists);  // one address space
  // D2D between devices works (unified addressing).
  SIM_ASSERT_OK(c0->MemsetAsync(a, 0x77, 1, 4096, kDefaultStream));
  SIM_ASSERT_OK(c0->Synchronize());
  SIM_ASSERT_OK(c1->MemcpyAsync(b, a, 4096, CopyKind::kDeviceToDevice, kDefaultStream));
  SIM_ASSERT_OK(c1->Synchronize());
  EXPECT_EQ(reinterpret_cast<const std::uint8_t*>(b)[4095], 0x77);
}

// Context::ReserveAddressRange (the app's cuMemAddressReserve): address
// space that Allocate(0) never lands in, where only its owner places
// allocations (wholly inside); back-to-back allocations inside it are one
// range for copies; it goes back only when empty.
TEST(SimMemory, ReservedRangesKeepOthersOutAndJoinTheirAllocationsForCopies) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  const std::uint64_t g = 2 * kMiB;
  DevicePtr r = 0;
  SIM_ASSERT_OK(f.ctx->ReserveAddressRange(8 * g, 0, 0, &r));
  EXPECT_EQ(r % g, 0u);
  SIM_EXPECT_CODE(f.ctx->ReserveAddressRange(g + 1, 0, 0, &r), kInvalidArgument);  // not a granule multiple
  DevicePtr other_r = 0;
  SIM_EXPECT_CODE(f.ctx->ReserveAddressRange(g, 0, r + g, &other_r), kAlreadyExists);  // overlaps
  DevicePtr aligned = 0;
  SIM_ASSERT_OK(f.ctx->ReserveAddressRange(g, 64 * kMiB, 0, &aligned));
  EXPECT_EQ(aligned % (64 * kMiB), 0u);
  SIM_ASSERT_OK(f.ctx->ReleaseAddressRange(aligned));
  // Allocate(0) goes around the range, however much is asked.
  for (int i = 0; i < 6; ++i) {
    DevicePtr p = 0;
    SIM_ASSERT_OK(f.ctx->Allocate(3 * g, 0, &p));
    EXPECT_TRUE(p + 3 * g <= r || p >= r + 8 * g) << std::hex << p;
  }
  // Another context may not place anything inside; the owner only wholly inside.
  std::unique_ptr<Context> other;
  SIM_ASSERT_OK(f.backend->CreateContext(0, &other));
  DevicePtr x = 0;
  SIM_EXPECT_CODE(other->Allocate(g, r, &x), kAlreadyExists);
  SIM_EXPECT_CODE(f.ctx->Allocate(2 * g, r + 7 * g, &x), kAlreadyExists);  // runs past its end
  DevicePtr m0 = 0, m1 = 0, m3 = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(g, r, &m0));
  SIM_ASSERT_OK(f.ctx->Allocate(g, r + g, &m1));
  SIM_ASSERT_OK(f.ctx->Allocate(g, r + 3 * g, &m3));  // a gap at r + 2g
  // One copy across the m0/m1 boundary; none across the gap.
  auto src = RandomBytes(g, 5);
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(r + g / 2, H(src.data()), g, CopyKind::kHostToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  EXPECT_EQ(0, std::memcmp(reinterpret_cast<const void*>(r + g / 2), src.data(), g));
  SIM_EXPECT_CODE(f.ctx->MemcpyAsync(r + g + g / 2, H(src.data()), g, CopyKind::kHostToDevice, kDefaultStream),
                  kInvalidArgument);
  // Not empty: stays.
  SIM_EXPECT_CODE(f.ctx->ReleaseAddressRange(r), kFailedPrecondition);
  SIM_EXPECT_CODE(other->ReleaseAddressRange(r), kInvalidArgument);  // not its range
  for (DevicePtr m : {m0, m1, m3}) SIM_ASSERT_OK(f.ctx->Free(m));
  SIM_ASSERT_OK(f.ctx->ReleaseAddressRange(r));
  // Gone: the space is free for anyone again.
  SIM_ASSERT_OK(other->Allocate(g, r, &x));
  SIM_ASSERT_OK(other->Free(x));
}

// phosd's own long-lived memory (the cow reserve) goes to the top of the
// range, below whatever is already there, never where next-fit puts the
// app's allocations: a restore into another phosd needs those addresses.
TEST(SimMemory, MemoryForTheDaemonGoesToTheTopOfTheRange) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  const std::uint64_t g = 2 * kMiB;
  const DevicePtr top = kDefaultBase + (1ull << 40);  // SimOptions' default va_size
  DevicePtr app = 0, d1 = 0, d2 = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(g, 0, &app));
  EXPECT_EQ(app, kDefaultBase);
  SIM_ASSERT_OK(f.ctx->AllocateForDaemon(3 * g, &d1));
  EXPECT_EQ(d1, top - 3 * g);
  // Something already at the top (a reservation): the next one goes below it.
  DevicePtr r = 0;
  SIM_ASSERT_OK(f.ctx->ReserveAddressRange(2 * g, 0, d1 - 2 * g, &r));
  SIM_ASSERT_OK(f.ctx->AllocateForDaemon(g + 1, &d2));
  EXPECT_EQ(d2, r - 2 * g);
  // The app's next allocation still comes from the bottom.
  DevicePtr app2 = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(g, 0, &app2));
  EXPECT_EQ(app2, kDefaultBase + g);
  // Plain memory: copies work, Free frees it.
  auto src = RandomBytes(g, 9);
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(d2, H(src.data()), g, CopyKind::kHostToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  EXPECT_EQ(0, std::memcmp(reinterpret_cast<const void*>(d2), src.data(), g));
  for (DevicePtr p : {app, app2, d1, d2}) SIM_ASSERT_OK(f.ctx->Free(p));
  SIM_ASSERT_OK(f.ctx->ReleaseAddressRange(r));
}

TEST(SimMemory, FreeingAnotherContextsAllocationIsInvalidArgument) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  std::unique_ptr<Context> other;
  SIM_ASSERT_OK(f.backend->CreateContext(0, &other));
  DevicePtr a = 0;
  SIM_ASSERT_OK(other->Allocate(kMiB, 0, &a));
  SIM_EXPECT_CODE(f.ctx->Free(a), kInvalidArgument);
  SIM_ASSERT_OK(other->Free(a));
}

TEST(SimMemory, AllocationsStayInsideTheReservedRange) {
  SimOptions o;
  o.va_size = 64 * kMiB;
  SimFixture f;
  SIM_ASSERT_OK(f.Init(o));
  DevicePtr a = 0, x = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(48 * kMiB, 0, &a));
  SIM_EXPECT_CODE(f.ctx->Allocate(32 * kMiB, 0, &x), kOutOfMemory);  // no gap that large
  SIM_EXPECT_CODE(f.ctx->Allocate(2 * kMiB, o.va_base + 64 * kMiB, &x), kInvalidArgument);
  SIM_EXPECT_CODE(f.ctx->Allocate(4 * kMiB, o.va_base + 62 * kMiB, &x), kInvalidArgument);
  SIM_EXPECT_CODE(f.ctx->Allocate(2 * kMiB, o.va_base - 2 * kMiB, &x), kInvalidArgument);
  SIM_ASSERT_OK(f.ctx->Allocate(16 * kMiB, 0, &x));  // exactly the rest
  EXPECT_EQ(x, o.va_base + 48 * kMiB);
  // After a free, the picker wraps around to the freed gap.
  SIM_ASSERT_OK(f.ctx->Free(a));
  SIM_ASSERT_OK(f.ctx->Allocate(40 * kMiB, 0, &x));
  EXPECT_EQ(x, o.va_base);
}

TEST(SimMemory, FreeingABufferThatQueuedWorkStillUsesIsAStickyErrorNotACrash) {
  SimOptions o;
  o.link_gbps = 0.25;  // the first copy takes ~34 ms
  SimFixture f;
  SIM_ASSERT_OK(f.Init(o));
  const std::size_t n = 8 * kMiB;
  DevicePtr a = 0, b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &b));
  std::vector<std::uint8_t> host(n, 3);
  StreamHandle s = 0;
  SIM_ASSERT_OK(f.ctx->CreateStream(0, 0, &s));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(host.data()), n, CopyKind::kHostToDevice, s));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(b, a, n, CopyKind::kDeviceToDevice, s));
  SIM_ASSERT_OK(f.ctx->Free(b));  // a caller bug: the D2D has not run yet
  Status st = f.ctx->SynchronizeStream(s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("illegal address"), std::string::npos) << st.message();
  Status q = f.ctx->QueryStream(s);  // sticky
  EXPECT_EQ(q.code(), Status::Code::kInvalidArgument) << q.ToString();
  EXPECT_FALSE(f.ctx->Synchronize().ok());
  DevicePtr again = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, b, &again));  // the address is free again
}

TEST(SimMemory, FreeDuringARunningCopyKeepsTheRangeUntilTheCopyEnds) {
  SimOptions o;
  o.link_gbps = 0.25;  // ~34 ms for 8 MiB
  SimFixture f;
  SIM_ASSERT_OK(f.Init(o));
  const std::size_t n = 8 * kMiB;
  DevicePtr a = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  std::vector<std::uint8_t> host(n, 9);
  EventHandle started = 0;
  SIM_ASSERT_OK(f.ctx->CreateEvent(0, &started));
  SIM_ASSERT_OK(f.ctx->RecordEvent(started, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(host.data()), n, CopyKind::kHostToDevice,
                                   kDefaultStream));
  // The copy starts right after the event; give it a few ms of its ~34.
  SIM_ASSERT_OK(f.ctx->SynchronizeEvent(started));
  usleep(5000);
  SIM_EXPECT_CODE(f.ctx->QueryStream(kDefaultStream), kNotReady);
  SIM_ASSERT_OK(f.ctx->Free(a));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));  // no crash, no error
  std::uint64_t free_bytes = 0, total = 0;
  SIM_ASSERT_OK(f.ctx->GetMemoryInfo(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total);  // released once the copy ended
}

TEST(SimMemory, DestroyingAContextFreesItsAllocations) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  std::uint64_t free0 = 0, total = 0;
  SIM_ASSERT_OK(f.ctx->GetMemoryInfo(&free0, &total));
  std::unique_ptr<Context> other;
  SIM_ASSERT_OK(f.backend->CreateContext(0, &other));
  DevicePtr a = 0;
  SIM_ASSERT_OK(other->Allocate(32 * kMiB, kDefaultBase + (1ull << 30), &a));
  other.reset();
  std::uint64_t free1 = 0;
  SIM_ASSERT_OK(f.ctx->GetMemoryInfo(&free1, &total));
  EXPECT_EQ(free1, free0);
  DevicePtr b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(32 * kMiB, a, &b));
  EXPECT_EQ(b, a);
}

TEST(SimHostRegistration, OverlapIsAlreadyExistsAndUnknownIsInvalidArgument) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  std::vector<std::uint8_t> buf(64 * 1024);
  std::uint8_t* p = buf.data();
  SIM_ASSERT_OK(f.ctx->RegisterHostMemory(p, 32 * 1024));
  SIM_EXPECT_CODE(f.ctx->RegisterHostMemory(p + 16 * 1024, 32 * 1024), kAlreadyExists);
  SIM_EXPECT_CODE(f.ctx->RegisterHostMemory(p, 32 * 1024), kAlreadyExists);
  SIM_ASSERT_OK(f.ctx->RegisterHostMemory(p + 32 * 1024, 32 * 1024));  // adjacent
  SIM_EXPECT_CODE(f.ctx->UnregisterHostMemory(p + 16 * 1024), kInvalidArgument);
  SIM_ASSERT_OK(f.ctx->UnregisterHostMemory(p));
  SIM_EXPECT_CODE(f.ctx->UnregisterHostMemory(p), kInvalidArgument);
  SIM_ASSERT_OK(f.ctx->UnregisterHostMemory(p + 32 * 1024));
  SIM_EXPECT_CODE(f.ctx->RegisterHostMemory(nullptr, 4096), kInvalidArgument);
  SIM_EXPECT_CODE(f.ctx->RegisterHostMemory(p, 0), kInvalidArgument);
}

TEST(SimOptionsTest, InvalidOptionsAreInvalidArgument) {
  std::unique_ptr<Backend> b;
  SimOptions o;
  o.device_count = 0;
  SIM_EXPECT_CODE(CreateSimBackend(o, &b), kInvalidArgument);
  o = SimOptions();
  o.copy_engines = 0;
  SIM_EXPECT_CODE(CreateSimBackend(o, &b), kInvalidArgument);
  o = SimOptions();
  o.link_gbps = -1;
  SIM_EXPECT_CODE(CreateSimBackend(o, &b), kInvalidArgument);
  o = SimOptions();
  o.memory_bytes = 0;
  SIM_EXPECT_CODE(CreateSimBackend(o, &b), kInvalidArgument);
  o = SimOptions();
  o.va_base += 4096;
  SIM_EXPECT_CODE(CreateSimBackend(o, &b), kInvalidArgument);
}

}  // namespace
}  // namespace phos::backend::sim_test
