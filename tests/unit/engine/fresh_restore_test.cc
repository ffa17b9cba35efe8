// Restore into a FRESH session (daemon/engine/fresh_restore.h): app A builds
// state (modules, functions, a function attribute, streams, events,
// buffers, a module global), is checkpointed (stop, cow, recopy) and leaves;
// app B connects as a new session, the image is restored into it, and B
// goes on with A's virtual ids and device pointers. Also: a non-empty
// session and a corrupt image are refused without touching the session; a
// global the backend places elsewhere refuses the restore and leaves the
// session empty. Concurrent fresh restore (options.concurrent): B reads
// its buffers in random order the moment the control task returns and
// launches function 10 on stream 3 while the loader runs (every read sees
// the image, the launch computes a + b), some reads wait for absent
// buffers, the loader follows the image's first-use order, and B exiting
// while the loader runs ends the restore cleanly. Real SessionServer on
// the sim backend, fake apps (tests/unit/session/fake_app.h). Label
// `concurrency`: re-run under TSan.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "engine/engine_hook.h"
#include "engine/fresh_restore.h"
#include "engine/operations.h"
#include "engine/session_sections.h"
#include "engine/session_snapshot.h"
#include "fake_app.h"
#include "protocol/texture_desc.h"
#include "image.pb.h"
#include "image/image_reader.h"
#include "image/image_writer.h"
#include "session/session_server.h"
#include "test_ptx.h"

