// End to end: phosd (sim backend) + `phos run` + libphos.so + the CUDA test
// programs of tests/apps. Each program checks its own results against a CPU
// reference and prints "<name>: checksum ... OK".
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "harness.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using phos::testing::Child;
using phos::testing::Clock;

bool Exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

size_t Count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

class Daemon {
 public:
  explicit Daemon(const std::string& dir, const std::vector<std::string>& extra = {})
      : socket_(dir + "/phosd.sock") {
    std::vector<std::string> argv = {PHOS_BIN, "daemon", "--backend", "sim", "--socket", socket_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = Child::Start(argv);
  }
  ~Daemon() { Stop(); }
  const std::string& socket() const { return socket_; }
  // Waits until the data socket accepts a connection.
  bool WaitReady(std::chrono::milliseconds limit) { return phos::testing::WaitForDataSocket(socket_, limit); }
  void Kill() {
    if (child_.pid > 0) {
      kill(child_.pid, SIGKILL);
      child_.Wait(std::chrono::milliseconds(5000));
    }
  }
  void Stop() {
    if (child_.pid > 0) {
      kill(child_.pid, SIGTERM);
      if (child_.Wait(std::chrono::milliseconds(10000)) == -1000) ADD_FAILURE() << "phosd did not stop on SIGTERM";
    }
  }
  std::string log() const { return child_.output; }

 private:
  std::string socket_;
  Child child_;
};

class IntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos_integ_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The programs' JIT PTX store (docs/interposer.md "JIT-compiled kernels
    // keep their PTX") in the test's directory, not the user's ~/.cache.
    setenv("PHOS_JIT_PTX_CACHE", (dir_ + "/jit-ptx").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("PHOS_JIT_PTX_CACHE");
    std::system(("rm -rf " + dir_).c_str());
  }

  Child RunUnderPhos(const std::string& socket, const std::string& program) {
    return Child::Start({PHOS_BIN, "--socket", socket, "run", "--lib", PHOS_LIB_PATH, "--", program});
  }

  std::string dir_;
};

std::vector<std::string> Apps() {
  std::vector<std::string> apps;
  std::stringstream ss(PHOS_TEST_APP_LIST);
  std::string a;
  while (std::getline(ss, a, ',')) apps.push_back(a);
  return apps;
}

TEST_F(IntegrationTest, EveryTestAppPassesUnderPhosRun) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  for (const std::string& app : Apps()) {
    SCOPED_TRACE(app);
    const std::string path = std::string(PHOS_APPS_DIR) + "/" + app;
    ASSERT_TRUE(Exists(path)) << path;
    Child c = RunUnderPhos(d.socket(), path);
    const int rc = c.Wait(std::chrono::seconds(120));
    EXPECT_EQ(rc, 0) << c.output;
    EXPECT_NE(c.output.find(app + ": checksum 0x"), std::string::npos) << c.output;
    EXPECT_NE(c.output.find(" OK\n"), std::string::npos) << c.output;
    EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
  }
}

TEST_F(IntegrationTest, UnsupportedApiReturnsNotSupportedAndLogsOnce) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/unsupported_api");
  const int rc = c.Wait(std::chrono::seconds(60));
  EXPECT_EQ(rc, 0) << c.output;
  EXPECT_NE(c.output.find("unsupported_api: 801 801"), std::string::npos) << c.output;
  EXPECT_EQ(Count(c.output, "phos: cudaMallocManaged: managed memory is not offered by phos"), 1u) << c.output;
  EXPECT_NE(c.output.find("unsupported_api: ipc 801 801"), std::string::npos) << c.output;
  EXPECT_EQ(Count(c.output, "phos: cudaIpcGetEventHandle is not supported by phos yet"), 1u) << c.output;
  EXPECT_NE(c.output.find("unsupported_api: OK"), std::string::npos) << c.output;
}

TEST_F(IntegrationTest, DaemonKilledMidRunGivesAnErrorNotAHang) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/daemon_loss");
  ASSERT_TRUE(c.ReadUntil("daemon_loss: running", std::chrono::seconds(60))) << c.output;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto killed = Clock::now();
  d.Kill();
  const int rc = c.Wait(std::chrono::seconds(30));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  EXPECT_EQ(rc, 3) << c.output;
  EXPECT_NE(c.output.find("daemon_loss: error cudaErrorDevicesUnavailable"), std::string::npos) << c.output;
  EXPECT_EQ(Count(c.output, "phos: phosd is unavailable at"), 1u) << c.output;
  EXPECT_LT(took, 10000) << "the app took " << took << " ms to notice phosd was gone";
}

TEST_F(IntegrationTest, NoDaemonGivesDevicesUnavailableOnce) {
  Child c = RunUnderPhos(dir_ + "/absent.sock", std::string(PHOS_APPS_DIR) + "/vector_add");
  const int rc = c.Wait(std::chrono::seconds(30));
  EXPECT_EQ(rc, 2) << c.output;  // tests/apps/common.h: 2 = CUDA error
  EXPECT_EQ(Count(c.output, "phos: phosd is unavailable at " + dir_ + "/absent.sock.data"), 1u) << c.output;
}

