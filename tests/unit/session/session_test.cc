// The daemon side of the data plane, end to end: a real Daemon (sim
// backend, temp socket; session_test) or the data plane alone
// (session_data_plane_test, which ThreadSanitizer runs:
// session_test_harness.h), and fake apps that speak the wire protocol
// (fake_app.h) in-process or in a forked child.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fake_app.h"
#include "phos_device_attributes.h"
#include "session/device_attributes.h"
#include "session/session_server.h"
#include "session_test_harness.h"
#include "test_ptx.h"

namespace phos::session::testing {
namespace {

using namespace std::chrono_literals;
namespace op = wire::op;
constexpr WireStatus kOk = WireStatus::kSuccess;

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

template <typename Pred>
bool WaitUntil(Pred pred, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

class SessionTest : public ::testing::Test {
 protected:
  /// The sim's GPUs (--sim-gpus).
  virtual int GpuCount() const { return 1; }
  void SetUp() override {
    char tmpl[] = "/tmp/phos-session-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string socket_path = dir_ + "/phosd.sock";
    data_path_ = SessionServer::DataSocketPath(socket_path);
    harness_ = SessionTestHarness::Make();
    Status s = harness_->Start(socket_path, GpuCount());
    ASSERT_TRUE(s.ok()) << s.ToString();
    backend_ = harness_->backend();
    server_ = harness_->session_server();
  }
  void TearDown() override {
    harness_.reset();
    std::filesystem::remove_all(dir_);
  }

  /// Daemon::Shutdown (or, without the daemon, what it does to the data plane).
  void ShutdownDaemon() { harness_->Shutdown(); }

  std::unique_ptr<FakeApp> NewApp() {
    std::unique_ptr<FakeApp> app;
    Status s = FakeApp::Connect(data_path_, &app);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return app;
  }

  std::vector<v1::SessionInfo> ListSessions() { return harness_->ListSessions(); }

  uint64_t DeviceFree() {
    uint64_t free_bytes = 0, total = 0;
    EXPECT_TRUE(backend_->GetMemoryInfo(0, &free_bytes, &total).ok());
    return free_bytes;
  }

  std::string dir_;
  std::string data_path_;
  std::unique_ptr<SessionTestHarness> harness_;
  backend::Backend* backend_ = nullptr;  // the harness's
  SessionServer* server_ = nullptr;      // the harness's
};

TEST_F(SessionTest, DataSocketIsGroupOnly) {
  struct stat st {};
  ASSERT_EQ(stat(data_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(SessionTest, DeviceQueries) {
  auto app = NewApp();
  int n = 0;
  ASSERT_EQ(app->DeviceCount(&n), kOk);
  EXPECT_EQ(n, 1);
  wire::WireDeviceProps props{};
  ASSERT_EQ(app->Properties(0, &props), kOk) << app->message();
  EXPECT_NE(std::string(props.name).find("phos sim"), std::string::npos) << props.name;
  EXPECT_EQ(props.total_memory, 80ull << 30);
  EXPECT_EQ(props.attributes[75], 9);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
  EXPECT_EQ(props.attributes[10], 32);  // warp size
  EXPECT_EQ(props.attributes[0], wire::kNoAttribute);
  EXPECT_EQ(app->Properties(3, &props), WireStatus::kInvalidDevice);
  int64_t v = 0;
  ASSERT_EQ(app->Attribute(0, 75, &v), kOk);  // cudaDevAttrComputeCapabilityMajor
  EXPECT_EQ(v, 9);
  EXPECT_EQ(app->Attribute(0, 100000, &v), WireStatus::kInvalidValue);
  EXPECT_EQ(app->Attribute(0, 0, &v), WireStatus::kInvalidValue);
  EXPECT_EQ(app->Attribute(0, -1, &v), WireStatus::kInvalidValue);
  EXPECT_EQ(app->Attribute(1, 75, &v), WireStatus::kInvalidDevice);
  uint64_t free_bytes = 0, total = 0;
  ASSERT_EQ(app->MemInfo(&free_bytes, &total), kOk);
  EXPECT_EQ(total, 80ull << 30);
  EXPECT_LE(free_bytes, total);
}

// Every attribute CUDA 13's headers define (generated from cuda.h and
// driver_types.h) answers, over the wire, the same value both ways of asking
// give; the features phos does not offer answer 0 whatever the device says.
TEST_F(SessionTest, EveryDeviceAttributeOfBothApisAnswers) {
  auto app = NewApp();
  wire::WireDeviceProps props{};
  ASSERT_EQ(app->Properties(0, &props), kOk) << app->message();
  using Enum = std::span<const interposer::EnumeratorInfo>;
  for (Enum list : {Enum(interposer::kCuDeviceAttributes), Enum(interposer::kCudaDeviceAttrs)}) {
    for (const interposer::EnumeratorInfo& e : list) {
      int64_t v = -12345;
      ASSERT_EQ(app->Attribute(0, e.value, &v), kOk) << e.name << " (" << e.value << "): " << app->message();
      EXPECT_EQ(v, props.attributes[e.value]) << e.name;
      if (session::FeatureNotOffered(e.value) != nullptr) {
        EXPECT_EQ(v, 0) << e.name;
      }
    }
  }
  // What device-selection helpers and numba's cuda.detect() read first.
  int64_t v = -1;
  ASSERT_EQ(app->Attribute(0, 20, &v), kOk);  // COMPUTE_MODE
  EXPECT_EQ(v, 0);                            // CU_COMPUTEMODE_DEFAULT
  ASSERT_EQ(app->Attribute(0, 17, &v), kOk);  // KERNEL_EXEC_TIMEOUT
  EXPECT_EQ(v, 0);
  ASSERT_EQ(app->Attribute(0, 115, &v), kOk);  // MEMORY_POOLS_SUPPORTED: stream-ordered allocation
  EXPECT_EQ(v, 1);
  EXPECT_EQ(session::FeatureNotOffered(115), nullptr);
  ASSERT_EQ(app->Attribute(0, 119, &v), kOk);  // MEMPOOL_SUPPORTED_HANDLE_TYPES: no export
  EXPECT_EQ(v, 0);
  EXPECT_EQ(session::FeatureNotOffered(16), nullptr);  // MULTIPROCESSOR_COUNT: the device's
}

// cudaFreeAsync (kFreeAsync): the buffer leaves the session when the call
// runs, its memory comes back once the stream has passed the free.
TEST_F(SessionTest, FreeAsyncReleasesTheBufferWhenItsStreamGetsThere) {
  auto app = NewApp();
  uint64_t free0 = 0, total = 0;
  ASSERT_EQ(app->MemInfo(&free0, &total), kOk);
  const uint64_t bytes = 8u << 20;
  uint64_t a = 0;
  ASSERT_EQ(app->Malloc(bytes, &a), kOk);
  ASSERT_EQ(app->StreamCreate(7), kOk);
  // Work on the stream before the free still uses the buffer.
  ASSERT_EQ(app->Memset(a, 0x5a, 1, bytes, 7, /*sync=*/false), kOk);
  const wire::PointerRequest req{a};
  EXPECT_EQ(app->Send(wire::op::kFreeAsync, req, /*call=*/true, /*stream=*/99), WireStatus::kInvalidResourceHandle);
  ASSERT_EQ(app->Send(wire::op::kFreeAsync, req, /*call=*/true, /*stream=*/7), kOk);
  // Gone for the app at once: a second free and a copy are refused.
  EXPECT_EQ(app->Send(wire::op::kFreeAsync, req, /*call=*/true, /*stream=*/7), WireStatus::kInvalidValue);
  uint8_t byte = 0;
  EXPECT_EQ(app->D2H(&byte, a, 1), WireStatus::kInvalidValue);
  EXPECT_EQ(app->Free(a), WireStatus::kInvalidValue);
  // Once the stream has passed the free, the memory is the device's again.
  ASSERT_EQ(app->StreamSync(7), kOk);
  uint64_t free1 = 0;
  ASSERT_EQ(app->MemInfo(&free1, &total), kOk);
  EXPECT_EQ(free1, free0);
  // cudaFreeAsync(nullptr) does nothing.
  EXPECT_EQ(app->Send(wire::op::kFreeAsync, wire::PointerRequest{0}, /*call=*/true, /*stream=*/7), kOk);
  // A buffer freed in stream order and never waited for is released with
  // the session (no leak: the next session sees the whole device).
  uint64_t b = 0;
  ASSERT_EQ(app->Malloc(bytes, &b), kOk);
  ASSERT_EQ(app->Memset(b, 1, 1, bytes, 7, /*sync=*/false), kOk);
  ASSERT_EQ(app->Send(wire::op::kFreeAsync, wire::PointerRequest{b}, /*call=*/false, /*stream=*/7), kOk);
  app.reset();
  EXPECT_TRUE(WaitUntil([&] { return ListSessions().empty(); }, 5s));
  EXPECT_TRUE(WaitUntil([&] { return DeviceFree() == free0; }, 5s));
}

TEST_F(SessionTest, CopiesRoundTripSmallAndStaged) {
  auto app = NewApp();
  const size_t big = (3u << 20) + 123;  // > 1 MiB: staged pieces, chunked D2H
  uint64_t a = 0, b = 0;
  ASSERT_EQ(app->Malloc(big, &a), kOk);
  ASSERT_EQ(app->Malloc(big, &b), kOk);
  ASSERT_NE(a, 0u);
  // Small: inline both ways.
  auto small = RandomBytes(77, 1);
  ASSERT_EQ(app->H2D(a, small.data(), small.size()), kOk) << app->message();
  std::vector<std::byte> back(small.size());
  ASSERT_EQ(app->D2H(back.data(), a, back.size()), kOk) << app->message();
  EXPECT_EQ(back, small);
  // Large: staged H2D, D2D, chunked D2H.
  auto data = RandomBytes(big, 2);
  ASSERT_EQ(app->H2D(a, data.data(), data.size()), kOk) << app->message();
  ASSERT_EQ(app->D2D(b, a, big), kOk) << app->message();
  std::vector<std::byte> out(big);
  ASSERT_EQ(app->D2H(out.data(), b, big), kOk) << app->message();
  EXPECT_TRUE(out == data);
  // A medium copy forced through staging, async, on the default stream.
  auto mid = RandomBytes(5000, 3);
  ASSERT_EQ(app->H2D(a + 100, mid.data(), mid.size(), 0, /*sync=*/false, /*force_staged=*/true), kOk);
  ASSERT_EQ(app->StreamSync(0), kOk) << app->message();
  std::vector<std::byte> mid_back(mid.size());
  ASSERT_EQ(app->D2H(mid_back.data(), a + 100, mid.size()), kOk);
  EXPECT_EQ(mid_back, mid);
  ASSERT_EQ(app->Free(a), kOk);
  ASSERT_EQ(app->Free(b), kOk);
}

TEST_F(SessionTest, MemsetElementSizes) {
  auto app = NewApp();
  uint64_t p = 0;
  ASSERT_EQ(app->Malloc(64, &p), kOk);
  ASSERT_EQ(app->Memset(p, 0xAB, 1, 64), kOk);
  ASSERT_EQ(app->Memset(p + 8, 0x1234, 2, 4), kOk);
  ASSERT_EQ(app->Memset(p + 32, 0xDEADBEEF, 4, 2, 0, /*sync=*/false), kOk);
  ASSERT_EQ(app->DeviceSync(), kOk);
  uint8_t out[64];
  ASSERT_EQ(app->D2H(out, p, 64), kOk);
  EXPECT_EQ(out[0], 0xAB);
  uint16_t h;
  std::memcpy(&h, out + 10, 2);
  EXPECT_EQ(h, 0x1234);
  uint32_t w;
  std::memcpy(&w, out + 36, 4);
  EXPECT_EQ(w, 0xDEADBEEFu);
  EXPECT_EQ(out[40], 0xAB);
  EXPECT_EQ(app->Memset(p, 1, 3, 4), WireStatus::kInvalidValue);
}

TEST_F(SessionTest, StreamsAndEventsOrderWork) {
  auto app = NewApp();
  const size_t n = 1 << 20;
  uint64_t src = 0, dst = 0;
  ASSERT_EQ(app->Malloc(n, &src), kOk);
  ASSERT_EQ(app->Malloc(n, &dst), kOk);
  ASSERT_EQ(app->StreamCreate(1, 1), kOk);
  ASSERT_EQ(app->StreamCreate(2, 1), kOk);
  EXPECT_EQ(app->StreamCreate(2), WireStatus::kInvalidValue);  // id in use
  ASSERT_EQ(app->EventCreate(1), kOk);
  ASSERT_EQ(app->EventCreate(2), kOk);
  ASSERT_EQ(app->EventCreate(3, 2 /* disable timing */), kOk);
  // s1: fill src, record e1; s2: wait e1, copy src -> dst, record e2.
  ASSERT_EQ(app->EventRecord(1, 0), kOk);
  auto data = RandomBytes(n, 5);
  ASSERT_EQ(app->H2D(src, data.data(), n, 1, /*sync=*/false), kOk);
  ASSERT_EQ(app->Memset(src, 0x5A, 1, 4096, 1, /*sync=*/false), kOk);
  ASSERT_EQ(app->EventRecord(3, 1), kOk);
  ASSERT_EQ(app->StreamWaitEvent(2, 3), kOk);
  ASSERT_EQ(app->D2D(dst, src, n, 2, /*sync=*/false), kOk);
  ASSERT_EQ(app->EventRecord(2, 2), kOk);
  ASSERT_EQ(app->EventSync(2), kOk) << app->message();
  EXPECT_EQ(app->EventQuery(2), kOk);
  EXPECT_EQ(app->StreamQuery(2), kOk);
  // e1 is on the legacy stream, which s1 and s2 (non-blocking) do not wait
  // for: it may still be pending after e2 (cudaErrorNotReady, as on a GPU).
  ASSERT_EQ(app->EventSync(1), kOk) << app->message();
  float ms = -1;
  ASSERT_EQ(app->EventElapsed(1, 2, &ms), kOk) << app->message();
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(app->EventElapsed(1, 3, &ms), WireStatus::kInvalidValue);  // timing disabled
  std::vector<std::byte> out(n);
  ASSERT_EQ(app->D2H(out.data(), dst, n, 2), kOk);
  std::memset(data.data(), 0x5A, 4096);
  EXPECT_TRUE(out == data);
  ASSERT_EQ(app->StreamSync(1), kOk);
  ASSERT_EQ(app->StreamDestroy(1), kOk);
  EXPECT_EQ(app->StreamSync(1), WireStatus::kInvalidResourceHandle);
  ASSERT_EQ(app->EventDestroy(3), kOk);
  EXPECT_EQ(app->EventQuery(3), WireStatus::kInvalidResourceHandle);
}

struct SaxpyParams {
  uint64_t x, y;
  float a;
  uint32_t n;
};
static_assert(sizeof(SaxpyParams) == 24);

wire::LaunchRequest Grid(uint32_t blocks, uint32_t threads) {
  wire::LaunchRequest g{};
  g.grid[0] = blocks;
  g.grid[1] = g.grid[2] = 1;
  g.block[0] = threads;
  g.block[1] = g.block[2] = 1;
  return g;
}

std::span<const std::byte> Bytes(const SaxpyParams& p) { return std::as_bytes(std::span<const SaxpyParams>(&p, 1)); }

TEST_F(SessionTest, SaxpyKernelMatchesCpu) {
  auto app = NewApp();
  const auto image = std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
  for (bool staged : {false, true}) {
    const uint32_t mod = staged ? 2 : 1;
    ASSERT_EQ(app->ModuleLoad(mod, image, staged), kOk) << app->message();
  }
  ASSERT_EQ(app->GetFunction(1, 10, "saxpy"), kOk) << app->message();
  ASSERT_EQ(app->GetFunction(2, 11, "bump"), kOk) << app->message();
  EXPECT_EQ(app->GetFunction(1, 12, "no_such_kernel"), WireStatus::kNotFound);
  const uint32_t n = 1000;
  std::vector<float> x(n), y(n);
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i) * 0.5f;
    y[i] = 3.0f - static_cast<float>(i);
  }
  uint64_t dx = 0, dy = 0;
  ASSERT_EQ(app->Malloc(n * 4, &dx), kOk);
  ASSERT_EQ(app->Malloc(n * 4, &dy), kOk);
  ASSERT_EQ(app->H2D(dx, x.data(), n * 4), kOk);
  ASSERT_EQ(app->H2D(dy, y.data(), n * 4), kOk);
  SaxpyParams p{dx, dy, 2.5f, n};
  ASSERT_EQ(app->Launch(10, Grid((n + 127) / 128, 128), Bytes(p)), kOk);
  ASSERT_EQ(app->DeviceSync(), kOk) << app->message();
  std::vector<float> out(n);
  ASSERT_EQ(app->D2H(out.data(), dy, n * 4), kOk);
  for (uint32_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], 2.5f * x[i] + y[i]) << i;
  // A module global: read, bump, read.
  uint64_t counter = 0, bytes = 0;
  ASSERT_EQ(app->GetGlobal(2, "phos_counter", &counter, &bytes), kOk) << app->message();
  EXPECT_EQ(bytes, 4u);
  uint32_t c = 0;
  ASSERT_EQ(app->D2H(&c, counter, 4), kOk) << app->message();
  EXPECT_EQ(c, 7u);
  ASSERT_EQ(app->Launch(11, Grid(1, 1), {}), kOk);
  ASSERT_EQ(app->D2H(&c, counter, 4), kOk);
  EXPECT_EQ(c, 8u);
}

// docs/interposer.md "Several GPUs in one process": each call runs on the
// GPU its frame names (the app thread's), or on its stream's; an empty
// session moves to the first GPU named, a second GPU gets a context of its
// own; modules load on each GPU with a variable instance each.
class TwoGpuSessionTest : public SessionTest {
 protected:
  int GpuCount() const override { return 2; }
  uint64_t UsedOn(int device) {
    uint64_t free_bytes = 0, total = 0;
    EXPECT_TRUE(backend_->GetMemoryInfo(device, &free_bytes, &total).ok());
    return total - free_bytes;
  }
};

TEST_F(TwoGpuSessionTest, CallsRunOnTheGpuTheyName) {
  auto app = NewApp();
  const uint64_t base0 = UsedOn(0), base1 = UsedOn(1);
  constexpr uint64_t kBytes = 64ull << 20;
  // The first call names GPU 1: the empty session moves there.
  app->UseDevice(1);
  uint64_t p1 = 0;
  ASSERT_EQ(app->Malloc(kBytes, &p1), kOk) << app->message();
  EXPECT_EQ(UsedOn(1), base1 + kBytes);
  EXPECT_EQ(UsedOn(0), base0);
  // GPU 0 then gets a context of its own.
  app->UseDevice(0);
  uint64_t p0 = 0;
  ASSERT_EQ(app->Malloc(kBytes, &p0), kOk) << app->message();
  EXPECT_EQ(UsedOn(0), base0 + kBytes);
  // Copies between the GPUs' buffers, either way.
  const std::vector<std::byte> bytes = RandomBytes(4096, 7);
  ASSERT_EQ(app->H2D(p0, bytes.data(), bytes.size()), kOk) << app->message();
  ASSERT_EQ(app->D2D(p1, p0, bytes.size()), kOk) << app->message();
  std::vector<std::byte> back(bytes.size());
  app->UseDevice(1);
  ASSERT_EQ(app->D2H(back.data(), p1, back.size()), kOk) << app->message();
  EXPECT_EQ(back, bytes);

  // A module variable has an instance per GPU; a kernel runs on its GPU's.
  const auto image = std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
  ASSERT_EQ(app->ModuleLoad(1, image), kOk) << app->message();
  ASSERT_EQ(app->GetFunction(1, 11, "bump"), kOk) << app->message();
  uint64_t counter1 = 0, counter0 = 0, n = 0;
  ASSERT_EQ(app->GetGlobal(1, "phos_counter", &counter1, &n), kOk) << app->message();
  app->UseDevice(0);
  ASSERT_EQ(app->GetGlobal(1, "phos_counter", &counter0, &n), kOk) << app->message();
  EXPECT_NE(counter0, counter1);
  app->UseDevice(1);
  ASSERT_EQ(app->Launch(11, Grid(1, 1), {}), kOk);
  ASSERT_EQ(app->DeviceSync(), kOk) << app->message();
  uint32_t c0 = 0, c1 = 0;
  ASSERT_EQ(app->D2H(&c1, counter1, 4), kOk) << app->message();
  ASSERT_EQ(app->D2H(&c0, counter0, 4), kOk) << app->message();
  EXPECT_EQ(c1, 8u);
  EXPECT_EQ(c0, 7u);

  // A stream made on GPU 1 runs its calls there, whichever GPU the calling
  // thread is on; GPU 0's stream may wait for GPU 1's event, but an event
  // is recorded only on a stream of its own GPU (as CUDA).
  ASSERT_EQ(app->StreamCreate(5), kOk) << app->message();
  ASSERT_EQ(app->EventCreate(6), kOk) << app->message();
  app->UseDevice(0);
  ASSERT_EQ(app->StreamCreate(7), kOk) << app->message();
  ASSERT_EQ(app->Memset(p1, 0x11, 1, 4096, 5, /*sync=*/false), kOk) << app->message();
  ASSERT_EQ(app->EventRecord(6, 5), kOk) << app->message();
  ASSERT_EQ(app->StreamWaitEvent(7, 6), kOk) << app->message();
  ASSERT_EQ(app->D2D(p0, p1, 4096, 7, /*sync=*/false), kOk) << app->message();
  ASSERT_EQ(app->StreamSync(7), kOk) << app->message();
  ASSERT_EQ(app->D2H(back.data(), p0, 4096), kOk) << app->message();
  EXPECT_EQ(back[0], std::byte{0x11});
  EXPECT_EQ(back[4095], std::byte{0x11});
  ASSERT_EQ(app->EventRecord(6, 7), kOk);  // posted: its error comes at the next synchronising call
  EXPECT_EQ(app->GetLastError(), WireStatus::kInvalidResourceHandle);
  EXPECT_NE(app->message().find("another GPU"), std::string::npos) << app->message();
  ASSERT_EQ(app->EventDestroy(6), kOk) << app->message();
  ASSERT_EQ(app->StreamDestroy(5), kOk) << app->message();
  ASSERT_EQ(app->StreamDestroy(7), kOk) << app->message();

  // What phos offers on the first GPU only is refused by name elsewhere.
  uint64_t range = 0;
  EXPECT_EQ(app->AddressReserve(2ull << 20, 0, &range), WireStatus::kNotSupported);
  EXPECT_NE(app->message().find("further GPUs"), std::string::npos) << app->message();
  // A GPU phosd does not have fails the call, named.
  app->UseDevice(7);
  uint64_t nowhere = 0;
  EXPECT_EQ(app->Malloc(4096, &nowhere), WireStatus::kInvalidValue);
  EXPECT_NE(app->message().find("GPU 7"), std::string::npos) << app->message();
  // A buffer is freed on its own GPU, from any thread.
  app->UseDevice(0);
  ASSERT_EQ(app->Free(p1), kOk) << app->message();
  EXPECT_LT(UsedOn(1), base1 + kBytes);  // what is left there is the module's variables
  ASSERT_EQ(app->Free(p0), kOk) << app->message();
  EXPECT_LT(UsedOn(0), base0 + kBytes);
}

TEST_F(SessionTest, InvalidPointerIsReportedAndSessionStaysUsable) {
  auto app = NewApp();
  uint8_t byte = 1;
  EXPECT_EQ(app->H2D(0x1234, &byte, 1), WireStatus::kInvalidValue);
  EXPECT_NE(app->message().find("invalid device pointer"), std::string::npos) << app->message();
  uint64_t p = 0;
  ASSERT_EQ(app->Malloc(16, &p), kOk);
  EXPECT_EQ(app->D2H(&byte, p + 16, 1), WireStatus::kInvalidValue);  // one past the end
  // A posted call's error surfaces at the next synchronising call, once.
  ASSERT_EQ(app->Memset(p + 8, 0, 1, 64, 0, /*sync=*/false), kOk);
  EXPECT_EQ(app->StreamSync(0), WireStatus::kInvalidValue);
  EXPECT_EQ(app->StreamSync(0), kOk);
  ASSERT_EQ(app->Memset(p, 7, 1, 16), kOk);
  ASSERT_EQ(app->D2H(&byte, p + 3, 1), kOk);
  EXPECT_EQ(byte, 7);
  EXPECT_EQ(app->Free(p + 1), WireStatus::kInvalidValue);
  EXPECT_EQ(app->Free(p), kOk);
}

TEST_F(SessionTest, KernelFaultIsReportedAtNextSync) {
  auto app = NewApp();
  const auto image = std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
  ASSERT_EQ(app->ModuleLoad(1, image), kOk) << app->message();
  ASSERT_EQ(app->GetFunction(1, 1, "saxpy"), kOk);
  uint64_t y = 0;
  ASSERT_EQ(app->Malloc(256, &y), kOk);
  SaxpyParams p{0x10, y, 1.0f, 64};  // x is not device memory
  ASSERT_EQ(app->Launch(1, Grid(1, 64), Bytes(p)), kOk);  // posted: no error yet
  EXPECT_EQ(app->DeviceSync(), WireStatus::kIllegalAddress) << app->message();
  EXPECT_NE(app->message().find("illegal address"), std::string::npos) << app->message();
}

// A posted launch the sim refuses with CUDA_ERROR_NO_BINARY_FOR_GPU (a
// kernel of a SASS-only module) reaches the app with that number at the
// next synchronising call, not as cudaErrorInvalidValue.
TEST_F(SessionTest, PostedLaunchErrorKeepsItsNumberUntilTheNextSync) {
  auto app = NewApp();
  std::ifstream f(std::string(PHOS_TEST_APPS_DIR) + "/vector_add.sass.fatbin", std::ios::binary);
  const std::vector<char> fatbin((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(fatbin.empty());
  ASSERT_EQ(app->ModuleLoad(1, std::as_bytes(std::span<const char>(fatbin))), kOk) << app->message();
  ASSERT_EQ(app->GetFunction(1, 1, "_Z10vector_addPKfS0_Pfi"), kOk) << app->message();
  std::vector<std::byte> params(28);
  ASSERT_EQ(app->Launch(1, Grid(1, 32), params), kOk);  // posted: no error yet
  EXPECT_EQ(app->DeviceSync(), WireStatus::kNoBinaryForGpu) << app->message();
  EXPECT_NE(app->message().find("_Z10vector_addPKfS0_Pfi"), std::string::npos) << app->message();
  EXPECT_EQ(app->DeviceSync(), kOk);  // reported once
}

TEST_F(SessionTest, UnknownApiIsNotSupportedAndSessionStaysUsable) {
  auto app = NewApp();
  ring::Reply r;
  EXPECT_EQ(app->Raw(static_cast<uint32_t>(wire::ApiId::k_cuArrayCreate_v2), 0, {}, true, &r),
            WireStatus::kNotSupported);
  EXPECT_EQ(app->Raw(0xFFFFFF0u, 0, {}, true, &r), WireStatus::kNotSupported);
  // Posted: deferred to the next sync.
  EXPECT_EQ(app->Raw(static_cast<uint32_t>(wire::ApiId::k_cuArrayCreate_v2), 0, {}, false), kOk);
  EXPECT_EQ(app->GetLastError(), WireStatus::kNotSupported);
  EXPECT_EQ(app->GetLastError(), kOk);
  // Malformed payload.
  uint8_t junk[3] = {1, 2, 3};
  EXPECT_EQ(app->Raw(static_cast<uint32_t>(op::kMalloc), 0, std::as_bytes(std::span(junk)), true),
            WireStatus::kInvalidValue);
  uint64_t p = 0;
  EXPECT_EQ(app->Malloc(1024, &p), kOk);
}

TEST_F(SessionTest, ListSessionsShowsTheSession) {
  auto app = NewApp();
  uint64_t a = 0, b = 0;
  ASSERT_EQ(app->Malloc(1 << 20, &a), kOk);
  ASSERT_EQ(app->Malloc(3 << 20, &b), kOk);
  auto sessions = ListSessions();
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].pid(), getpid());
  EXPECT_EQ(sessions[0].command(), "fake_app --test");
  EXPECT_EQ(sessions[0].buffer_count(), 2u);
  EXPECT_EQ(sessions[0].device_memory_bytes(), 4u << 20);
  EXPECT_EQ(sessions[0].state(), v1::SESSION_RUNNING);
  ASSERT_EQ(app->Free(a), kOk);
  sessions = ListSessions();
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].buffer_count(), 1u);
  // Orderly exit (the app closes its end): the session goes away.
  app.reset();
  EXPECT_TRUE(WaitUntil([&] { return ListSessions().empty(); }));
}

TEST_F(SessionTest, KilledAppReleasesEverything) {
  const uint64_t free_before = DeviceFree();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    std::unique_ptr<FakeApp> app;
    char ok = 'n';
    uint64_t p = 0, q = 0;
    if (FakeApp::Connect(data_path_, &app).ok() && app->Malloc(64ull << 20, &p) == kOk &&
        app->Malloc(1 << 20, &q) == kOk && app->StreamCreate(7) == kOk) {
      ok = 'y';
    }
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  EXPECT_EQ(ok, 'y');
  auto sessions = ListSessions();
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].pid(), child);
  EXPECT_EQ(sessions[0].buffer_count(), 2u);
  EXPECT_EQ(sessions[0].device_memory_bytes(), (64ull << 20) + (1 << 20));
  EXPECT_LE(DeviceFree() + (65ull << 20), free_before);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WaitUntil([&] { return ListSessions().empty(); }, 5s));
  EXPECT_TRUE(WaitUntil([&] { return DeviceFree() == free_before; }, 5s));
  EXPECT_EQ(server_->session_count(), 0u);
}

