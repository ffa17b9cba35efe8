// Access sets end to end: a fake app (fake_app.h) loads nvcc's vector_add
// fatbin and an extern "C" PTX module into a real Daemon (sim backend),
// launches kernels and copies; a recording hook sees each call's access
// set, and ListSessions (what `phos ps` prints) shows the per-kind counts.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "fake_app.h"
#include "phos.grpc.pb.h"
#include "protocol/blas_spec.h"
#include "server/daemon.h"
#include "session/session_server.h"
#include "test_ptx.h"

namespace phos::session::testing {
namespace {

using namespace std::chrono_literals;
namespace op = wire::op;
constexpr WireStatus kOk = WireStatus::kSuccess;

struct Seen {
  wire::ApiId api{};
  AccessKind kind{};
  std::vector<AccessRange> ranges;
};

// Records the access set of every admitted call.
class RecordingHook : public AdmissionHook {
 public:
  struct Log {
    std::mutex mu;
    std::vector<Seen> calls;
  };
  explicit RecordingHook(std::shared_ptr<Log> log) : log_(std::move(log)) {}
  Status BeforeCall(const CallView& call) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->calls.push_back({call.api, call.kind, {call.ranges.begin(), call.ranges.end()}});
    return Status::Ok();
  }
  void AfterCall(const CallView&, const Status&) override {}