// nvcc's default build links the CUDA runtime statically; that runtime
// runs over phos's driver API through the export tables libphos.so serves
// (docs/interposer.md "Export tables"), with the results of the shared
// build, and says nothing about unsupported calls or tables.
TEST_F(IntegrationTest, EveryTestAppBuiltWithTheStaticRuntimeMatchesTheSharedBuild) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  for (const std::string& app : Apps()) {
    SCOPED_TRACE(app);
    std::string checksum[2];
    for (int statically = 0; statically < 2; ++statically) {
      const std::string path = std::string(PHOS_APPS_DIR) + "/" + app + (statically ? "_static" : "");
      ASSERT_TRUE(Exists(path)) << path;
      Child c = RunUnderPhos(d.socket(), path);
      EXPECT_EQ(c.Wait(std::chrono::seconds(120)), 0) << c.output;
      const size_t at = c.output.find(app + ": checksum 0x");
      ASSERT_NE(at, std::string::npos) << c.output;
      checksum[statically] = c.output.substr(at, c.output.find('\n', at) - at);
      EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
      EXPECT_EQ(c.output.find("not provided by phos"), std::string::npos) << c.output;
    }
    EXPECT_EQ(checksum[1], checksum[0]);
    EXPECT_NE(checksum[1].find(" OK"), std::string::npos) << checksum[1];
  }
}

// tests/gpu's export-table tracer (libphos_export_trace.so, for learning
// which private-table slots a library calls on a GPU), against phos's own
// tables: the statically linked runtime of vector_add_static runs under it
// with the same checksum, every table phos serves is handed out (the two
// the runtime's integrity check hashes as they are, the others as traced
// copies), and the slots it calls through the copies are logged and counted.
TEST_F(IntegrationTest, ExportTableTracerLogsTheSlotsTheStaticRuntimeCalls) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  const std::string program = std::string(PHOS_APPS_DIR) + "/vector_add_static";
  Child plain = RunUnderPhos(d.socket(), program);
  ASSERT_EQ(plain.Wait(std::chrono::seconds(60)), 0) << plain.output;
  const std::string trace = dir_ + "/export-trace.txt";
  Child traced = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", program},
                              {"LD_PRELOAD=" PHOS_EXPORT_TRACE_LIB, "PHOS_EXPORT_TRACE=" + trace});
  ASSERT_EQ(traced.Wait(std::chrono::seconds(60)), 0) << traced.output;
  const size_t at = plain.output.find("vector_add: checksum 0x");
  ASSERT_NE(at, std::string::npos) << plain.output;
  const std::string checksum = plain.output.substr(at, plain.output.find('\n', at) - at);
  EXPECT_NE(traced.output.find(checksum), std::string::npos) << traced.output;
  std::ifstream in(trace);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("table 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 at "), std::string::npos) << log;
  EXPECT_NE(log.find("handed out as it is (integrity-checked)"), std::string::npos) << log;
  // CONTEXT_LOCAL_STORAGE (no size word) and TOOLS_RUNTIME_CALLBACK_HOOKS
  // (sized): copied, and their slots called through the thunks.
  EXPECT_NE(log.find("table c693336e-1121-df11-a8c3-68f355d89593 at "), std::string::npos) << log;
  EXPECT_NE(log.find("table a094798c-2e74-2e74-93f2-0800200c0a66 at "), std::string::npos) << log;
  EXPECT_NE(log.find("export-trace: call c693336e-1121-df11-a8c3-68f355d89593[2]("), std::string::npos) << log;
  EXPECT_NE(log.find("export-trace: summary c693336e-1121-df11-a8c3-68f355d89593[2] called "), std::string::npos)
      << log;
  EXPECT_NE(log.find("export-trace: summary a094798c-2e74-2e74-93f2-0800200c0a66[2] called 1 times"),
            std::string::npos)
      << log;
}

// Stripped of its symbols, nvcc's default build runs too (phos run no
// longer inspects how a program links the runtime).
TEST_F(IntegrationTest, StrippedStaticRuntimeProgramRuns) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/vector_add_static_stripped");
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
  EXPECT_NE(c.output.find("vector_add: checksum 0x"), std::string::npos) << c.output;
}

// The static runtime of another release (13.2, PyPI's nvidia-cuda-runtime
// wheel; the toolkit here is 13.0): its embedded runtime asks for the same
// private driver tables and runs over phos's driver API.
TEST_F(IntegrationTest, StaticRuntime13_2RunsOverPhos) {
  const std::string program = PHOS_RUNTIME_13_2_PROGRAM;
  ASSERT_FALSE(program.empty()) << "no CUDA runtime 13.2 in " << PHOS_CUDART_13_2_VENV
                                << ": run scripts/setup.sh (it installs PyPI's nvidia-cuda-runtime==13.2.86 there), "
                                   "then re-run cmake";
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), program);
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
  EXPECT_NE(c.output.find("runtime_version: runtime 13020 "), std::string::npos) << c.output;
  EXPECT_NE(c.output.find(": no error, 0 wrong"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
}

// A driver-API program with nvcc's link-stub .nv_fatbin but no runtime was
// refused as "statically linked" (a false positive): it runs.
TEST_F(IntegrationTest, DriverOnlyProgramWithALinkStubFatbinRuns) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/driver_only");
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
  EXPECT_NE(c.output.find("driver_only: OK (NVIDIA H100"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("statically"), std::string::npos) << c.output;
}

// NVRTC + nvJitLink produce SASS-only cubins, which the sim cannot run:
// phos run preloads phos's JIT shims, which give each cubin the PTX of the
// same code (nvJitLink: the PTX input, or an LTO link again with -ptx;
// NVRTC: the program compiled again for the virtual architecture).
TEST_F(IntegrationTest, JitLinkedKernelsRunWithTheirPtx) {
  const std::string program = std::string(PHOS_INTEGRATION_DIR) + "/jit_link";
  if (access(program.c_str(), X_OK) != 0) GTEST_SKIP() << "skipped: " << program << " not built (no nvJitLink/NVRTC)";
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), program);
  EXPECT_EQ(c.Wait(std::chrono::seconds(120)), 0) << c.output;
  EXPECT_NE(c.output.find("jit_link: OK (ptx, lto, sass)"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("SASS only"), std::string::npos) << c.output;
}