/// Blocks DeviceSynchronize until released (bounded), to hold an app in a
/// synchronous call while phosd shuts down.
class BlockingHook : public AdmissionHook {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool entered = false;
    bool released = false;
  };
  explicit BlockingHook(std::shared_ptr<Gate> g) : gate_(std::move(g)) {}
  Status BeforeCall(const CallView& call) override {
    if (call.api != op::kDeviceSynchronize) return Status::Ok();
    std::unique_lock<std::mutex> lock(gate_->mu);
    gate_->entered = true;
    gate_->cv.notify_all();
    gate_->cv.wait_for(lock, 20s, [&] { return gate_->released; });
    return Status::Ok();
  }
  void AfterCall(const CallView&, const Status&) override {}

 private:
  std::shared_ptr<Gate> gate_;
};

TEST_F(SessionTest, DaemonShutdownFailsAWaitingCall) {
  auto gate = std::make_shared<BlockingHook::Gate>();
  server_->SetHookFactory([gate](uint64_t) { return std::make_unique<BlockingHook>(gate); });
  auto app = NewApp();
  uint64_t p = 0;
  ASSERT_EQ(app->Malloc(4096, &p), kOk);  // admitted by the hook
  std::atomic<int> result{-1};
  std::thread caller([&] { result = static_cast<int>(app->DeviceSync()); });
  {
    std::unique_lock<std::mutex> lock(gate->mu);
    ASSERT_TRUE(gate->cv.wait_for(lock, 10s, [&] { return gate->entered; }));
  }
  std::thread stopper([&] { ShutdownDaemon(); });
  // The app's call ends with an error while the daemon is still finishing.
  EXPECT_TRUE(WaitUntil([&] { return result.load() != -1; }, 10s));
  EXPECT_EQ(result.load(), static_cast<int>(WireStatus::kDaemonUnavailable));
  {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->released = true;
    gate->cv.notify_all();
  }
  stopper.join();
  caller.join();
  // phosd is gone: the next call fails at once instead of hanging.
  uint64_t q = 0;
  EXPECT_EQ(app->Malloc(16, &q), WireStatus::kDaemonUnavailable);
  EXPECT_FALSE(app->message().empty());
}