 private:
  std::shared_ptr<Log> log_;
};

std::vector<std::byte> ReadFixture(const std::string& name) {
  std::ifstream f(std::string(PHOS_TEST_APPS_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

wire::LaunchRequest Grid(uint32_t blocks, uint32_t threads) {
  wire::LaunchRequest g{};
  g.grid[0] = blocks;
  g.grid[1] = g.grid[2] = 1;
  g.block[0] = threads;
  g.block[1] = g.block[2] = 1;
  return g;
}

class AccessSetSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-access-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.socket_path = dir_ + "/phosd.sock";
    options_.backend.kind = backend::BackendKind::kSim;
    daemon_ = std::make_unique<server::Daemon>();
    ASSERT_TRUE(daemon_->Start(options_).ok());
    daemon_->session_server()->SetHookFactory(
        [log = log_](uint64_t) { return std::make_unique<RecordingHook>(log); });
    ASSERT_TRUE(FakeApp::Connect(SessionServer::DataSocketPath(options_.socket_path), &app_).ok());
  }
  void TearDown() override {
    app_.reset();
    daemon_.reset();
    std::filesystem::remove_all(dir_);
  }
  v1::SessionInfo OnlySession() {
    auto stub = v1::Phos::NewStub(
        grpc::CreateChannel("unix:" + options_.socket_path, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::ListSessionsReply reply;
    EXPECT_TRUE(stub->ListSessions(&ctx, v1::ListSessionsRequest(), &reply).ok());
    EXPECT_EQ(reply.sessions_size(), 1);
    return reply.sessions_size() ? reply.sessions(0) : v1::SessionInfo();
  }
  // `phos ps` against this daemon; its stdout.
  std::string RunPs() {
    const std::string cmd = std::string(PHOS_BIN) + " --socket " + options_.socket_path + " ps 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    EXPECT_NE(f, nullptr) << cmd;
    if (f == nullptr) return "";
    std::string out;
    char buf[512];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    EXPECT_EQ(pclose(f), 0) << out;
    return out;
  }
  std::vector<Seen> Calls(wire::ApiId api) {
    std::lock_guard<std::mutex> lock(log_->mu);
    std::vector<Seen> out;
    for (const auto& c : log_->calls)
      if (c.api == api) out.push_back(c);
    return out;
  }

  std::string dir_;
  server::DaemonOptions options_;
  std::unique_ptr<server::Daemon> daemon_;
  std::shared_ptr<RecordingHook::Log> log_ = std::make_shared<RecordingHook::Log>();
  std::unique_ptr<FakeApp> app_;
};

TEST_F(AccessSetSessionTest, LaunchesAndCopiesCarryAccessSetsAndPsCountsThem) {
  // nvcc's vector_add (typed signature, PTX present -> speculated).
  ASSERT_EQ(app_->ModuleLoad(1, ReadFixture("vector_add.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 10, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();
  // extern "C" PTX saxpy(x, y, a, n): every 8-byte parameter a candidate.
  const auto saxpy = std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
  ASSERT_EQ(app_->ModuleLoad(2, saxpy), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(2, 11, "saxpy"), kOk) << app_->message();

  const uint32_t n = 256;
  uint64_t da = 0, db = 0, dc = 0, unrelated = 0;
  ASSERT_EQ(app_->Malloc(n * 4, &da), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &db), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &dc), kOk);
  ASSERT_EQ(app_->Malloc(4096, &unrelated), kOk);
  std::vector<float> a(n), b(n);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.0f * static_cast<float>(i);
  }
  ASSERT_EQ(app_->H2D(da, a.data(), n * 4), kOk);                 // exact 1
  ASSERT_EQ(app_->H2D(db, b.data(), n * 4), kOk);                 // exact 2
  struct {
    uint64_t a, b, c;
    int32_t n;
  } va{da, db, dc, static_cast<int32_t>(n)};
  ASSERT_EQ(app_->Launch(10, Grid(1, n), std::as_bytes(std::span(&va, 1))), kOk);  // speculated 1
  struct {
    uint64_t x, y;
    float a;
    uint32_t n;
  } sx{dc, da, 2.0f, n};
  ASSERT_EQ(app_->Launch(11, Grid(2, 128), std::as_bytes(std::span(&sx, 1))), kOk);  // speculated 2
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  std::vector<float> out(n);
  ASSERT_EQ(app_->D2H(out.data(), da, n * 4), kOk);               // exact 3
  for (uint32_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], 2.0f * (a[i] + b[i]) + a[i]) << i;
  ASSERT_EQ(app_->Memset(unrelated, 0, 1, 4096), kOk);             // exact 4
  ASSERT_EQ(app_->Free(unrelated), kOk);                           // exact 5

  auto launches = Calls(op::kLaunchKernel);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].kind, AccessKind::kSpeculated);
  ASSERT_EQ(launches[0].ranges.size(), 3u);
  EXPECT_EQ(launches[0].ranges[0].ptr, da);
  EXPECT_EQ(launches[0].ranges[0].bytes, n * 4u);
  EXPECT_FALSE(launches[0].ranges[0].write);
  EXPECT_EQ(launches[0].ranges[1].ptr, db);
  EXPECT_FALSE(launches[0].ranges[1].write);
  EXPECT_EQ(launches[0].ranges[2].ptr, dc);
  EXPECT_TRUE(launches[0].ranges[2].write);
  // extern "C": both pointers are read+write candidates; and its module
  // defines a variable (phos_counter), which the session recorded when the
  // module loaded and which its kernels may write by name.
  uint64_t counter = 0, counter_bytes = 0;
  ASSERT_EQ(app_->GetGlobal(2, "phos_counter", &counter, &counter_bytes), kOk) << app_->message();
  EXPECT_EQ(launches[1].kind, AccessKind::kSpeculated);
  ASSERT_EQ(launches[1].ranges.size(), 3u);
  EXPECT_EQ(launches[1].ranges[0].ptr, dc);
  EXPECT_TRUE(launches[1].ranges[0].write);
  EXPECT_EQ(launches[1].ranges[1].ptr, da);
  EXPECT_TRUE(launches[1].ranges[1].write);
  EXPECT_EQ(launches[1].ranges[2].ptr, counter);
  EXPECT_TRUE(launches[1].ranges[2].write);
  auto h2d = Calls(op::kMemcpy);
  ASSERT_GE(h2d.size(), 1u);
  EXPECT_EQ(h2d[0].kind, AccessKind::kExact);
  ASSERT_EQ(h2d[0].ranges.size(), 1u);
  EXPECT_EQ(h2d[0].ranges[0].ptr, da);
  EXPECT_EQ(h2d[0].ranges[0].bytes, n * 4u);
  EXPECT_TRUE(h2d[0].ranges[0].write);

  const v1::SessionInfo info = OnlySession();
  EXPECT_EQ(info.calls_exact(), 5u);
  EXPECT_EQ(info.calls_speculated(), 2u);
  EXPECT_EQ(info.calls_unvalidatable(), 0u);
  EXPECT_EQ(info.counters().at("calls_unknown_access"), 0u);

  // `phos ps` prints them compactly: exact/speculated/unvalidatable.
  const std::string ps = RunPs();
  EXPECT_NE(ps.find("CALLS(EX/SPEC/UNVAL)"), std::string::npos) << ps;
  EXPECT_NE(ps.find(" 5/2/0 "), std::string::npos) << ps;
}

// A kernel that may write global memory in a way its twin cannot check (a
// tensor-map copy) is unvalidatable from its module's load: its launches
// count as such, and `phos ps` names it with the reason. Its neighbour in
// the same module stays speculated. (The sim refuses the tensor copy at
// launch, by name: the launch is admitted and counted, then fails.)
TEST_F(AccessSetSessionTest, AKernelWhoseWritesItsTwinCannotCheckIsUnvalidatableWithTheReason) {
  static const char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry maybe_tensor(.param .u64 out, .param .u32 use_tma)
{
  .shared .align 128 .b8 tile[256];
  .reg .pred %p<2>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r3, [use_tma];
  cvta.to.global.u64 %rd2, %rd1;
  setp.eq.u32 %p1, %r3, 0;
  @%p1 bra $L_plain;
  mov.u32 %r1, 0;
  mov.u32 %r2, tile;
  cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%rd1, {%r1}], [%r2];
$L_plain:
  mov.u32 %r1, 7;
  st.global.u32 [%rd2], %r1;
  ret;
}
.visible .entry plain_store(.param .u64 out)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, 9;
  st.global.u32 [%rd2+4], %r1;
  ret;
}
)";
  ASSERT_EQ(app_->ModuleLoad(1, std::as_bytes(std::span<const char>(kPtx, sizeof kPtx))), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 10, "maybe_tensor"), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 11, "plain_store"), kOk) << app_->message();
  uint64_t d = 0;
  ASSERT_EQ(app_->Malloc(8, &d), kOk);
  struct {
    uint64_t out;
    uint32_t use_tma;
  } mt{d, 0};
  ASSERT_EQ(app_->Launch(11, Grid(1, 1), std::as_bytes(std::span(&d, 1))), kOk) << app_->message();
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  uint32_t out[2] = {};
  ASSERT_EQ(app_->D2H(out, d, 8), kOk);
  EXPECT_EQ(out[1], 9u);
  ASSERT_EQ(app_->Launch(10, Grid(1, 1), std::as_bytes(std::span(&mt, 1))), kOk) << app_->message();
  ASSERT_NE(app_->DeviceSync(), kOk);
  EXPECT_NE(app_->message().find("tensor maps"), std::string::npos) << app_->message();

  auto launches = Calls(op::kLaunchKernel);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].kind, AccessKind::kSpeculated);
  EXPECT_EQ(launches[1].kind, AccessKind::kUnvalidatable);
  ASSERT_EQ(launches[1].ranges.size(), 1u);  // still speculated from its parameters
  EXPECT_EQ(launches[1].ranges[0].ptr, d);

  const v1::SessionInfo info = OnlySession();
  EXPECT_EQ(info.calls_speculated(), 1u);
  EXPECT_EQ(info.calls_unvalidatable(), 1u);
  ASSERT_EQ(info.unvalidatable_kernels_size(), 1);
  EXPECT_EQ(info.unvalidatable_kernels(0).kernel(), "maybe_tensor");
  EXPECT_NE(info.unvalidatable_kernels(0).reason().find("cp.async.bulk.tensor"), std::string::npos)
      << info.unvalidatable_kernels(0).reason();
  EXPECT_EQ(info.unvalidatable_kernels_not_listed(), 0u);
  const std::string ps = RunPs();
  EXPECT_NE(ps.find("Unvalidatable kernels"), std::string::npos) << ps;
  EXPECT_NE(ps.find("maybe_tensor: its twin cannot check `cp.async.bulk.tensor"), std::string::npos) << ps;
}