// Where the shim cannot find the real nvJitLink, the program's link fails
// with nvJitLink's own error and phos says which library is missing and how
// to name it — it does not pretend to link.
TEST_F(IntegrationTest, JitLinkWithoutTheRealLibraryFailsByName) {
  const std::string program = std::string(PHOS_INTEGRATION_DIR) + "/jit_link";
  if (access(program.c_str(), X_OK) != 0) GTEST_SKIP() << "skipped: " << program << " not built (no nvJitLink/NVRTC)";
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  setenv("PHOS_NVJITLINK", (dir_ + "/no-such-libnvJitLink.so.13").c_str(), 1);
  Child c = RunUnderPhos(d.socket(), program);
  unsetenv("PHOS_NVJITLINK");
  EXPECT_EQ(c.Wait(std::chrono::seconds(120)), 1) << c.output;
  EXPECT_NE(c.output.find("jit_link: nvJitLinkCreate failed (6)"), std::string::npos) << c.output;  // INTERNAL
  EXPECT_NE(c.output.find("set PHOS_NVJITLINK="), std::string::npos) << c.output;
}

TEST_F(IntegrationTest, UnknownCommandIsReported) {
  Child c = Child::Start({PHOS_BIN, "run", "--", "phos-no-such-program-xyz"});
  EXPECT_EQ(c.Wait(std::chrono::seconds(30)), 127) << c.output;
  EXPECT_NE(c.output.find("command not found"), std::string::npos) << c.output;
}

}  // namespace

namespace {

TEST_F(IntegrationTest, SymbolsAndPtxOnlyParameterLayout) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/symbols");
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
  EXPECT_NE(c.output.find("symbols: OK"), std::string::npos) << c.output;
}

}  // namespace

namespace {

TEST_F(IntegrationTest, RuntimeApiCallsBeyondTheApps) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/runtime_api");
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
  EXPECT_NE(c.output.find("runtime_api: OK"), std::string::npos) << c.output;
  // The program walked every cudaDeviceAttr of the headers; it fails at the first that does not answer.
  EXPECT_NE(c.output.find("device attributes answered"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("a 32000-byte kernel parameter arrived whole"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("runtime_api: cudaLaunchKernelEx OK"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("runtime_api: cudaLibrary OK"), std::string::npos) << c.output;
  // grid.sync() across blocks, through cudaLaunchCooperativeKernel and the launch attribute.
  EXPECT_NE(c.output.find("runtime_api: cooperative launch OK"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
}

}  // namespace

namespace {

std::string ErrorPaths() { return std::string(PHOS_INTEGRATION_DIR) + "/error_paths"; }

// `phos ps --json` against the daemon at `socket`.
std::string PsJson(const std::string& socket) {
  Child c = Child::Start({PHOS_BIN, "--socket", socket, "ps", "--json"});
  c.Wait(std::chrono::seconds(20));
  return c.output;
}

// A kernel with assert() runs on the sim while its asserts hold; a failed
// assert is cudaErrorAssert (sticky), and phosd keeps serving.
TEST_F(IntegrationTest, DeviceAssertRunsAndFailsAsCuda) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  // PHOS_TRACE_ERRORS=1: libphos.so prints each failed call's reason.
  Child c = Child::Start({"/usr/bin/env", "PHOS_TRACE_ERRORS=1", PHOS_BIN, "--socket", d.socket(), "run", "--lib",
                          PHOS_LIB_PATH, "--", ErrorPaths(), "assert"});
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("error_paths: assert OK"), std::string::npos) << c.output;
  // The reason names the assertion the device would print.
  EXPECT_NE(c.output.find("Assertion `in[i] >= 0` failed"), std::string::npos) << c.output;
  // And the device printed it as CUDA does (its printf FIFO, at the
  // synchronization): element 617 is block 2, thread 105.
  EXPECT_NE(c.output.find(": block: [2,0,0], thread: [105,0,0] Assertion `in[i] >= 0` failed.\n"), std::string::npos)
      << c.output;
  Child v = RunUnderPhos(d.socket(), std::string(PHOS_APPS_DIR) + "/vector_add");
  EXPECT_EQ(v.Wait(std::chrono::seconds(60)), 0) << v.output;
}

// Device printf reaches the app's stdout at the synchronizing call, in order
// with what the app printed itself; the kernel calls through a table of
// function pointers its module's initializer filled.
TEST_F(IntegrationTest, DevicePrintfReachesTheAppsStdout) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", ErrorPaths(), "printf"});
  ASSERT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output << d.log();
  const size_t before = c.output.find("host: before\n"), after = c.output.find("host: after\n");
  ASSERT_NE(before, std::string::npos) << c.output;
  ASSERT_NE(after, std::string::npos) << c.output;
  for (const char* line : {"kernel 0: 101 even 0.00\n", "kernel 1: 1010 odd 0.25\n", "kernel 2: 103 even 0.50\n",
                           "kernel 3: 1030 odd 0.75\n"}) {
    const size_t at = c.output.find(line);
    ASSERT_NE(at, std::string::npos) << line << " missing from:\n" << c.output;
    EXPECT_GT(at, before) << c.output;
    EXPECT_LT(at, after) << c.output;
  }
  EXPECT_NE(c.output.find("error_paths: printf OK"), std::string::npos) << c.output;
}

// cudaLimitPrintfFifoSize reaches phosd: 64 lines of about 25 bytes do not
// fit a 256-byte FIFO; some arrive whole, the rest are dropped.
TEST_F(IntegrationTest, DevicePrintfFifoSizeDropsWhatDoesNotFit) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", ErrorPaths(), "printf-fifo"});
  ASSERT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output << d.log();
  const size_t lines = Count(c.output, "kernel ");
  EXPECT_GT(lines, 0u) << c.output;
  EXPECT_LT(lines, 64u) << c.output;
  EXPECT_LE(lines * 20, 256u) << c.output;  // each line is at least 20 bytes
  EXPECT_NE(c.output.find("error_paths: printf-fifo OK"), std::string::npos) << c.output;
}

TEST_F(IntegrationTest, ErrorPathsGiveCudaErrors) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", ErrorPaths(), "errors"});
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
  EXPECT_NE(c.output.find("error_paths: OK"), std::string::npos) << c.output;
  // The faulting session did not take the daemon down: another app still runs.
  Child v = RunUnderPhos(d.socket(), std::string(PHOS_APPS_DIR) + "/vector_add");
  EXPECT_EQ(v.Wait(std::chrono::seconds(60)), 0) << v.output;
}