TEST_F(SessionTest, TwoAppsAreIsolated) {
  auto a = NewApp();
  auto b = NewApp();
  uint64_t pa = 0, pb = 0;
  ASSERT_EQ(a->Malloc(4096, &pa), kOk);
  ASSERT_EQ(b->Malloc(8192, &pb), kOk);
  ASSERT_EQ(a->Memset(pa, 0x11, 1, 4096), kOk);
  ASSERT_EQ(b->Memset(pb, 0x22, 1, 8192), kOk);
  ASSERT_EQ(a->StreamCreate(5), kOk);
  ASSERT_EQ(a->EventCreate(6), kOk);
  // b cannot see or touch a's buffer or handles.
  uint8_t byte = 0;
  EXPECT_EQ(b->D2H(&byte, pa, 1), WireStatus::kInvalidValue);
  EXPECT_EQ(b->Memset(pa, 0x33, 1, 16), WireStatus::kInvalidValue);
  EXPECT_EQ(b->D2D(pb, pa, 16), WireStatus::kInvalidValue);
  EXPECT_EQ(b->Free(pa), WireStatus::kInvalidValue);
  EXPECT_EQ(b->StreamSync(5), WireStatus::kInvalidResourceHandle);
  EXPECT_EQ(b->EventQuery(6), WireStatus::kInvalidResourceHandle);
  ASSERT_EQ(b->StreamCreate(5), kOk);  // the same virtual id means a different stream in b
  ASSERT_EQ(a->D2H(&byte, pa + 100, 1), kOk);
  EXPECT_EQ(byte, 0x11);
  ASSERT_EQ(b->D2H(&byte, pb + 100, 1, 5), kOk);
  EXPECT_EQ(byte, 0x22);
  auto sessions = ListSessions();
  ASSERT_EQ(sessions.size(), 2u);
  EXPECT_NE(sessions[0].session_id(), sessions[1].session_id());
  uint64_t total = sessions[0].device_memory_bytes() + sessions[1].device_memory_bytes();
  EXPECT_EQ(total, 4096u + 8192u);
  // Work in two apps at once.
  std::thread ta([&] {
    std::vector<std::byte> d = RandomBytes(4096, 9), o(4096);
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(a->H2D(pa, d.data(), d.size(), 5), kOk);
      EXPECT_EQ(a->D2H(o.data(), pa, o.size(), 5), kOk);
    }
    EXPECT_TRUE(o == d);
  });
  std::vector<std::byte> d = RandomBytes(8192, 10), o(8192);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(b->H2D(pb, d.data(), d.size()), kOk);
    EXPECT_EQ(b->D2H(o.data(), pb, o.size()), kOk);
  }
  EXPECT_TRUE(o == d);
  ta.join();
}

