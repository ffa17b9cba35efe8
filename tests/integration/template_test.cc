// Serverless templates, end to end (docs/templates.md): phosd (sim) +
// saxpy_loop under `phos run`, held at its midpoint (PHOS_APP_PAUSE,
// tests/apps/common.h); `phos template save`, then instances started with
// `phos template start`, each printing exactly what an uninterrupted run
// prints. Also the refusals: a start while the source (--leave-running) or
// an earlier instance still holds the template's device addresses, a
// missing template, a dead pid.
//
// Runs twice: with `phos run`'s default (the app is pid 1 of its own pid
// namespace: instances get new pids) and with --no-pid-ns (instances get
// the source's pid back, so it must have ended).
//
// The app's stdout is a file opened O_APPEND (CRIU restores it as is: every
// instance appends to it) and stdin /dev/null; each instance's output is
// what the file gained. Instances are phosd's children (it is a child
// subreaper), which reaps them and reports their exit status.
//
// Skips ("skipped: CRIU unavailable ...") when CriuClient::Check fails.
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/magic.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using phos::testing::ReadFile;
using phos::testing::WaitGone;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Result = phos::testing::PhosResult;

constexpr const char* kIters = "64";  // saxpy_loop pauses after iteration 32

bool Contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

class TemplateTest : public ::testing::TestWithParam<bool> {
 protected:
  bool pid_ns() const { return GetParam(); }

  void SetUp() override {
    const phos::Status& criu = phos::testing::CriuAvailable();
    if (!criu.ok()) GTEST_SKIP() << "skipped: CRIU unavailable: " << criu.ToString();
    char tmpl[] = "/tmp/phos_tpl_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The in-memory tier in a directory of our own (removed in TearDown);
    // /dev/shm is tmpfs on Linux, else phosd falls back to disk (checked).
    char cache[] = "/dev/shm/phos_tpl_cache_XXXXXX";
    ASSERT_NE(mkdtemp(cache), nullptr);
    cache_ = cache;
    struct statfs sf;
    cache_is_tmpfs_ = statfs(cache_.c_str(), &sf) == 0 &&
                      static_cast<unsigned long>(sf.f_type) == static_cast<unsigned long>(TMPFS_MAGIC);
    socket_ = dir_ + "/phosd.sock";
    out_ = dir_ + "/app.out";
    err_ = dir_ + "/app.err";
    pause_ = dir_ + "/pause";
    ASSERT_TRUE(phos::testing::StartSimDaemon(
        socket_, {"--checkpoint-root", dir_ + "/ckpt", "--template-cache", cache_}, &daemon_));
  }

  void TearDown() override {
    if (app_ > 0) {
      kill(app_, SIGKILL);
      waitpid(app_, nullptr, 0);
    }
    EXPECT_TRUE(phos::testing::StopDaemon(&daemon_));
    if (!dir_.empty()) fs::remove_all(dir_);
    if (!cache_.empty()) fs::remove_all(cache_);
  }

  // program_ (saxpy_loop unless a test says otherwise) under `phos run`
  // (our child), in its own session, stdout on
  // out_ (O_APPEND), stderr on err_; with `pause` it stops at its midpoint
  // while pause_ exists.
  pid_t StartApp(bool pause) {
    std::vector<std::string> args = {"run", "--lib", PHOS_LIB_PATH};
    if (!pid_ns()) args.push_back("--no-pid-ns");
    args.insert(args.end(), {"--", program_});
    args.insert(args.end(), program_args_.begin(), program_args_.end());
    std::vector<std::string> env;
    if (pause) env.push_back("PHOS_APP_PAUSE=" + pause_);
    return phos::testing::StartDetached(phos::testing::PhosArgv(socket_, args), out_, err_, env);
  }

  Result Phos(const std::vector<std::string>& args) { return phos::testing::RunPhos(socket_, args); }

  // Reads what phosd logged so far (its output is a pipe: never let it fill).
  void DrainDaemon() { phos::testing::DaemonOutput(&daemon_, 20ms); }

  std::string DaemonLog() { return phos::testing::DaemonOutput(&daemon_); }

  // The pid of the only phos session (`phos ps --json`), 0 if none or several.
  int SessionPid() {
    const std::vector<pid_t> pids = phos::testing::SessionPids(Phos({"ps", "--json"}).output, "");
    return pids.size() == 1 ? pids[0] : 0;
  }