// Two apps at once: a third app runs correctly beside them, and one app
// cannot read, write or free the other's buffer.
TEST_F(IntegrationTest, ConcurrentAppsAreIsolated) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  const std::string go = dir_ + "/go";
  Child owner = Child::Start(
      {PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", ErrorPaths(), "owner", "16", go});
  ASSERT_TRUE(owner.ReadUntil(" ready\n", std::chrono::seconds(60))) << owner.output;
  const size_t at = owner.output.find("owner: ptr ");
  ASSERT_NE(at, std::string::npos) << owner.output;
  const std::string ptr = owner.output.substr(at + 11, owner.output.find(' ', at + 11) - (at + 11));
  Child app = RunUnderPhos(d.socket(), std::string(PHOS_APPS_DIR) + "/saxpy_loop");
  Child intruder = Child::Start(
      {PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", ErrorPaths(), "intruder", ptr});
  EXPECT_EQ(intruder.Wait(std::chrono::seconds(60)), 0) << intruder.output;
  EXPECT_NE(intruder.output.find("intruder: refused"), std::string::npos) << intruder.output;
  EXPECT_EQ(app.Wait(std::chrono::seconds(120)), 0) << app.output;
  EXPECT_NE(app.output.find(" OK\n"), std::string::npos) << app.output;
  ASSERT_EQ(std::system(("touch " + go).c_str()), 0);
  EXPECT_EQ(owner.Wait(std::chrono::seconds(60)), 0) << owner.output;
  EXPECT_NE(owner.output.find("owner: intact"), std::string::npos) << owner.output;
}

// An app killed with SIGKILL: phosd notices and releases its session.
TEST_F(IntegrationTest, KilledAppReleasesItsSession) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child hold = Child::Start(
      {PHOS_BIN, "--socket", d.socket(), "run", "--no-pid-ns", "--lib", PHOS_LIB_PATH, "--", ErrorPaths(), "hold",
       "64"});
  ASSERT_TRUE(hold.ReadUntil("hold: ready", std::chrono::seconds(60))) << hold.output;
  std::string ps = PsJson(d.socket());
  EXPECT_NE(ps.find("\"device_memory_bytes\": \"67108864\""), std::string::npos) << ps;
  // `phos run --no-pid-ns` execs the program, so the child's pid is the app's.
  EXPECT_NE(ps.find("\"pid\": " + std::to_string(hold.pid) + ","), std::string::npos) << ps;
  kill(hold.pid, SIGKILL);
  hold.Wait(std::chrono::seconds(10));
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    ps = PsJson(d.socket());
    if (ps.find("\"pid\"") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (Clock::now() < deadline);
  EXPECT_EQ(ps.find("\"pid\""), std::string::npos) << "the killed app's session is still listed:\n" << ps;
}

}  // namespace

namespace {

// docs/interposer.md "Pinned host memory and copies": the program checks
// its data against CPU references and phos's copy statistics.
TEST_F(IntegrationTest, PinnedHostMemoryAndCopies) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/host_memory");
  EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("host_memory: OK"), std::string::npos) << c.output;
  // The sim maps pinned memory for kernels (docs/interposer.md "Mapped
  // pinned memory"), also again after cudaDeviceReset.
  EXPECT_NE(c.output.find("host_memory: mapped: kernels read and wrote 5000 mapped pinned floats"), std::string::npos)
      << c.output;
  EXPECT_NE(c.output.find("host_memory: mapped after a device reset: kernels read and wrote 5000"), std::string::npos)
      << c.output;
}

}  // namespace