TEST(WireStatusTest, MapsPhosStatusToCudaErrors) {
  EXPECT_EQ(wire::ToWire(Status::Ok()), WireStatus::kSuccess);
  EXPECT_EQ(wire::ToWire(Status::OutOfMemory("x")), WireStatus::kMemoryAllocation);
  EXPECT_EQ(wire::ToWire(Status::InvalidArgument("x")), WireStatus::kInvalidValue);
  EXPECT_EQ(wire::ToWire(Status::InvalidArgument("illegal address: device range")), WireStatus::kIllegalAddress);
  EXPECT_EQ(wire::ToWire(Status::FailedPrecondition("ptx interp: illegal address: load")),
            WireStatus::kIllegalAddress);
  EXPECT_EQ(wire::ToWire(Status::NotSupported("x")), WireStatus::kNotSupported);
  EXPECT_EQ(wire::ToWire(Status::NotReady()), WireStatus::kNotReady);
  EXPECT_EQ(wire::ToWire(Status::NotFound("x")), WireStatus::kInvalidResourceHandle);
  EXPECT_EQ(wire::ToWire(Status::Unavailable("x")), WireStatus::kDaemonUnavailable);
  EXPECT_EQ(wire::ToWire(Status::Corruption("x")), WireStatus::kInvalidImage);
  // Values are the CUDA numbers.
  EXPECT_EQ(static_cast<int>(WireStatus::kIllegalAddress), 700);
  EXPECT_EQ(static_cast<int>(WireStatus::kNotSupported), 801);
  EXPECT_EQ(wire::WireStatusName(WireStatus::kNotReady), "cudaErrorNotReady");
}