  static std::string Counter(const std::string& json, const std::string& key) {
    std::smatch m;
    return std::regex_search(json, m, std::regex("\"" + key + "\":\\s*\"?(\\d+)")) ? std::string(m[1]) : "";
  }

  // One uninterrupted run: its stdout is what every instance must print.
  std::string ReferenceOutput() {
    pid_t pid = StartApp(false);
    const int rc = phos::testing::WaitChildExit(&pid, 60s);
    EXPECT_EQ(rc, 0) << "reference run: status " << rc << "\n" << ReadFile(err_);
    const std::string out = ReadFile(out_);
    fs::remove(out_);
    return out;
  }

  // The source: program_ held at its midpoint; returns its pid as phosd
  // sees it (our child app_ is `phos run` in the pid-namespace case).
  int StartPausedSource() {
    std::ofstream(pause_).put('\n');
    app_ = StartApp(true);
    EXPECT_TRUE(phos::testing::WaitFileText(err_, "paused at midpoint", 60s)) << ReadFile(err_) << "\nphosd:\n"
                                                                          << DaemonLog();
    return SessionPid();
  }

  std::string program_ = std::string(PHOS_APPS_DIR) + "/saxpy_loop";  // what StartApp runs
  std::vector<std::string> program_args_ = {kIters};
  std::string dir_, cache_, socket_, out_, err_, pause_;
  bool cache_is_tmpfs_ = false;
  Child daemon_;
  pid_t app_ = -1;  // our child: `phos run` (or the app itself without a pid namespace)
};

TEST_P(TemplateTest, SavedTemplateStartsTenInstancesThatMatchAnUninterruptedRun) {
  const std::string reference = ReferenceOutput();
  ASSERT_TRUE(Contains(reference, "saxpy_loop: checksum 0x")) << reference;
  const int source = StartPausedSource();
  ASSERT_GT(source, 0) << "no single phos session for the paused app";

  // Saved with --leave-running: the source keeps the template's device
  // addresses, so a start is refused, naming it.
  Result keep = Phos({"template", "save", "fn", "--pid", std::to_string(source), "--leave-running"});
  ASSERT_EQ(keep.rc, 0) << keep.output << "\nphosd:\n" << DaemonLog();
  EXPECT_EQ(kill(source, 0), 0) << "--leave-running ended the source";
  Result busy = Phos({"template", "start", "fn"});
  EXPECT_EQ(busy.rc, 1) << busy.output;
  EXPECT_TRUE(Contains(busy.output, "pid " + std::to_string(source) + ", its source process")) << busy.output;
  EXPECT_TRUE(Contains(busy.output, "holds the template's device addresses")) << busy.output;

  // Saved again (replacing the template), the default: the source ends.
  Result save = Phos({"template", "save", "fn", "--pid", std::to_string(source), "--mode", "cow"});
  ASSERT_EQ(save.rc, 0) << save.output << "\nphosd:\n" << DaemonLog();
  EXPECT_TRUE(Contains(save.output, "was ended")) << save.output;
  ASSERT_NE(phos::testing::WaitChildExit(&app_, 10s), -1000) << "the source did not end after the save";
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt/templates/fn/criu/inventory.img"));
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt/templates/fn/template.txt"));  // in the manifest now
  const Result in = Phos({"inspect", dir_ + "/ckpt/templates/fn", "--no-verify", "--json"});
  EXPECT_TRUE(std::regex_search(in.output, std::regex("\"template_info\":\\s*\\{\\s*\"name\":\\s*\"fn\""))) << in.output;
  EXPECT_EQ(ReadFile(out_), "") << "the source printed before its end";
  Result list = Phos({"template", "list", "--json"});
  EXPECT_EQ(list.rc, 0) << list.output;
  EXPECT_EQ(std::regex_search(list.output, std::regex("\"name\":\\s*\"fn\"")), true) << list.output;

  // The pause file still exists: an instance stays at the midpoint, and a
  // second start is refused while it runs.
  Result first = Phos({"template", "start", "fn", "--detach"});
  ASSERT_EQ(first.rc, 0) << first.output << "\nphosd:\n" << DaemonLog();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.output, m, std::regex("started pid (\\d+)"))) << first.output;
  // --detach returns the moment the instance runs (the "running" event),
  // not with the result, which comes once every buffer has loaded.
  EXPECT_FALSE(Contains(first.output, "template start OK")) << first.output;
  const int instance = std::stoi(m[1]);
  if (pid_ns()) {
    EXPECT_NE(instance, source) << "an instance in its own pid namespace got the source's pid";
  } else {
    EXPECT_EQ(instance, source);
  }
  Result second = Phos({"template", "start", "fn", "--detach"});
  EXPECT_EQ(second.rc, 1) << second.output;
  EXPECT_TRUE(Contains(second.output, "pid " + std::to_string(instance) + ", an instance of it, still runs"))
      << second.output;
  size_t seen = ReadFile(out_).size();
  fs::remove(pause_);
  ASSERT_TRUE(WaitGone(instance, 30s)) << "instance " << instance << " did not finish";
  EXPECT_EQ(ReadFile(out_).substr(seen), reference);

  // Ten instances, one after another, each waited for (exit status 0).
  for (int k = 0; k < 10; ++k) {
    seen = ReadFile(out_).size();
    Result r = k == 0 ? Phos({"template", "start", "fn", "--json"}) : Phos({"template", "start", "fn"});
    DrainDaemon();
    ASSERT_EQ(r.rc, 0) << "start " << k << ":\n" << r.output << "\nphosd:\n" << DaemonLog();
    EXPECT_EQ(ReadFile(out_).substr(seen), reference) << "start " << k;
    if (k == 0) {
      // Timings to "running", and where the start read the template.
      EXPECT_FALSE(Counter(r.output, "criu_restore_ms").empty()) << r.output;
      EXPECT_FALSE(Counter(r.output, "gpu_restore_us").empty()) << r.output;
      EXPECT_FALSE(Counter(r.output, "running_ms").empty()) << r.output;
      EXPECT_TRUE(std::regex_search(r.output, std::regex("\"exit_status\":\\s*0\\b"))) << r.output;
      if (cache_is_tmpfs_) {
        EXPECT_EQ(Counter(r.output, "from_cache"), "1") << r.output;
        EXPECT_TRUE(Contains(r.output, cache_ + "/fn")) << r.output;
      }
    } else {
      EXPECT_TRUE(Contains(r.output, "started pid ")) << r.output;
      EXPECT_TRUE(Contains(r.output, "exited with status 0")) << r.output;
    }
  }

  Result rm = Phos({"template", "rm", "fn"});
  EXPECT_EQ(rm.rc, 0) << rm.output;
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt/templates/fn"));
  EXPECT_FALSE(fs::exists(cache_ + "/fn"));
  Result gone = Phos({"template", "start", "fn"});
  EXPECT_EQ(gone.rc, 1) << gone.output;
  EXPECT_TRUE(Contains(gone.output, "no template 'fn'")) << gone.output;
}