namespace {

// docs/interposer.md "Driver API": a program that does all its GPU work
// through the driver API — modules from embedded PTX text and from an nvcc
// -fatbin image (in memory and as a file) — checks its results against CPU
// references and the driver's error codes.
TEST_F(IntegrationTest, DriverApiProgram) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  const std::string dir = PHOS_INTEGRATION_DIR;
  Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", dir + "/driver_api",
                          dir + "/driver_kernels.fatbin", dir + "/driver_kernels.sm80.fatbin"});
  EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("driver_api: kernels from PTX text"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("driver_api: kernels from a fatbin file"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("driver_api: OK"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("driver_api: cuLaunchKernelEx OK"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("driver_api: cooperative launches OK"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("driver_api: kernels from a library from a fatbin file"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("driver_api: libraries OK"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("a library for another GPU loads, its kernels answer NO_BINARY_FOR_GPU"), std::string::npos)
      << c.output;
  // Every CUdevice_attribute of cuda.h answered (the program stops at the first that does not).
  EXPECT_NE(c.output.find("device attributes answered"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
}

// No phosd: cuInit answers CUDA_ERROR_DEVICE_UNAVAILABLE, one message.
TEST_F(IntegrationTest, DriverApiWithoutDaemonFailsAtCuInit) {
  Child c = Child::Start({PHOS_BIN, "--socket", dir_ + "/absent.sock", "run", "--lib", PHOS_LIB_PATH, "--",
                          std::string(PHOS_INTEGRATION_DIR) + "/driver_api"});
  EXPECT_EQ(c.Wait(std::chrono::seconds(30)), 2) << c.output;
  EXPECT_NE(c.output.find("cuInit(0) failed: CUDA_ERROR_DEVICE_UNAVAILABLE"), std::string::npos) << c.output;
  EXPECT_EQ(Count(c.output, "phos: phosd is unavailable at " + dir_ + "/absent.sock.data"), 1u) << c.output;
}

// The runtime API first, then the driver without setting a context: the
// primary context is current, as the CUDA runtime makes it.
TEST_F(IntegrationTest, DriverApiAfterRuntimeUsesThePrimaryContext) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--",
                          std::string(PHOS_INTEGRATION_DIR) + "/driver_api", "--runtime-first"});
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("driver_api: runtime first OK"), std::string::npos) << c.output;
}

}  // namespace

namespace {

// docs/interposer.md "Streams, functions, reset and fork": per-thread
// streams, function attributes and occupancy, > 48 KiB dynamic shared
// memory, cudaDeviceReset, fork after init and the small calls — in the
// plain build and the `--default-stream per-thread` build.
TEST_F(IntegrationTest, RuntimeMoreStreamsFunctionsResetFork) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  for (const char* program : {"runtime_more", "runtime_more_ptds"}) {
    SCOPED_TRACE(program);
    Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/" + program);
    EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
    EXPECT_NE(c.output.find(std::string(program) + ": OK"), std::string::npos) << c.output;
    // The forked child was refused, said so once, and exited cleanly.
    EXPECT_EQ(Count(c.output, "phos: CUDA cannot be used in a child forked after CUDA was initialised (pid "), 1u)
        << c.output;
    EXPECT_NE(c.output.find("done rc=0"), std::string::npos) << c.output;
    EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
  }
}

// docs/interposer.md "CUDA graphs": capture (one stream, fork/join),
// invalidation, explicit graphs, parameter updates, a graph launched into a
// capture — against CPU references.
TEST_F(IntegrationTest, GraphsCaptureInstantiateLaunch) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/graphs");
  EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("graphs: OK"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
}

// docs/interposer.md "The driver's virtual-memory API": an allocator's
// reserve / create / map / grow / shrink cycle with copies and kernels
// across mapping boundaries against CPU references, CUDA's errors, and
// phos's refusals by name (vmm.cu lists them).
TEST_F(IntegrationTest, DriverVirtualMemoryApiLikeAnExpandableAllocator) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/vmm");
  EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("vmm: OK"), std::string::npos) << c.output;
  // The refusals were each named once.
  EXPECT_EQ(Count(c.output, "cuMemMap of an allocation that is already mapped"), 1u) << c.output;
  EXPECT_EQ(Count(c.output, "cuMemMap at a non-zero offset"), 1u) << c.output;
  EXPECT_EQ(Count(c.output, "cuMemMap of an allocation after cuMemUnmap"), 1u) << c.output;
  EXPECT_EQ(Count(c.output, "cuMemCreate of host or NUMA memory"), 1u) << c.output;
}

// docs/interposer.md "CUDA arrays, textures and surfaces": arrays, copies
// in and out (2D, 3D, deprecated 1D forms, array to array), texture
// objects of arrays, linear and pitched memory in every address and filter
// mode, gather, surfaces read and written by kernels — against CPU
// references, the texels fetched by the sim's interpreter.
// Also built with the per-thread default stream (textures_ptds): every copy
// takes its _ptds/_ptsz form.
TEST_F(IntegrationTest, TexturesAndSurfacesMatchACpuReference) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  for (const char* program : {"textures", "textures_ptds"}) {
    SCOPED_TRACE(program);
    Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/" + program);
    EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
    EXPECT_NE(c.output.find("textures: OK"), std::string::npos) << c.output;
    EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
  }
}