// docs/interposer.md "cuBLAS and cuBLASLt": a library call's access set
// comes from its specification — exact ranges, no speculation — and counts
// as exact in `phos ps`; a pointer-array batch is unknown.
TEST_F(AccessSetSessionTest, CublasCallsCarryExactAccessSetsFromTheirSpecification) {
  const int m = 8, n = 6, k = 4, ldc = 10;
  uint64_t da = 0, db = 0, dc = 0, arrays = 0;
  ASSERT_EQ(app_->Malloc(m * k * 4, &da), kOk);
  ASSERT_EQ(app_->Malloc(k * n * 4, &db), kOk);
  ASSERT_EQ(app_->Malloc(ldc * n * 4, &dc), kOk);
  std::vector<float> ones(ldc * n, 1.0f);
  ASSERT_EQ(app_->H2D(da, ones.data(), m * k * 4), kOk);         // exact 1
  ASSERT_EQ(app_->H2D(db, ones.data(), k * n * 4), kOk);         // exact 2
  ASSERT_EQ(app_->H2D(dc, ones.data(), ldc * n * 4), kOk);       // exact 3
  wire::BlasRequest r{};
  r.type_a = r.type_b = r.type_c = r.scalar_type = wire::kCudaR32F;
  r.compute = 68;
  r.m = m;
  r.n = n;
  r.k = k;
  r.batch = 1;
  r.a = da;
  r.b = db;
  r.c = dc;
  r.lda = m;
  r.ldb = k;
  r.ldc = ldc;
  const float alpha = 2.0f, beta = 1.0f;
  std::memcpy(r.alpha, &alpha, 4);
  std::memcpy(r.beta, &beta, 4);
  ASSERT_EQ(app_->Send(op::kBlasGemm, r), kOk) << app_->message();  // exact 4
  std::vector<float> c(ldc * n);
  ASSERT_EQ(app_->D2H(c.data(), dc, ldc * n * 4), kOk);           // exact 5
  EXPECT_FLOAT_EQ(c[0], 2.0f * k + 1.0f);
  EXPECT_FLOAT_EQ(c[m], 1.0f);  // the gap between columns is not written
  // A pointer-array batch names its matrices in device memory: its access
  // set is unknown (counted so), the arrays themselves are read.
  ASSERT_EQ(app_->Malloc(3 * 8, &arrays), kOk);
  ASSERT_EQ(app_->H2D(arrays, &da, 8), kOk);                       // exact 6
  ASSERT_EQ(app_->H2D(arrays + 8, &db, 8), kOk);                   // exact 7
  ASSERT_EQ(app_->H2D(arrays + 16, &dc, 8), kOk);                  // exact 8
  wire::BlasRequest batched = r;
  batched.a = arrays;
  batched.b = arrays + 8;
  batched.c = arrays + 16;
  ASSERT_EQ(app_->Send(op::kBlasGemmBatched, batched), kOk) << app_->message();  // unknown 1
  ASSERT_EQ(app_->D2H(c.data(), dc, ldc * n * 4), kOk);           // exact 9
  EXPECT_FLOAT_EQ(c[0], 2.0f * k + (2.0f * k + 1.0f));
  auto batches = Calls(op::kBlasGemmBatched);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].kind, AccessKind::kUnknown);

  auto gemms = Calls(op::kBlasGemm);
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0].kind, AccessKind::kExact);
  ASSERT_EQ(gemms[0].ranges.size(), 3u);
  EXPECT_EQ(gemms[0].ranges[0].ptr, da);
  EXPECT_EQ(gemms[0].ranges[0].bytes, m * k * 4u);
  EXPECT_FALSE(gemms[0].ranges[0].write);
  EXPECT_EQ(gemms[0].ranges[1].ptr, db);
  EXPECT_FALSE(gemms[0].ranges[1].write);
  EXPECT_EQ(gemms[0].ranges[2].ptr, dc);
  EXPECT_EQ(gemms[0].ranges[2].bytes, ((n - 1) * ldc + m) * 4u);  // first to last element of C
  EXPECT_TRUE(gemms[0].ranges[2].write);

  const v1::SessionInfo info = OnlySession();
  EXPECT_EQ(info.calls_exact(), 9u);
  EXPECT_EQ(info.calls_speculated(), 0u);
  EXPECT_EQ(info.counters().at("calls_unknown_access"), 1u);
}

}  // namespace
}  // namespace phos::session::testing