TEST_P(TemplateTest, MissingTemplateAndDeadPidFailClearly) {
  Result missing = Phos({"template", "start", "nope"});
  EXPECT_EQ(missing.rc, 1) << missing.output;
  EXPECT_TRUE(Contains(missing.output, "no template 'nope'")) << missing.output;
  EXPECT_TRUE(Contains(missing.output, "phos template save nope --pid P")) << missing.output;

  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  Result save = Phos({"template", "save", "fn", "--pid", std::to_string(dead)});
  EXPECT_EQ(save.rc, 1) << save.output;
  EXPECT_TRUE(Contains(save.output, "cannot save template fn: no phos session for pid " + std::to_string(dead)))
      << save.output;
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt/templates/fn"));

  Result bad = Phos({"template", "save", "../x", "--pid", "1"});
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "bad template name '../x'")) << bad.output;
}

// Flips one byte of the first buffer's data in DIR/gpu.img (the 4 KiB
// header block comes first, then the extents): that chunk's checksum no
// longer matches. A write, so the file's mtime and ctime change.
void CorruptGpuImage(const std::string& dir) {
  std::fstream f(dir + "/gpu.img", std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << dir;
  const std::streamoff off = 4096 + 100;
  char x = 0;
  f.seekg(off);
  f.read(&x, 1);
  x = static_cast<char>(x ^ 0x5a);
  f.seekp(off);
  f.write(&x, 1);
  ASSERT_TRUE(f.good()) << dir;
}

// A start skips the full verification only for an in-memory copy verified
// when it was made whose files did not change since ("preverified": 1).
// Corrupted after that: the damaged copy is found (its files changed),
// verified again, replaced by a fresh copy of the intact template, and the
// instance prints what an uninterrupted run prints. With the template on
// disk corrupted too, the start is refused naming the checksum that does
// not match, and no instance is left running.
TEST_P(TemplateTest, ACorruptedTemplateIsRefusedAndADamagedCopyIsReplaced) {
  const std::string reference = ReferenceOutput();
  ASSERT_TRUE(Contains(reference, "saxpy_loop: checksum 0x")) << reference;
  const int source = StartPausedSource();
  ASSERT_GT(source, 0) << "no single phos session for the paused app";
  Result save = Phos({"template", "save", "fn", "--pid", std::to_string(source)});
  ASSERT_EQ(save.rc, 0) << save.output << "\nphosd:\n" << DaemonLog();
  ASSERT_NE(phos::testing::WaitChildExit(&app_, 10s), -1000) << "the source did not end after the save";
  fs::remove(pause_);  // instances run to the end
  const std::string root = dir_ + "/ckpt/templates/fn", copy = cache_ + "/fn";

  size_t seen = ReadFile(out_).size();
  Result good = Phos({"template", "start", "fn", "--json"});
  DrainDaemon();
  ASSERT_EQ(good.rc, 0) << good.output << "\nphosd:\n" << DaemonLog();
  EXPECT_EQ(ReadFile(out_).substr(seen), reference);
  EXPECT_EQ(Counter(good.output, "preverified"), cache_is_tmpfs_ ? "1" : "0") << good.output;

  if (cache_is_tmpfs_) {
    ASSERT_TRUE(fs::exists(copy + "/gpu.img"));
    ASSERT_NO_FATAL_FAILURE(CorruptGpuImage(copy));
    seen = ReadFile(out_).size();
    Result healed = Phos({"template", "start", "fn", "--json"});
    ASSERT_EQ(healed.rc, 0) << healed.output << "\nphosd:\n" << DaemonLog();
    EXPECT_EQ(ReadFile(out_).substr(seen), reference) << "an instance from a damaged copy printed something else";
    EXPECT_EQ(Counter(healed.output, "preverified"), "1") << healed.output;
    EXPECT_TRUE(Contains(DaemonLog(), "fails verification")) << "phosd did not say the copy was damaged";
  }

  ASSERT_NO_FATAL_FAILURE(CorruptGpuImage(root));
  if (cache_is_tmpfs_) {
    ASSERT_NO_FATAL_FAILURE(CorruptGpuImage(copy));
  }
  seen = ReadFile(out_).size();
  Result bad = Phos({"template", "start", "fn"});
  DrainDaemon();
  std::cout << "[ message  ] corrupt template: " << bad.output;  // what users get
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "cannot start template fn")) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "checksum mismatch in " + root + "/gpu.img")) << bad.output;
  EXPECT_EQ(ReadFile(out_).substr(seen), "") << "an instance of a corrupt template ran";
  EXPECT_EQ(SessionPid(), 0) << "a session is left after the refused start";
}