// docs/interposer.md "The device heap": malloc/free/new/delete in kernels,
// across kernels, with virtual calls; the heap limit set before and
// refused after the first launch that uses malloc.
TEST_F(IntegrationTest, DeviceHeapMallocNewAndDeleteAcrossKernels) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/device_heap");
  EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("device_heap: OK"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
}

// docs/interposer.md "cuBLAS": a program linked with -lcublas — gemm in
// S/D/C/Z/H, GemmEx, strided batched, device-pointer scalars, gemv, geam,
// level 1, a captured GEMM, the helpers, the error paths and the undocumented
// environment mode cuSOLVER sets — against CPU
// references, computed in phosd (OpenBLAS on the sim).
// Built twice: -cudart shared, and nvcc's default (the runtime linked
// statically): either way the cuBLAS calls reach libphos.so.
TEST_F(IntegrationTest, CublasRoutinesMatchACpuReference) {
  for (const char* program : {"/cublas", "/cublas_static"}) {
    SCOPED_TRACE(program);
    Daemon d(dir_);
    ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
    Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + program);
    EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
    EXPECT_NE(c.output.find("cublas: OK"), std::string::npos) << c.output;
    // The one refusal the program provokes, named once; nothing else
    // refused (the int8 GEMM is computed, exactly).
    const std::string refusal = "phos: cublasLtMatmul: a matrix order other than column-major is not supported by phos yet";
    EXPECT_NE(c.output.find(refusal), std::string::npos) << c.output;
    EXPECT_NE(c.output.find("cublas: int8 GemmEx: CUBLAS_STATUS_SUCCESS"), std::string::npos) << c.output;
    size_t refusals = 0;
    for (size_t at = c.output.find("not supported by phos"); at != std::string::npos;
         at = c.output.find("not supported by phos", at + 1))
      ++refusals;
    EXPECT_EQ(refusals, 1u) << c.output;
  }
}

// The symmetric, Hermitian and triangular routines and dgmm
// (tests/integration/cublas_symmetric.cu): every case against a CPU
// reference, nothing refused.
TEST_F(IntegrationTest, CublasSymmetricRoutinesMatchACpuReference) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/cublas_symmetric");
  EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("cublas_symmetric: OK"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("not supported by phos"), std::string::npos) << c.output;
}