// A GPU's kernel fault comes from the cuda backend as kInternal and "no
// kernel image for this device" as kInvalidArgument/kNotSupported: the app
// must see the exact CUDA error (Status::api_error), which the H200 run of
// docs/gpu-report.md showed as cudaErrorUnknown and INVALID_IMAGE before.
TEST(WireStatusTest, AnApiErrorIsForwardedExactly) {
  EXPECT_EQ(wire::ToWire(Status::Internal("cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS").WithApiError(700)),
            WireStatus::kIllegalAddress);
  EXPECT_EQ(wire::ToWire(Status::Internal("x").WithApiError(719)), WireStatus::kLaunchFailure);
  EXPECT_EQ(wire::ToWire(Status::Internal("x").WithApiError(716)), WireStatus::kMisalignedAddress);
  EXPECT_EQ(wire::ToWire(Status::NotSupported("sim: SASS only").WithApiError(209)), WireStatus::kNoBinaryForGpu);
  EXPECT_EQ(wire::ToWire(Status::InvalidArgument("x").WithApiError(209).WithContext("LoadModule")),
            WireStatus::kNoBinaryForGpu);
  // Only the codes the wire forwards; any other number leaves the mapping by code.
  EXPECT_EQ(wire::ToWire(Status::Internal("x").WithApiError(12345)), WireStatus::kUnknown);
  EXPECT_EQ(wire::ToWire(Status::OutOfMemory("x").WithApiError(1)), WireStatus::kMemoryAllocation);
  EXPECT_TRUE(Status::Ok().WithApiError(700).ok());
  EXPECT_EQ(Status::Ok().WithApiError(700).api_error(), 0);
  EXPECT_TRUE(wire::IsKernelFault(WireStatus::kIllegalAddress));
  EXPECT_TRUE(wire::IsKernelFault(WireStatus::kInvalidPc));
  EXPECT_FALSE(wire::IsKernelFault(WireStatus::kNoBinaryForGpu));
  EXPECT_FALSE(wire::IsKernelFault(WireStatus::kDaemonUnavailable));
  EXPECT_EQ(wire::WireStatusName(WireStatus::kNoBinaryForGpu), "cudaErrorNoKernelImageForDevice");
}

}  // namespace
}  // namespace phos::session::testing