// A template of a program holding pinned host memory (multi_stream:
// cudaMallocHost buffers, async copies from them queued at its midpoint):
// each instance gets the shared host segments back, mapped where they were
// and registered with phosd, contents intact, and prints what an
// uninterrupted run prints.
TEST_P(TemplateTest, AProgramHoldingPinnedMemoryStartsFromItsTemplate) {
  program_ = std::string(PHOS_APPS_DIR) + "/multi_stream";
  program_args_ = {};
  const std::string reference = ReferenceOutput();
  ASSERT_TRUE(Contains(reference, "multi_stream: checksum 0x")) << reference;
  const int source = StartPausedSource();
  ASSERT_GT(source, 0) << "no single phos session for the paused app";
  Result save = Phos({"template", "save", "pinned", "--pid", std::to_string(source)});
  ASSERT_EQ(save.rc, 0) << save.output << "\nphosd:\n" << DaemonLog();
  ASSERT_NE(phos::testing::WaitChildExit(&app_, 10s), -1000) << "the source did not end after the save";
  fs::remove(pause_);
  for (int k = 0; k < 2; ++k) {
    const size_t seen = ReadFile(out_).size();
    Result r = Phos({"template", "start", "pinned"});
    DrainDaemon();
    ASSERT_EQ(r.rc, 0) << "start " << k << ":\n" << r.output << "\nphosd:\n" << DaemonLog();
    EXPECT_EQ(ReadFile(out_).substr(seen), reference) << "start " << k << ":\n" << ReadFile(err_);
  }
}

INSTANTIATE_TEST_SUITE_P(PidNamespace, TemplateTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "OwnPidNs" : "NoPidNs"; });

}  // namespace