// cuBLASLt's training epilogues (docs/interposer.md "cuBLAS and
// cuBLASLt"): forward with the ReLU mask or GELU input saved, backward
// reading it with the bias gradient, BGRADA/BGRADB — against CPU
// references. The sim refuses one case by name (an input's bias gradient
// scaled by alpha != 1, which cuBLASLt does not document): that refusal
// and no other.
TEST_F(IntegrationTest, CublasLtTrainingEpiloguesMatchACpuReference) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), std::string(PHOS_INTEGRATION_DIR) + "/cublaslt_training");
  EXPECT_EQ(c.Wait(std::chrono::seconds(180)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("cublaslt_training: OK"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("cublaslt_training: a cuBLAS handle as the cuBLASLt handle OK"), std::string::npos)
      << c.output;
  EXPECT_NE(c.output.find("cublaslt_training: BGRADB with alpha 2: CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos)
      << c.output;
  size_t refusals = 0;
  for (size_t at = c.output.find("not supported by phos"); at != std::string::npos;
       at = c.output.find("not supported by phos", at + 1))
    ++refusals;
  EXPECT_EQ(refusals, 1u) << c.output;
  d.Stop();  // phosd's log, complete
  EXPECT_NE(d.log().find("BGRADA/BGRADB epilogues with an alpha other than a host-pointer 1"), std::string::npos)
      << d.log();
}

// A child forked before any CUDA call connects on its own.
TEST_F(IntegrationTest, RuntimeMoreForkBeforeInit) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--",
                          std::string(PHOS_INTEGRATION_DIR) + "/runtime_more", "fork-before"});
  EXPECT_EQ(c.Wait(std::chrono::seconds(120)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("fork-before child rc=0"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("runtime_more: fork-before OK"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("cannot be used in a child"), std::string::npos) << c.output;
}

}  // namespace

namespace {

// A program that dlopen()s libcuda.so.1 itself reaches phosd through the
// driver shim `phos run` puts on LD_LIBRARY_PATH.
TEST_F(IntegrationTest, DlopenedDriverIsPhos) {
  Daemon d(dir_);
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  Child c = RunUnderPhos(d.socket(), PHOS_DLOPEN_DRIVER);
  EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
  EXPECT_NE(c.output.find("dlopen_driver: 1 "), std::string::npos) << c.output;
  EXPECT_NE(c.output.find(" OK"), std::string::npos) << c.output;
}

}  // namespace

namespace {

std::string NcclRanks() { return std::string(PHOS_INTEGRATION_DIR) + "/nccl_ranks"; }

// docs/interposer.md "Devices": a process sees phosd's GPUs through its
// CUDA_VISIBLE_DEVICES, ordered and filtered as CUDA does.
TEST_F(IntegrationTest, DevicesFollowCudaVisibleDevices) {
  Daemon d(dir_, {"--sim-gpus", "2"});
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  auto run = [&](const std::vector<std::string>& env) {
    Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", NcclRanks(),
                            "devices"}, env);
    EXPECT_EQ(c.Wait(std::chrono::seconds(60)), 0) << c.output;
    EXPECT_NE(c.output.find("devices: OK"), std::string::npos) << c.output;
    return c.output;
  };
  const std::string all = run({});
  const size_t at = all.find("devices: 2 busid ");
  ASSERT_NE(at, std::string::npos) << all;
  int bus0 = -1, bus1 = -1;
  ASSERT_EQ(std::sscanf(all.c_str() + at, "devices: 2 busid %d busid %d", &bus0, &bus1), 2) << all;
  EXPECT_NE(bus0, bus1);
  const std::string one = run({"CUDA_VISIBLE_DEVICES=1"});
  EXPECT_NE(one.find("devices: 1 busid " + std::to_string(bus1) + "\n"), std::string::npos) << one;
  const std::string swapped = run({"CUDA_VISIBLE_DEVICES=1,0"});
  EXPECT_NE(swapped.find("devices: 2 busid " + std::to_string(bus1) + " busid " + std::to_string(bus0)),
            std::string::npos)
      << swapped;
  // The list ends at the first entry that is no GPU (as CUDA's does).
  const std::string cut = run({"CUDA_VISIBLE_DEVICES=0,7,1"});
  EXPECT_NE(cut.find("devices: 1 busid " + std::to_string(bus0) + "\n"), std::string::npos) << cut;
  // GPU uuids, whole or any prefix naming one GPU (the sim's uuids:
  // daemon/backend/sim/sim_backend.cc); a prefix two GPUs share names none.
  const std::string by_uuid = run({"CUDA_VISIBLE_DEVICES=GPU-5105d0e0-0001-4000-8000-000000000000,0"});
  EXPECT_NE(by_uuid.find("devices: 2 busid " + std::to_string(bus1) + " busid " + std::to_string(bus0)),
            std::string::npos)
      << by_uuid;
  const std::string by_prefix = run({"CUDA_VISIBLE_DEVICES=gpu-5105D0E0-0001"});
  EXPECT_NE(by_prefix.find("devices: 1 busid " + std::to_string(bus1) + "\n"), std::string::npos) << by_prefix;
  const std::string ambiguous = run({"CUDA_VISIBLE_DEVICES=1,GPU-5105d0e0,0"});
  EXPECT_NE(ambiguous.find("devices: 1 busid " + std::to_string(bus1) + "\n"), std::string::npos) << ambiguous;
  const std::string mig = run({"CUDA_VISIBLE_DEVICES=0,MIG-5105d0e0-0001-4000-8000-000000000000"});
  EXPECT_NE(mig.find("devices: 1 busid " + std::to_string(bus0) + "\n"), std::string::npos) << mig;
  EXPECT_NE(mig.find("MIG devices are not supported by phos"), std::string::npos) << mig;
}

// docs/interposer.md "Several GPUs in one process": one process uses two
// GPUs (buffers, kernels, streams, events, peer copies, a cross-GPU event
// wait, a module variable per GPU, a thread on its default GPU, a
// per-thread default stream on each); checkpoints take it in every mode
// (stop, copy-on-write and recopy, each as asked) and an in-place restore
// rolls it back, the process going on
// (several_gpus.cu; process_restore_test and migrate_test restore such
// images; cow_checkpoint_test TwoGpuCowCheckpointTest writes on both GPUs
// during a copy-on-write checkpoint).
TEST_F(IntegrationTest, OneProcessUsesTwoGpus) {
  Daemon d(dir_, {"--sim-gpus", "2"});
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  const std::string hold = dir_ + "/several.go";
  Child c = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--",
                          std::string(PHOS_INTEGRATION_DIR) + "/several_gpus", hold});
  ASSERT_TRUE(c.ReadUntil("several: holding", std::chrono::seconds(120))) << c.output << d.log();
  // Copy-on-write and recopy take every GPU themselves (no stop-the-world
  // fallback: the result names the mode asked for).
  for (const char* mode : {"cow", "recopy"}) {
    const std::string image = dir_ + "/several-" + mode + ".img";
    Child ck = Child::Start({PHOS_BIN, "--socket", d.socket(), "checkpoint", "--pid", std::to_string(c.pid),
                             "--gpu-only", "--mode", mode, "--out", image});
    EXPECT_EQ(ck.Wait(std::chrono::seconds(60)), 0) << mode << ": " << ck.output << d.log();
    EXPECT_NE(ck.output.find(std::string("mode_") + mode), std::string::npos) << mode << ": " << ck.output;
    EXPECT_EQ(ck.output.find("mode_stop"), std::string::npos) << mode << ": " << ck.output;
    EXPECT_TRUE(Exists(image + "/manifest")) << mode << ": " << ck.output;
  }
  const std::string image = dir_ + "/several-stop.img";
  Child ck = Child::Start({PHOS_BIN, "--socket", d.socket(), "checkpoint", "--pid", std::to_string(c.pid),
                           "--gpu-only", "--mode", "stop", "--out", image});
  EXPECT_EQ(ck.Wait(std::chrono::seconds(60)), 0) << ck.output << d.log();
  EXPECT_TRUE(Exists(image + "/manifest")) << ck.output;
  Child inspect = Child::Start({PHOS_BIN, "inspect", image});
  EXPECT_EQ(inspect.Wait(std::chrono::seconds(30)), 0) << inspect.output;
  EXPECT_NE(inspect.output.find("gpus      0 (home), 1\n"), std::string::npos) << inspect.output;
  // An in-place restore rolls the process back on both GPUs (the same
  // state here: it goes on and checks everything after its hold;
  // concurrent_restore_test TwoGpuInPlaceRestoreTest restores changed state).
  Child back = Child::Start({PHOS_BIN, "--socket", d.socket(), "restore", image, "--gpu-only", "--pid",
                             std::to_string(c.pid)});
  EXPECT_EQ(back.Wait(std::chrono::seconds(60)), 0) << back.output << d.log();
  ASSERT_EQ(std::system(("touch " + hold).c_str()), 0);
  EXPECT_EQ(c.Wait(std::chrono::seconds(120)), 0) << c.output << d.log();
  EXPECT_NE(c.output.find("several: OK"), std::string::npos) << c.output;
}