namespace phos::engine {
namespace {

using namespace std::chrono_literals;
using session::testing::FakeApp;
using wire::WireStatus;
constexpr WireStatus kOk = WireStatus::kSuccess;

constexpr uint32_t kModule = 1, kPtxModule = 2;
constexpr uint32_t kVectorAdd = 10, kBump = 11;
constexpr uint32_t kStream = 3, kEvent = 5;
constexpr uint32_t kStreamFlags = 1;  // cudaStreamNonBlocking
constexpr uint32_t kEventFlags = 2;   // cudaEventDisableTiming
constexpr int kN = 20000;
// More dynamic shared memory than a kernel gets by default (48 KiB): a
// launch with it works only when the app's cudaFuncSetAttribute came back.
constexpr int32_t kDynamicShared = 64 << 10;

std::vector<std::byte> ReadFixture(const std::string& name) {
  std::ifstream f(std::string(PHOS_TEST_APPS_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

std::span<const std::byte> PtxImage() {
  return std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
}

wire::LaunchRequest Grid(uint32_t blocks, uint32_t threads, uint32_t shared = 0) {
  wire::LaunchRequest g{};
  g.grid[0] = blocks;
  g.grid[1] = g.grid[2] = 1;
  g.block[0] = threads;
  g.block[1] = g.block[2] = 1;
  g.shared_bytes = shared;
  return g;
}

template <typename T>
std::span<const std::byte> Bytes(const T& v) {
  return std::as_bytes(std::span<const T>(&v, 1));
}

struct VectorAddParams {
  uint64_t a, b, c;
  int32_t n;
};

// Distinct content per buffer and per 4-byte word.
std::vector<std::byte> Pattern(int i, uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  uint32_t x = 0x9E3779B9u * static_cast<uint32_t>(i + 1);
  for (uint64_t off = 0; off < bytes; off += 4) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    std::memcpy(out.data() + off, &x, std::min<uint64_t>(4, bytes - off));
  }
  return out;
}

/// Every extent of image `dir` by device address.
std::map<uint64_t, std::vector<std::byte>> ReadImage(const std::string& dir) {
  std::map<uint64_t, std::vector<std::byte>> out;
  std::unique_ptr<image::ImageReader> reader;
  EXPECT_TRUE(image::ImageReader::Open(dir, {}, &reader).ok());
  if (!reader) return out;
  for (size_t i = 0; i < reader->buffer_count(); ++i) {
    const auto& e = reader->manifest().buffers(static_cast<int>(i));
    std::vector<std::byte> data(e.bytes());
    EXPECT_TRUE(reader->ReadBuffer(i, data.data()).ok());
    out[e.device_address()] = std::move(data);
  }
  return out;
}

/// Image `from` rewritten into `to` with its first-use order replaced by
/// `first_use`; everything else of the manifest (session sections too) kept.
Status RewriteWithFirstUse(const std::string& from, const std::string& to, const std::vector<uint64_t>& first_use) {
  std::unique_ptr<image::ImageReader> reader;
  PHOS_RETURN_IF_ERROR(image::ImageReader::Open(from, {}, &reader));
  const image::v1::Manifest& m = reader->manifest();
  std::unique_ptr<image::ImageWriter> writer;
  PHOS_RETURN_IF_ERROR(image::ImageWriter::Open(to, m, {}, &writer));
  for (int i = 0; i < m.buffers_size(); ++i) {
    std::vector<std::byte> data(m.buffers(i).bytes());
    PHOS_RETURN_IF_ERROR(reader->ReadBuffer(static_cast<size_t>(i), data.data()));
    size_t index = 0;
    PHOS_RETURN_IF_ERROR(writer->AddBuffer(m.buffers(i).device_address(), data.size(), &index));
    PHOS_RETURN_IF_ERROR(writer->WriteBuffer(index, data.data()));
  }
  writer->mutable_metadata()->clear_first_use_order();
  for (uint64_t a : first_use) writer->mutable_metadata()->add_first_use_order(a);
  return writer->Commit();
}

/// The image's first-use order (image buffers only, first occurrence), then
/// its other buffers by ascending address: the order an undisturbed loader
/// follows.
std::vector<uint64_t> ExpectedLoadOrder(const std::string& dir) {
  std::unique_ptr<image::ImageReader> reader;
  EXPECT_TRUE(image::ImageReader::Open(dir, {}, &reader).ok());
  if (!reader) return {};
  SessionSnapshot snap;
  EXPECT_TRUE(DecodeSnapshot(reader->manifest().session(), &snap).ok());
  std::vector<uint64_t> buffers, out;
  for (const auto& b : snap.buffers) buffers.push_back(b.address);
  std::sort(buffers.begin(), buffers.end());
  for (uint64_t a : reader->manifest().first_use_order()) {
    if (std::binary_search(buffers.begin(), buffers.end(), a) && std::find(out.begin(), out.end(), a) == out.end()) {
      out.push_back(a);
    }
  }
  for (uint64_t a : buffers) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  return out;
}

class FreshRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-fresh-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    StartServer();
    Connect();
  }
  void TearDown() override {
    StopServer();
    std::filesystem::remove_all(dir_);
  }

  /// A fresh backend and server (a restarted phosd: the sim's address
  /// space starts over at the same base).
  void StartServer(bool sim_places_module_variables = true) {
    backend::BackendOptions bo;
    bo.kind = backend::BackendKind::kSim;
    bo.sim.places_module_variables = sim_places_module_variables;
    std::string why;
    ASSERT_TRUE(backend::CreateBackend(bo, &backend_, &why).ok()) << why;
    server_ = std::make_unique<session::SessionServer>(backend_.get(), session::SessionServerOptions{},
                                                       session::SessionCallbacks{});
    server_->SetHookFactory(EngineHook::Make);
    ASSERT_TRUE(server_->Start(dir_ + "/phosd.sock.data").ok());
  }
  void StopServer() {
    app_.reset();
    session_.reset();
    if (server_) server_->Stop();
    server_.reset();
    backend_.reset();
  }

  /// App A's state with a module variable: the vector-add state, then the
  /// PTX module whose `bump` takes phos_counter from 7 to 10 (`to_app`: A
  /// holds the variable's address, as after cudaGetSymbolAddress);
  /// checkpointed (stop) into `img`, and A leaves. Returns the variable's
  /// address and A's session id.
  void CheckpointCounterAtTen(const std::string& img, bool to_app, uint64_t* counter, uint64_t* a_session) {
    BuildVectorAddState();
    ASSERT_EQ(app_->ModuleLoad(kPtxModule, PtxImage()), kOk) << app_->message();
    ASSERT_EQ(app_->GetFunction(kPtxModule, kBump, "bump"), kOk) << app_->message();
    uint64_t bytes = 0;
    ASSERT_EQ(app_->GetGlobal(kPtxModule, "phos_counter", counter, &bytes, to_app), kOk) << app_->message();
    ASSERT_EQ(bytes, 4u);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(app_->Launch(kBump, Grid(1, 1), {}), kOk);  // 7 -> 10
    // The launches are posted: a synchronous call makes phosd take them in
    // before the checkpoint (which captures what phosd has taken in).
    ASSERT_EQ(app_->DeviceSync(), kOk);
    Checkpoint(Mode::kStop, img);
    *a_session = session_->id();
    Disconnect();
  }

  /// Connects a new app; session_ = its session (a new one: not `previous`).
  void Connect(uint64_t previous = 0) {
    ASSERT_TRUE(FakeApp::Connect(dir_ + "/phosd.sock.data", &app_).ok());
    session_.reset();
    for (int i = 0; i < 500; ++i) {
      auto s = server_->FindByPid(getpid());
      if (s && s->id() != previous) {
        session_ = s;
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(session_);
  }

  /// The app leaves; waits until its session tore down (freed everything).
  void Disconnect() {
    std::shared_ptr<session::Session> s = session_;
    app_.reset();
    session_.reset();
    for (int i = 0; i < 500 && !s->finished(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(s->finished());
  }

  /// App A: vector_add (module 1, function 10, max dynamic shared raised),
  /// stream 3 (non-blocking), event 5 (no timing), buffers a, b, c.
  void BuildVectorAddState() {
    ASSERT_EQ(app_->ModuleLoad(kModule, ReadFixture("vector_add.fatbin")), kOk) << app_->message();
    ASSERT_EQ(app_->GetFunction(kModule, kVectorAdd, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();
    wire::FuncSetAttributeRequest attr{kVectorAdd, wire::kFuncAttrMaxDynamicSharedSize, kDynamicShared, 0};
    ASSERT_EQ(app_->Send(wire::op::kFuncSetAttribute, attr), kOk) << app_->message();
    ASSERT_EQ(app_->StreamCreate(kStream, kStreamFlags), kOk) << app_->message();
    ASSERT_EQ(app_->EventCreate(kEvent, kEventFlags), kOk) << app_->message();
    a_.resize(kN);
    b_.resize(kN);
    for (int i = 0; i < kN; ++i) {
      a_[i] = static_cast<float>(i) * 0.25f;
      b_[i] = 1000.0f - static_cast<float>(i);
    }
    ASSERT_EQ(app_->Malloc(kN * 4, &da_), kOk);
    ASSERT_EQ(app_->Malloc(kN * 4, &db_), kOk);
    ASSERT_EQ(app_->Malloc(kN * 4, &dc_), kOk);
    ASSERT_EQ(app_->H2D(da_, a_.data(), kN * 4), kOk);
    ASSERT_EQ(app_->H2D(db_, b_.data(), kN * 4), kOk);
    ASSERT_EQ(app_->Memset(dc_, 0x7f, 1, kN * 4), kOk);
  }

  void Checkpoint(Mode mode, const std::string& dir) {
    CheckpointOptions o;
    o.mode = mode;
    o.dir = dir;
    Progress progress;
    CheckpointResult r;
    Status s = engine::Checkpoint(*session_, o, &progress, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(r.mode, mode);
  }

  Status Restore(const std::string& dir, RestoreResult* r = nullptr) {
    RestoreOptions o;
    o.dir = dir;
    Progress progress;
    RestoreResult ignored;
    return RestoreFresh(*session_, o, &progress, r ? r : &ignored);
  }

  /// Every extent of the image equals the device bytes the app reads back.
  void ExpectDeviceEqualsImage(const std::string& dir) {
    std::unique_ptr<image::ImageReader> reader;
    ASSERT_TRUE(image::ImageReader::Open(dir, {}, &reader).ok());
    for (size_t i = 0; i < reader->buffer_count(); ++i) {
      const auto& e = reader->manifest().buffers(static_cast<int>(i));
      std::vector<std::byte> want(e.bytes()), got(e.bytes());
      ASSERT_TRUE(reader->ReadBuffer(i, want.data()).ok());
      ASSERT_EQ(app_->D2H(got.data(), e.device_address(), e.bytes()), kOk) << app_->message();
      ASSERT_TRUE(want == got) << "extent " << i << " at 0x" << std::hex << e.device_address();
    }
  }

  /// B: vector_add on stream 3 with A's pointers and the raised shared
  /// memory, event 5 recorded after it; c must be a + b.
  void LaunchAndCheck() {
    VectorAddParams p{da_, db_, dc_, kN};
    ASSERT_EQ(app_->Launch(kVectorAdd, Grid((kN + 255) / 256, 256, kDynamicShared - 1024), Bytes(p), kStream), kOk);
    ASSERT_EQ(app_->EventRecord(kEvent, kStream), kOk) << app_->message();
    ASSERT_EQ(app_->EventSync(kEvent), kOk) << app_->message();
    std::vector<float> c(kN);
    ASSERT_EQ(app_->D2H(c.data(), dc_, kN * 4), kOk) << app_->message();
    for (int i = 0; i < kN; ++i) ASSERT_EQ(c[i], a_[i] + b_[i]) << i;
  }

  /// A's extra buffers beside a, b, c: many small ones and one of three
  /// image chunks, each holding Pattern(i).
  void MakeExtraBuffers() {
    std::vector<uint64_t> sizes;
    for (int i = 0; i < 20; ++i) sizes.push_back((16u << 10) * (1 + (i * 7) % 16));
    sizes.push_back(9u << 20);
    for (size_t i = 0; i < sizes.size(); ++i) {
      uint64_t p = 0;
      ASSERT_EQ(app_->Malloc(sizes[i], &p), kOk) << app_->message();
      const auto data = Pattern(static_cast<int>(i), sizes[i]);
      ASSERT_EQ(app_->H2D(p, data.data(), data.size()), kOk) << app_->message();
      extra_.push_back(p);
    }
  }

  Status RestoreConcurrent(const std::string& dir, Progress* progress, RestoreResult* r,
                           const ConcurrentRestoreHooks& hooks, std::vector<uint64_t>* loaded) {
    RestoreOptions o;
    o.dir = dir;
    o.concurrent = true;
    return RestoreFreshWithHooks(*session_, o, progress, r, hooks, loaded);
  }

  /// Blocks until the restore's control task has started (a phase it sets):
  /// every call the app posts from then on runs after the control task.
  static void WaitForControlTask(Progress& progress) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    uint64_t seen = 0;
    for (;;) {
      ProgressSnapshot s = progress.Snapshot();
      for (const char* p : {"quiesce", "recreate", "map", "globals", "load"}) {
        if (s.phase == p) return;
      }
      if (std::chrono::steady_clock::now() > deadline) return;
      progress.WaitForChange(s.version == seen ? seen : s.version, 5ms);
      seen = s.version;
    }
  }

  /// "" when the app reads `want` at `address`, else what differs.
  std::string Check(uint64_t address, const std::vector<std::byte>& want) {
    std::vector<std::byte> got(want.size());
    if (app_->D2H(got.data(), address, got.size()) != kOk) return "D2H of " + std::to_string(address) +
                                                                  " failed: " + app_->message();
    if (got == want) return "";
    size_t k = 0;
    while (got[k] == want[k]) ++k;
    return "buffer 0x" + ToHex(address) + " differs at byte " + std::to_string(k);
  }
  static std::string ToHex(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
    return b;
  }

  /// LaunchAndCheck for another thread: "" or what went wrong.
  std::string LaunchOnStream3() {
    VectorAddParams p{da_, db_, dc_, kN};
    if (app_->Launch(kVectorAdd, Grid((kN + 255) / 256, 256, kDynamicShared - 1024), Bytes(p), kStream) != kOk) {
      return "launch: " + app_->message();
    }
    if (app_->EventRecord(kEvent, kStream) != kOk) return "event record: " + app_->message();
    if (app_->EventSync(kEvent) != kOk) return "event sync: " + app_->message();
    std::vector<float> c(kN);
    if (app_->D2H(c.data(), dc_, kN * 4) != kOk) return "D2H c: " + app_->message();
    for (int i = 0; i < kN; ++i) {
      if (c[i] != a_[i] + b_[i]) return "c[" + std::to_string(i) + "] != a + b";
    }
    return "";
  }

  std::string dir_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<session::SessionServer> server_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<session::Session> session_;
  std::vector<float> a_, b_;
  uint64_t da_ = 0, db_ = 0, dc_ = 0;
  std::vector<uint64_t> extra_;
};

class FreshRestoreModeTest : public FreshRestoreTest, public ::testing::WithParamInterface<Mode> {};

TEST_P(FreshRestoreModeTest, NewSessionContinuesWithTheOldIds) {
  BuildVectorAddState();
  const std::string img = dir_ + "/img";
  Checkpoint(GetParam(), img);
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  // Before the restore B knows none of A's ids.
  EXPECT_NE(app_->StreamQuery(kStream), kOk);
  RestoreResult r;
  Status s = Restore(img, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.buffers, 3u);
  EXPECT_EQ(r.allocated, 3u);
  EXPECT_EQ(r.bytes, 3u * kN * 4);
  ExpectDeviceEqualsImage(img);
  LaunchAndCheck();
  // The stream kept its flags, the event its "no timing" flag.
  float ms = 0;
  EXPECT_NE(app_->EventElapsed(kEvent, kEvent, &ms), kOk) << "event 5 was recreated with timing";
  // And B's later state can be checkpointed again, as any session.
  Checkpoint(Mode::kStop, dir_ + "/img2");
}

INSTANTIATE_TEST_SUITE_P(Modes, FreshRestoreModeTest, ::testing::Values(Mode::kStop, Mode::kCow, Mode::kRecopy),
                         [](const auto& info) { return std::string(ModeName(info.param)); });

TEST_F(FreshRestoreTest, LaunchNeedsTheRestoredAttribute) {
  // The negative of the attribute check above: without the attribute the
  // sim refuses the launch, so the test can fail.
  ASSERT_EQ(app_->ModuleLoad(kModule, ReadFixture("vector_add.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(kModule, kVectorAdd, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();
  uint64_t d = 0;
  ASSERT_EQ(app_->Malloc(1024, &d), kOk);
  VectorAddParams p{d, d, d, 1};
  ASSERT_EQ(app_->Launch(kVectorAdd, Grid(1, 32, kDynamicShared - 1024), Bytes(p)), kOk);
  EXPECT_NE(app_->DeviceSync(), kOk);
}

// A texture object (linear memory) and a surface object (a 1D "array"),
// checkpointed with the session and recreated under the same handles by
// the fresh restore: B launches, with A's handles, a kernel that fetches
// through the texture and stores twice the value through the surface.
constexpr char kTexturePtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry texcopy(.param .u64 t, .param .u64 s, .param .u64 out, .param .u32 n)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<8>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [t];
  ld.param.u64 %rd2, [s];
  ld.param.u64 %rd3, [out];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p1, %r2, %r1;
  @%p1 bra DONE;
  tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [%rd1, {%r2}];
  mul.wide.u32 %rd4, %r2, 4;
  add.u64 %rd5, %rd3, %rd4;
  st.global.f32 [%rd5], %f1;
  add.f32 %f5, %f1, %f1;
  mov.b32 %r4, %f5;
  shl.b32 %r3, %r2, 2;
  sust.b.1d.b32.trap [%rd2, {%r3}], {%r4};
DONE:
  ret;
}
)";

wire::TextureDesc Linear1D(uint64_t base, uint32_t n, wire::ResourceKind kind) {
  wire::TextureDesc d{};
  d.base = base;
  d.pitch = n * 4;
  d.width = n;
  d.height = d.depth = 1;
  d.dims = 1;
  d.channels = 1;
  d.channel_bytes = 4;
  d.kind = wire::ChannelKind::kFloat;
  d.resource = kind;
  for (auto& m : d.address) m = wire::AddressMode::kClamp;
  return d;
}

TEST_F(FreshRestoreTest, TextureAndSurfaceObjectsComeBackUnderTheirHandles) {
  constexpr uint32_t kTexModule = 7, kTexCopy = 70;
  constexpr uint32_t n = 64;
  const auto ptx = std::as_bytes(std::span<const char>(kTexturePtx, sizeof kTexturePtx));
  ASSERT_EQ(app_->ModuleLoad(kTexModule, ptx), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(kTexModule, kTexCopy, "texcopy"), kOk) << app_->message();
  uint64_t src = 0, surf_mem = 0, out = 0;
  ASSERT_EQ(app_->Malloc(n * 4, &src), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &surf_mem), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &out), kOk);
  std::vector<float> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = 0.5f * static_cast<float>(i) - 3.0f;
  ASSERT_EQ(app_->H2D(src, v.data(), n * 4), kOk);
  // Creates an object; its handle (0 when refused).
  auto create = [&](wire::ApiId op, const wire::TextureDesc& d) -> uint64_t {
    ring::Reply r;
    if (app_->Send(op, wire::TextureObjectRequest{d}, true, 0, &r) != kOk) return 0;
    wire::ValueReply v{};
    std::memcpy(&v, r.data.data(), sizeof v);
    return static_cast<uint64_t>(v.value);
  };
  uint64_t tex = create(wire::op::kCreateTextureObject, Linear1D(src, n, wire::ResourceKind::kLinear));
  const uint64_t surf = create(wire::op::kCreateSurfaceObject, Linear1D(surf_mem, n, wire::ResourceKind::kArray));
  ASSERT_NE(tex, 0u) << app_->message();
  ASSERT_NE(surf, 0u) << app_->message();
  ASSERT_NE(surf, tex);
  // A third object, the first destroyed: A's live handles are not the
  // first ones a fresh sim hands out.
  const uint64_t third = create(wire::op::kCreateTextureObject, Linear1D(src, n, wire::ResourceKind::kLinear));
  ASSERT_NE(third, 0u);
  ASSERT_EQ(app_->Send(wire::op::kDestroyTextureObject, wire::TextureHandleRequest{tex}), kOk);
  tex = third;
  // Texels outside the session's buffers are refused.
  EXPECT_NE(app_->Send(wire::op::kCreateTextureObject,
                       wire::TextureObjectRequest{Linear1D(src + 4, n, wire::ResourceKind::kLinear)}),
            kOk);
  const std::string img = dir_ + "/textures";
  Checkpoint(Mode::kCow, img);
  Disconnect();

  StopServer();  // a restarted phosd: its sim hands out handles from 1 again
  StartServer();
  Connect();
  RestoreResult rr;
  Status s = Restore(img, &rr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  struct {
    uint64_t t, s, out;
    uint32_t n;
  } params{tex, surf, out, n};
  ASSERT_EQ(app_->Launch(kTexCopy, Grid(1, n), Bytes(params)), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  std::vector<float> got(n), twice(n);
  ASSERT_EQ(app_->D2H(got.data(), out, n * 4), kOk);
  ASSERT_EQ(app_->D2H(twice.data(), surf_mem, n * 4), kOk);
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], v[i]) << i;
    ASSERT_EQ(twice[i], 2 * v[i]) << i;
  }
  // A new object of B's does not take a restored handle.
  const uint64_t fresh = create(wire::op::kCreateTextureObject, Linear1D(src, n, wire::ResourceKind::kLinear));
  EXPECT_NE(fresh, 0u);
  EXPECT_NE(fresh, tex);
  EXPECT_NE(fresh, surf);
  // The handles are live objects of B's session: destroying them works once.
  EXPECT_EQ(app_->Send(wire::op::kDestroyTextureObject, wire::TextureHandleRequest{tex}), kOk);
  EXPECT_NE(app_->Send(wire::op::kDestroyTextureObject, wire::TextureHandleRequest{tex}), kOk);
  EXPECT_EQ(app_->Send(wire::op::kDestroySurfaceObject, wire::TextureHandleRequest{surf}), kOk);
}

// The device heap (daemon/session/device_heap.cc): A's kernel mallocs a
// block per thread and keeps the pointers in a buffer; after a checkpoint
// and a restore into a fresh phosd, B's kernel reads the blocks and frees
// them (the allocator's state came back inside the heap), and malloc works
// again after that.
constexpr char kHeapPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b64 func_retval0) malloc(.param .b64 n);
.extern .func free(.param .b64 p);
.visible .entry alloc(.param .u64 ptrs)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<8>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [ptrs];
  mov.u32 %r1, %tid.x;
  { .param .b64 n; .param .b64 r;
    st.param.b64 [n], 40;
    call.uni (r), malloc, (n);
    ld.param.b64 %rd2, [r]; }
  mul.wide.u32 %rd3, %r1, 8;
  add.u64 %rd4, %rd1, %rd3;
  st.global.u64 [%rd4], %rd2;
  setp.eq.u64 %p1, %rd2, 0;
  @%p1 bra DONE;
  add.u32 %r2, %r1, 1000;
  st.global.u32 [%rd2], %r2;
DONE:
  ret;
}
.visible .entry readfree(.param .u64 ptrs, .param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [ptrs];
  ld.param.u64 %rd5, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 8;
  add.u64 %rd4, %rd1, %rd3;
  ld.global.u64 %rd2, [%rd4];
  ld.global.u32 %r2, [%rd2];
  mul.wide.u32 %rd6, %r1, 4;
  add.u64 %rd7, %rd5, %rd6;
  st.global.u32 [%rd7], %r2;
  { .param .b64 p;
    st.param.b64 [p], %rd2;
    call.uni free, (p); }
  ret;
}
)";

TEST_F(FreshRestoreTest, DeviceHeapBlocksAndAllocatorComeBack) {
  constexpr uint32_t kHeapModule = 8, kAlloc = 80, kReadFree = 81;
  constexpr uint32_t n = 64;
  const auto ptx = std::as_bytes(std::span<const char>(kHeapPtx, sizeof kHeapPtx));
  ASSERT_EQ(app_->ModuleLoad(kHeapModule, ptx), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(kHeapModule, kAlloc, "alloc"), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(kHeapModule, kReadFree, "readfree"), kOk) << app_->message();
  // A 1 MiB heap, set before the first launch.
  ASSERT_EQ(app_->Send(wire::op::kDeviceSetLimit, wire::DeviceLimitRequest{wire::kLimitMallocHeapSize, 0, 1u << 20}), kOk) << app_->message();
  uint64_t ptrs = 0, out = 0;
  ASSERT_EQ(app_->Malloc(n * 8, &ptrs), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &out), kOk);
  ASSERT_EQ(app_->Launch(kAlloc, Grid(1, n), Bytes(ptrs)), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  // The heap exists now: its size can no longer change.
  EXPECT_NE(app_->Send(wire::op::kDeviceSetLimit, wire::DeviceLimitRequest{wire::kLimitMallocHeapSize, 0, 2u << 20}), kOk);
  std::vector<uint64_t> before(n);
  ASSERT_EQ(app_->D2H(before.data(), ptrs, n * 8), kOk);
  for (uint64_t p : before) ASSERT_NE(p, 0u);
  const std::string img = dir_ + "/heap";
  Checkpoint(Mode::kCow, img);
  Disconnect();
  StopServer();
  StartServer();
  Connect();
  RestoreResult rr;
  Status s = Restore(img, &rr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  struct {
    uint64_t ptrs, out;
  } params{ptrs, out};
  ASSERT_EQ(app_->Launch(kReadFree, Grid(1, n), Bytes(params)), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  std::vector<uint32_t> got(n);
  ASSERT_EQ(app_->D2H(got.data(), out, n * 4), kOk);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 1000 + i) << i;
  // The restored allocator hands out blocks again (and the frees above
  // were of live blocks: a double free would have failed the launch).
  ASSERT_EQ(app_->Launch(kAlloc, Grid(1, n), Bytes(ptrs)), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  std::vector<uint64_t> after(n);
  ASSERT_EQ(app_->D2H(after.data(), ptrs, n * 8), kOk);
  for (uint64_t p : after) ASSERT_NE(p, 0u);
}

TEST_F(FreshRestoreTest, GlobalsComeBackAtTheirAddressAfterAPhosdRestart) {
  // The PTX module first (as a runtime loads modules before the app's
  // mallocs): a restarted sim places its global where it was.
  ASSERT_EQ(app_->ModuleLoad(kPtxModule, PtxImage()), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(kPtxModule, kBump, "bump"), kOk) << app_->message();
  uint64_t counter = 0, bytes = 0;
  ASSERT_EQ(app_->GetGlobal(kPtxModule, "phos_counter", &counter, &bytes), kOk) << app_->message();
  ASSERT_EQ(bytes, 4u);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(app_->Launch(kBump, Grid(1, 1), {}), kOk);  // 7 -> 12
  BuildVectorAddState();
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  Disconnect();
  StopServer();

  StartServer();
  Connect();
  Status s = Restore(img);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectDeviceEqualsImage(img);
  uint32_t c = 0;
  ASSERT_EQ(app_->D2H(&c, counter, 4), kOk) << app_->message();
  EXPECT_EQ(c, 12u) << "the global's bytes were not restored";
  ASSERT_EQ(app_->Launch(kBump, Grid(1, 1), {}), kOk);
  ASSERT_EQ(app_->D2H(&c, counter, 4), kOk) << app_->message();
  EXPECT_EQ(c, 13u) << "function 11 does not bump the global at its old address";
  LaunchAndCheck();
}

TEST_F(FreshRestoreTest, GlobalPlacedElsewhereIsMovedBackToItsAddress) {
  // Same phosd: the sim's next-fit allocator puts the new session's copy of
  // the module's variables past the old ones; the restore reloads the module
  // with its variable block where the image has it (the app holds the
  // pointer). Before, this restore was refused ("would land at a different
  // address").
  const std::string img = dir_ + "/img";
  uint64_t counter = 0, bytes = 0, a_session = 0;
  ASSERT_NO_FATAL_FAILURE(CheckpointCounterAtTen(img, /*to_app=*/true, &counter, &a_session));

  Connect(a_session);
  // Without the move, this session's copy of the module would land elsewhere.
  ASSERT_EQ(app_->ModuleLoad(kPtxModule + 1, PtxImage()), kOk) << app_->message();
  uint64_t elsewhere = 0;
  ASSERT_EQ(app_->GetGlobal(kPtxModule + 1, "phos_counter", &elsewhere, &bytes), kOk) << app_->message();
  ASSERT_NE(elsewhere, counter) << "the test needs the sim to place a new copy elsewhere";
  Disconnect();
  Connect(a_session);

  Status s = Restore(img);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectDeviceEqualsImage(img);
  uint32_t c = 0;
  ASSERT_EQ(app_->D2H(&c, counter, 4), kOk) << app_->message();
  EXPECT_EQ(c, 10u) << "the global's bytes were not restored at its old address";
  ASSERT_EQ(app_->Launch(kBump, Grid(1, 1), {}), kOk);
  ASSERT_EQ(app_->D2H(&c, counter, 4), kOk) << app_->message();
  EXPECT_EQ(c, 11u) << "the restored kernel does not use the global at its old address";
  LaunchAndCheck();
}

// As on the cuda backend, where the driver places module variables: a
// variable whose address the app never held (libphos's symbol copies ask by
// name each time) comes back elsewhere with its bytes; one whose address
// the app took (cudaGetSymbolAddress) refuses the restore, naming it.
class FreshRestoreDriverPlacedTest : public FreshRestoreTest, public ::testing::WithParamInterface<bool> {};

TEST_P(FreshRestoreDriverPlacedTest, VariablesMoveOnlyWhenTheAppNeverHeldTheirAddress) {
  const bool to_app = GetParam();
  StopServer();
  StartServer(/*sim_places_module_variables=*/false);
  Connect();
  const std::string img = dir_ + "/img";
  uint64_t counter = 0, bytes = 0, a_session = 0;
  ASSERT_NO_FATAL_FAILURE(CheckpointCounterAtTen(img, to_app, &counter, &a_session));
  Connect(a_session);

  Status s = Restore(img);
  if (to_app) {
    ASSERT_FALSE(s.ok()) << "restored with the app's pointer to phos_counter gone stale";
    EXPECT_NE(s.message().find("holds that address"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("phos_counter"), std::string::npos) << s.ToString();
    return;
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  uint64_t now = 0;
  ASSERT_EQ(app_->GetGlobal(kPtxModule, "phos_counter", &now, &bytes, /*to_app=*/false), kOk) << app_->message();
  ASSERT_NE(now, counter) << "the test needs the variable placed elsewhere (the sim's next-fit allocator)";
  uint32_t c = 0;
  ASSERT_EQ(app_->D2H(&c, now, 4), kOk) << app_->message();
  EXPECT_EQ(c, 10u) << "the variable's bytes were not loaded at its new address";
  ASSERT_EQ(app_->Launch(kBump, Grid(1, 1), {}), kOk);
  ASSERT_EQ(app_->D2H(&c, now, 4), kOk) << app_->message();
  EXPECT_EQ(c, 11u) << "the restored kernel does not use the variable where it now is";
  LaunchAndCheck();
}

INSTANTIATE_TEST_SUITE_P(AddressToApp, FreshRestoreDriverPlacedTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? std::string("Held") : std::string("Private"); });

// The app's reserved range (cuMemAddressReserve) and the mappings in it
// (cuMemMap) come back at their addresses in a fresh session: a copy across
// the mappings reads the image's bytes, the range is reserved again (a new
// mapping goes in, a cudaMalloc stays out), and its mappings are still not
// cudaFree's.
TEST_F(FreshRestoreTest, AppReservedRangeAndMappingsComeBackAtTheirAddresses) {
  const uint64_t g = wire::kVmmGranularity;
  uint64_t base = 0;
  ASSERT_EQ(app_->AddressReserve(4 * g, 0, &base), kOk) << app_->message();
  ASSERT_EQ(app_->Map(base, g), kOk) << app_->message();
  ASSERT_EQ(app_->Map(base + g, g), kOk) << app_->message();
  std::vector<uint8_t> pattern(g);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_EQ(app_->H2D(base + g / 2, pattern.data(), g), kOk) << app_->message();  // across the boundary
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  Status s = Restore(img);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<uint8_t> got(g);
  ASSERT_EQ(app_->D2H(got.data(), base + g / 2, g), kOk) << app_->message();
  EXPECT_EQ(got, pattern);
  EXPECT_EQ(app_->Map(base + 2 * g, g), kOk) << app_->message();  // the range is reserved again
  EXPECT_EQ(app_->Map(base, g), WireStatus::kInvalidValue);      // and base is mapped
  EXPECT_EQ(app_->Free(base), WireStatus::kInvalidValue);        // a mapping, not a cudaMalloc buffer
  uint64_t other = 0;
  ASSERT_EQ(app_->Malloc(g, &other), kOk);
  EXPECT_TRUE(other + g <= base || other >= base + 4 * g) << std::hex << other;
  for (uint64_t at : {base, base + g, base + 2 * g}) EXPECT_EQ(app_->Unmap(at, g), kOk) << app_->message();
  EXPECT_EQ(app_->AddressFree(base, 4 * g), kOk) << app_->message();
}

// The one texture descriptor's mip chains and cube maps: the layout's span,
// the rules phosd checks (wire::CheckTextureDesc), and the image record
// carrying every field back.
TEST(TextureRecordTest, MipChainsAndCubeMapsAreCheckedAndRoundTrip) {
  wire::TextureDesc d{};
  d.base = 0x10000000;
  d.width = 16, d.height = 8, d.depth = 1, d.dims = 2;
  d.channels = 1, d.channel_bytes = 4, d.kind = wire::ChannelKind::kFloat, d.resource = wire::ResourceKind::kArray;
  d.flags = wire::kTextureNormalizedCoords;
  d.levels = 5, d.mip_linear = 1, d.min_level = 1, d.max_level = 3;
  const wire::MipLevel l0 = wire::MipLevelOf(d, 0), l4 = wire::MipLevelOf(d, 4);
  d.pitch = l0.pitch, d.slice_pitch = l0.slice_pitch;
  EXPECT_EQ(l0.pitch, 128u);  // 16 floats, rows 128 bytes apart
  EXPECT_EQ(l4.width, 1u);
  EXPECT_EQ(l4.height, 1u);
  EXPECT_EQ(l4.offset % 512, 0u);
  uint64_t span = 0;
  std::string why;
  ASSERT_TRUE(wire::CheckTextureDesc(d, false, &span, &why)) << why;
  EXPECT_EQ(span, l4.offset + l4.bytes);
  session::SessionState::TextureObject obj;
  obj.desc = d;
  image::v1::TextureObjectRecord rec;
  EncodeTextureObject(42, obj, &rec);
  wire::TextureDesc back{};
  ASSERT_TRUE(DecodeTextureObject(rec, &back).ok());
  EXPECT_EQ(std::memcmp(&back, &d, sizeof d), 0);
  auto refused = [&](wire::TextureDesc bad, const char* what) {
    std::string w;
    uint64_t sp = 0;
    EXPECT_FALSE(wire::CheckTextureDesc(bad, false, &sp, &w)) << what;
    return w;
  };
  wire::TextureDesc t = d;
  t.flags = 0;
  EXPECT_NE(refused(t, "unnormalized").find("unnormalized"), std::string::npos);
  t = d;
  t.max_level = 5;
  refused(t, "clamp past the chain");
  t = d;
  t.levels = 1;  // no chain, but mip filtering
  refused(t, "mip fields without levels");
  // Cube maps: square layered faces, 6 per cube; no linear filtering.
  wire::TextureDesc c = d;
  c.levels = c.mip_linear = c.min_level = c.max_level = 0;
  c.width = c.height = 8;
  c.flags = wire::kTextureLayered | wire::kTextureCubemap;
  c.layers = 12;
  c.pitch = 128;  // 8 floats, rows 128 bytes apart
  c.slice_pitch = c.pitch * 8;
  ASSERT_TRUE(wire::CheckTextureDesc(c, false, &span, &why)) << why;
  wire::TextureDesc cl = c;
  cl.flags |= wire::kTextureLinearFilter;
  EXPECT_NE(refused(cl, "linear cube").find("cube map"), std::string::npos);
  wire::TextureDesc odd = c;
  odd.layers = 8;
  refused(odd, "layers not a multiple of 6");
  wire::TextureDesc cube_mips = c;
  cube_mips.levels = 2;
  cube_mips.flags |= wire::kTextureNormalizedCoords;
  refused(cube_mips, "mip levels of a cube map");
}

// A session index whose buffer straddles the edge of a reserved range, or
// whose reserved ranges overlap, cannot be restored (reserve first, then
// map): corrupt, named.
TEST(SessionIndexTest, BufferAcrossAReservedRangesEdgeIsCorrupt) {
  image::v1::SessionIndex index;
  auto add = [](auto* field, uint64_t address, uint64_t bytes) {
    auto* r = field->Add();
    r->set_address(address);
    r->set_bytes(bytes);
  };
  add(index.mutable_reserved_ranges(), 0x10000000, 0x800000);
  add(index.mutable_buffers(), 0x10000000, 0x200000);  // inside
  add(index.mutable_buffers(), 0x20000000, 0x1000);    // outside
  SessionSnapshot snap;
  ASSERT_TRUE(DecodeSnapshot(index, &snap).ok());
  EXPECT_EQ(snap.reserved_ranges.size(), 1u);
  add(index.mutable_buffers(), 0x10700000, 0x200000);  // runs past the range's end
  Status s = DecodeSnapshot(index, &snap);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("straddles"), std::string::npos) << s.ToString();
  index.mutable_buffers()->RemoveLast();
  add(index.mutable_reserved_ranges(), 0x10400000, 0x800000);  // overlaps the first
  s = DecodeSnapshot(index, &snap);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
}

TEST_F(FreshRestoreTest, NonEmptySessionIsRefusedUnchanged) {
  BuildVectorAddState();
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  uint64_t mine = 0;
  ASSERT_EQ(app_->Malloc(4096, &mine), kOk);
  ASSERT_EQ(app_->Memset(mine, 0x42, 1, 4096), kOk);
  Status s = Restore(img);
  ASSERT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("not empty"), std::string::npos) << s.ToString();
  std::vector<uint8_t> got(4096);
  ASSERT_EQ(app_->D2H(got.data(), mine, 4096), kOk);
  for (uint8_t v : got) ASSERT_EQ(v, 0x42);
  EXPECT_NE(app_->StreamQuery(kStream), kOk) << "stream 3 was created by a refused restore";
}

TEST_F(FreshRestoreTest, CorruptImageIsRefusedBeforeTouchingTheSessionWithVerifyFirst) {
  BuildVectorAddState();
  const std::string img = dir_ + "/img", bad = dir_ + "/bad";
  Checkpoint(Mode::kStop, img);
  std::filesystem::copy(img, bad);
  {
    std::unique_ptr<image::ImageReader> reader;
    ASSERT_TRUE(image::ImageReader::Open(bad, {}, &reader).ok());
    const uint64_t off = reader->manifest().buffers(1).extent_offset() + 100;
    reader.reset();
    std::fstream f(bad + "/gpu.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(off));
    char x = 0;
    f.seekg(static_cast<std::streamoff>(off));
    f.read(&x, 1);
    x = static_cast<char>(x ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(off));
    f.write(&x, 1);
  }
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  // Verify::kFirst: every checksum before the session is touched (the
  // default, as loaded, is verified_restore_test's).
  RestoreOptions o;
  o.dir = bad;
  o.verify = Verify::kFirst;
  Progress progress;
  RestoreResult r;
  Status s = RestoreFresh(*session_, o, &progress, &r);
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("untouched"), std::string::npos) << s.ToString();
  EXPECT_NE(app_->StreamQuery(kStream), kOk);
  // Untouched = still empty: the good image restores into it.
  Status good = Restore(img);
  ASSERT_TRUE(good.ok()) << good.ToString();
  LaunchAndCheck();
}

// ---------------------------------------------------------------- concurrent fresh restore

class ConcurrentFreshRestoreTest : public FreshRestoreTest, public ::testing::WithParamInterface<Mode> {};

// B reads every buffer in random order the moment the control task returns
// and launches function 10 on stream 3 at a random point among the reads:
// each read sees the image's bytes, the launch computes a + b (its inputs
// waited for, or its twin checked its loads), and the loader (slowed down
// so that it cannot win every race) made some call wait in some run.
TEST_P(ConcurrentFreshRestoreTest, ReadsAndALaunchDuringTheLoaderSeeTheImage) {
  BuildVectorAddState();
  MakeExtraBuffers();
  const std::string img = dir_ + "/img";
  Checkpoint(GetParam(), img);
  const auto image = ReadImage(img);
  ASSERT_EQ(image.size(), extra_.size() + 3);
  uint64_t previous = session_->id();
  Disconnect();

  const unsigned seed = std::random_device{}();
  RecordProperty("seed", std::to_string(seed));
  std::mt19937 rng(seed);
  uint64_t absent_waits = 0;
  for (int run = 0; run < 3; ++run) {
    Connect(previous);
    previous = session_->id();
    std::vector<uint64_t> order;
    for (const auto& [addr, bytes] : image) order.push_back(addr);
    std::shuffle(order.begin(), order.end(), rng);
    const size_t launch_at = std::uniform_int_distribution<size_t>(0, order.size())(rng);
    Progress progress;
    std::vector<std::string> errors;
    std::thread app([&] {
      WaitForControlTask(progress);
      bool launched = false;
      for (size_t k = 0; k <= order.size(); ++k) {
        if (k == launch_at) {
          std::string e = LaunchOnStream3();
          if (!e.empty()) errors.push_back("launch: " + e);
          launched = true;
        }
        if (k == order.size()) break;
        if (launched && order[k] == dc_) continue;  // holds a + b now (checked)
        std::string e = Check(order[k], image.at(order[k]));
        if (!e.empty()) errors.push_back(e);
      }
    });
    ConcurrentRestoreHooks hooks;
    hooks.loaded = [](uint64_t) { std::this_thread::sleep_for(2ms); };
    RestoreResult rr;
    std::vector<uint64_t> loaded;
    Status s = RestoreConcurrent(img, &progress, &rr, hooks, &loaded);
    app.join();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(errors.empty()) << "run " << run << ": " << errors.front();
    EXPECT_TRUE(rr.concurrent);
    EXPECT_EQ(rr.buffers, image.size());
    EXPECT_EQ(rr.allocated, image.size());
    EXPECT_EQ(loaded.size(), image.size());
    EXPECT_GE(rr.total_us, rr.stall_us);
    EXPECT_EQ(rr.counters.restore_rollbacks, 0u);
    absent_waits += rr.counters.absent_waits;
    std::printf("run %d: launch after %zu of %zu reads; %llu absent waits, %llu twin launches, stall %llu us, total %llu us\n",
                run, launch_at, order.size(), static_cast<unsigned long long>(rr.counters.absent_waits),
                static_cast<unsigned long long>(rr.counters.twin_launches),
                static_cast<unsigned long long>(rr.stall_us), static_cast<unsigned long long>(rr.total_us));
    EXPECT_FALSE(EngineHook::Of(session_->hook())->installed()) << "the operation stayed installed";
    // Done: every buffer holds the image (c: a + b, the launch's result).
    for (const auto& [addr, bytes] : image) {
      if (addr != dc_) {
        EXPECT_EQ(Check(addr, bytes), "") << "after run " << run;
      }
    }
    ASSERT_EQ(LaunchOnStream3(), "");
    Disconnect();
  }
  EXPECT_GT(absent_waits, 0u) << "no call ever waited for an absent buffer";
}

// With nobody waiting, the loader follows the image's first-use order, then
// ascending addresses: the order the checkpoint recorded, and an order
// planted in a rewritten copy of the image.
TEST_P(ConcurrentFreshRestoreTest, LoaderFollowsTheImagesFirstUseOrder) {
  BuildVectorAddState();
  MakeExtraBuffers();
  const std::string img = dir_ + "/img", planted = dir_ + "/planted";
  Checkpoint(GetParam(), img);
  const std::vector<uint64_t> first_use = {extra_[9], dc_, extra_[2], extra_[20], da_, extra_[0]};
  ASSERT_TRUE(RewriteWithFirstUse(img, planted, first_use).ok());
  uint64_t previous = session_->id();
  Disconnect();

  for (const std::string& dir : {img, planted}) {
    Connect(previous);
    previous = session_->id();
    Progress progress;
    RestoreResult rr;
    std::vector<uint64_t> loaded;
    Status s = RestoreConcurrent(dir, &progress, &rr, {}, &loaded);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::vector<uint64_t> want = ExpectedLoadOrder(dir);
    EXPECT_EQ(loaded, want) << dir;
    if (dir == planted) {
      ASSERT_GE(loaded.size(), first_use.size());
      EXPECT_TRUE(std::equal(first_use.begin(), first_use.end(), loaded.begin())) << "planted order not followed";
    }
    EXPECT_EQ(rr.counters.absent_waits, 0u);
    ExpectDeviceEqualsImage(dir);
    LaunchAndCheck();
    Disconnect();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ConcurrentFreshRestoreTest, ::testing::Values(Mode::kStop, Mode::kCow),
                         [](const auto& info) { return std::string(ModeName(info.param)); });

// B exits while the loader runs: the restore ends with Unavailable, the
// session tears down (its buffers freed: the next session restores the
// image at the same addresses), nothing crashes or hangs.
TEST_F(FreshRestoreTest, ConcurrentRestoreEndsCleanlyWhenTheSessionEnds) {
  BuildVectorAddState();
  MakeExtraBuffers();
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  const size_t n = extra_.size() + 3;
  uint64_t previous = session_->id();
  Disconnect();

  Connect(previous);
  previous = session_->id();
  std::atomic<int> loaded{0};
  ConcurrentRestoreHooks hooks;
  hooks.loaded = [&](uint64_t) {
    loaded.fetch_add(1);
    std::this_thread::sleep_for(10ms);
  };
  Progress progress;
  RestoreResult rr;
  Status s;
  std::thread restore([&] { s = RestoreConcurrent(img, &progress, &rr, hooks, nullptr); });
  for (int i = 0; i < 2000 && loaded.load() < 3; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_GE(loaded.load(), 3);
  std::shared_ptr<session::Session> ending = session_;
  app_.reset();  // B exits
  restore.join();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_LT(loaded.load(), static_cast<int>(n));
  session_.reset();
  for (int i = 0; i < 500 && !ending->finished(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(ending->finished());

  Connect(previous);
  Status again = Restore(img);
  ASSERT_TRUE(again.ok()) << again.ToString();
  ExpectDeviceEqualsImage(img);
  LaunchAndCheck();
}

// Refusals of the concurrent variant leave the session as the stop-the-world
// ones do: a non-empty session unchanged, nothing installed.
TEST_F(FreshRestoreTest, ConcurrentRestoreIntoANonEmptySessionIsRefusedUnchanged) {
  BuildVectorAddState();
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  uint64_t mine = 0;
  ASSERT_EQ(app_->Malloc(4096, &mine), kOk);
  ASSERT_EQ(app_->Memset(mine, 0x42, 1, 4096), kOk);
  Progress progress;
  RestoreResult rr;
  Status s = RestoreConcurrent(img, &progress, &rr, {}, nullptr);
  ASSERT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("not empty"), std::string::npos) << s.ToString();
  EXPECT_FALSE(EngineHook::Of(session_->hook())->installed());
  std::vector<uint8_t> got(4096);
  ASSERT_EQ(app_->D2H(got.data(), mine, 4096), kOk);
  for (uint8_t v : got) ASSERT_EQ(v, 0x42);
  EXPECT_NE(app_->StreamQuery(kStream), kOk) << "stream 3 was created by a refused restore";
}

}  // namespace
}  // namespace phos::engine