// Ranks of NCCL jobs in one phosd (docs/interposer.md "NCCL"): every
// collective, operator and type, a Send/Recv ring and a training loop,
// checked by each rank against a CPU reference; 2 and 4 ranks on 4 GPUs,
// and 4 ranks sharing 2.
void RunRanks(const std::string& socket, const std::string& dir, int nranks, const std::string& tag) {
  const std::string id = dir + "/" + tag + ".id";
  std::vector<Child> ranks;
  for (int r = 0; r < nranks; ++r) {
    ranks.push_back(Child::Start({PHOS_BIN, "--socket", socket, "run", "--lib", PHOS_LIB_PATH, "--", NcclRanks(),
                                  "collectives", std::to_string(r), std::to_string(nranks), id}));
  }
  for (int r = 0; r < nranks; ++r) {
    EXPECT_EQ(ranks[r].Wait(std::chrono::seconds(300)), 0) << tag << " rank " << r << ":\n" << ranks[r].output;
    EXPECT_NE(ranks[r].output.find("rank " + std::to_string(r) + ": OK"), std::string::npos)
        << tag << ":\n" << ranks[r].output;
  }
  // Every rank ends with the same trained parameters.
  for (int r = 1; r < nranks; ++r) {
    auto checksum = [](const std::string& out) {
      const size_t at = out.find("training checksum");
      return out.substr(at, out.find('\n', at) - at);
    };
    if (ranks[0].output.find("training checksum") == std::string::npos ||
        ranks[r].output.find("training checksum") == std::string::npos) {
      continue;  // reported above
    }
    EXPECT_EQ(checksum(ranks[0].output), checksum(ranks[r].output)) << tag;
  }
}

TEST_F(IntegrationTest, NcclCollectivesAcrossRanksOfOneDaemon) {
  Daemon d(dir_, {"--sim-gpus", "4"});
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  RunRanks(d.socket(), dir_, 2, "two");
  RunRanks(d.socket(), dir_, 4, "four");
}

TEST_F(IntegrationTest, NcclRanksMaySharePhosdsGpus) {
  Daemon d(dir_, {"--sim-gpus", "2"});
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  RunRanks(d.socket(), dir_, 4, "shared");
}

// A rank that dies makes its peers' collectives fail with ncclRemoteError;
// nobody hangs.
TEST_F(IntegrationTest, NcclRankDeathFailsItsPeersWithRemoteError) {
  Daemon d(dir_, {"--sim-gpus", "2"});
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  const std::string id = dir_ + "/dies.id";
  Child r0 = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", NcclRanks(), "dies",
                           "0", "2", id});
  Child r1 = Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", NcclRanks(), "dies",
                           "1", "2", id});
  EXPECT_EQ(r1.Wait(std::chrono::seconds(120)), 3) << r1.output;
  EXPECT_EQ(r0.Wait(std::chrono::seconds(120)), 0) << r0.output;
  EXPECT_NE(r0.output.find("rank 0: remote error"), std::string::npos) << r0.output;
}

// One rank of a job alone is no consistent checkpoint: refused by name,
// nothing written, the ranks keep running and end cleanly.
TEST_F(IntegrationTest, CheckpointOfOneNcclRankIsRefusedByName) {
  Daemon d(dir_, {"--sim-gpus", "2"});
  ASSERT_TRUE(d.WaitReady(std::chrono::seconds(20))) << d.log();
  const std::string id = dir_ + "/hold.id";
  std::vector<Child> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(Child::Start({PHOS_BIN, "--socket", d.socket(), "run", "--lib", PHOS_LIB_PATH, "--", NcclRanks(),
                                  "hold", std::to_string(r), "2", id}));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ranks[r].ReadUntil("holding", std::chrono::seconds(120))) << ranks[r].output;
  }
  const std::string image = dir_ + "/rank0.img";
  Child ck = Child::Start({PHOS_BIN, "--socket", d.socket(), "checkpoint", "--pid", std::to_string(ranks[0].pid),
                           "--gpu-only", "--out", image});
  EXPECT_NE(ck.Wait(std::chrono::seconds(60)), 0) << ck.output;
  EXPECT_NE(ck.output.find("NCCL communicator"), std::string::npos) << ck.output;
  EXPECT_FALSE(Exists(image)) << "a refused checkpoint left " << image;
  ASSERT_EQ(std::system(("touch " + id + ".go").c_str()), 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].Wait(std::chrono::seconds(60)), 0) << ranks[r].output;
    EXPECT_NE(ranks[r].output.find("released"), std::string::npos) << ranks[r].output;
  }
}

}  // namespace
