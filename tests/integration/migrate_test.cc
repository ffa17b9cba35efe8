// `phos migrate` end to end (issue #6; docs/migration.md, server/migration.h):
// two phosds on this machine, A (the source) and B (the destination, with
// --listen 127.0.0.1:0 and a --peer-token file), saxpy_loop under `phos run`
// on A, paused at its midpoint (tests/apps/common.h AppMidpoint:
// PHOS_APP_PAUSE=FILE, released by removing FILE).
//
//   OutputIdentical (recopy and stop, plain and --json output): the
//     migration succeeds and reports the new pid and a downtime (--json:
//     recopy pre-copied every device byte of the paused app while it ran,
//     and only the rest crossed after the freeze; stop pre-copied none); the source
//     pid is gone (its `phos run` ends as killed), the copy runs under B, B
//     keeps the received image in incoming/, and released, the copy prints
//     exactly what an uninterrupted run prints.
//   DestinationDiesMidway: B is SIGKILLed while the (rate-capped) transfer
//     runs: the migration fails saying it was abandoned and the pid keeps
//     running here; the source runs on, unfrozen, still served by A (phos
//     ps), nothing is left in A's outgoing/, and released it finishes with
//     the reference output.
//   WrongTokenRefused: a token file with other contents: refused, saying so;
//     nothing arrives at B; the source runs on and finishes correctly.
//
// The app runs as in e2e_process_test.cc (process_harness.h): own session,
// stdin /dev/null, stdout/stderr on O_APPEND files — the copy reopens the
// same files by path, and stdout holds only the program's result line, so
// it can be compared byte for byte with the reference run's. The app's host
// pid comes from `phos ps --json`. The copy at B is not our child: it is
// waited for through /proc.
//
// Skips ("skipped: CRIU unavailable ...") when CriuClient::Check fails.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "criu/criu_client.h"
#include "harness.h"
#include "process_harness.h"

namespace {

using phos::testing::Child;
using phos::testing::Clock;
using phos::testing::ProcessEnded;
using phos::testing::ReadFile;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The program and its iteration count: ~0.8 s uninterrupted on the sim (every
// launch runs in phosd's PTX interpreter); the midpoint is half-way.
const std::string kApp = std::string(PHOS_APPS_DIR) + "/saxpy_loop";
const std::string kIters = "200";

struct Result {
  int rc;
  std::string output;
};

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool Contains(const std::string& text, const std::string& needle) {
  return Lower(text).find(Lower(needle)) != std::string::npos;
}

// 32 random hex digits in a new file of mode 0600 (phosd and phos refuse a
// token file others can read).
void WriteToken(const std::string& path, std::string* token) {
  std::random_device rd;
  char hex[33];
  for (int i = 0; i < 32; i += 8) std::snprintf(hex + i, 9, "%08x", static_cast<unsigned>(rd()));
  *token = hex;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  const std::string line = *token + "\n";
  ASSERT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size())) << path;
  close(fd);
}

// The uninterrupted run's stdout of each program (every test's processes
// run the same build: computed once per program).
std::string& Reference(const std::string& app) {
  static std::map<std::string, std::string> refs;
  return refs[app];
}

std::string BaseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

class MigrateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { check_ = new phos::Status(phos::criu::CriuClient::Check()); }
  static void TearDownTestSuite() {
    delete check_;
    check_ = nullptr;
  }

  void SetUp() override {
    if (!check_->ok()) GTEST_SKIP() << "skipped: CRIU unavailable: " << check_->ToString();
    char tmpl[] = "/tmp/phos_migrate_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    sock_a_ = dir_ + "/a.sock";
    sock_b_ = dir_ + "/b.sock";
    root_a_ = dir_ + "/root-a";
    root_b_ = dir_ + "/root-b";
    token_file_ = dir_ + "/token";
    pause_ = dir_ + "/pause";
    out_ = dir_ + "/app.out";
    err_ = dir_ + "/app.err";
    ASSERT_NO_FATAL_FAILURE(WriteToken(token_file_, &token_));

    std::vector<std::string> argv_a = {PHOS_BIN, "daemon", "--backend", "sim", "--socket", sock_a_,
                                       "--checkpoint-root", root_a_};
    const std::vector<std::string> extra_a = SourceExtraFlags();
    argv_a.insert(argv_a.end(), extra_a.begin(), extra_a.end());
    daemon_a_ = Child::Start(argv_a);
    ASSERT_TRUE(phos::testing::WaitForDataSocket(sock_a_, 20s)) << "phosd A:\n" << daemon_a_.output;

    std::vector<std::string> argv_b = {PHOS_BIN,        "daemon",  "--backend",     "sim",
                                       "--socket",      sock_b_,   "--checkpoint-root", root_b_,
                                       "--listen",      "127.0.0.1:0", "--peer-token", token_file_};
    const std::vector<std::string> extra_b = DestinationExtraFlags();
    argv_b.insert(argv_b.end(), extra_b.begin(), extra_b.end());
    daemon_b_ = Child::Start(argv_b);
    // "peer: listening on 127.0.0.1:0 (port N)": the port it bound.
    ASSERT_TRUE(daemon_b_.ReadUntil("(port ", 20s)) << "phosd B:\n" << daemon_b_.output;
    ASSERT_TRUE(daemon_b_.ReadUntil(")", 5s)) << "phosd B:\n" << daemon_b_.output;
    std::smatch m;
    const std::string log = daemon_b_.output;
    ASSERT_TRUE(std::regex_search(log, m, std::regex("\\(port (\\d+)\\)"))) << log;
    to_ = "127.0.0.1:" + m[1].str();
    ASSERT_TRUE(phos::testing::WaitForDataSocket(sock_b_, 20s)) << "phosd B:\n" << daemon_b_.output;
  }

  void TearDown() override {
    for (pid_t p : kill_list_) {
      if (p > 0 && !ProcessEnded(p)) kill(p, SIGKILL);
    }
    if (run_ > 0) {
      kill(run_, SIGKILL);
      waitpid(run_, nullptr, 0);
    }
    for (Child* d : {&daemon_a_, &daemon_b_}) {
      if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        EXPECT_NE(d->Wait(10000ms), -1000) << "phosd did not stop on SIGTERM";
      }
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // More flags for phosd B (a fixture for fault injection overrides it),
  // and for phosd A.
  virtual std::vector<std::string> DestinationExtraFlags() const { return {}; }
  virtual std::vector<std::string> SourceExtraFlags() const { return {}; }

  static std::string DaemonLog(Child& d) {
    if (d.pid > 0) d.ReadUntil("\x01never", 200ms);
    return d.output;
  }
  std::string Logs() {
    return "\nphosd A:\n" + DaemonLog(daemon_a_) + "\nphosd B:\n" + DaemonLog(daemon_b_) + "\napp stderr:\n" +
           ReadFile(err_);
  }

  static std::vector<std::string> PhosArgv(const std::string& socket, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {PHOS_BIN, "--socket", socket};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  static Result Phos(const std::string& socket, const std::vector<std::string>& args) {
    Child c = Child::Start(PhosArgv(socket, args));
    const int rc = c.Wait(60s);
    return {rc, c.output};
  }

  std::vector<std::string> MigrateArgs(pid_t pid, const std::string& token_file) const {
    return {"migrate", "--pid", std::to_string(pid), "--to", to_, "--peer-token", token_file};
  }

  // `phos run` app_ (saxpy_loop unless a test says otherwise) on A (our
  // child in run_), output appended to out_/err_; paused at its midpoint
  // when `pause`.
  void StartApp(bool pause) {
    std::vector<std::string> args = {"run", "--lib", PHOS_LIB_PATH, "--", app_};
    args.insert(args.end(), app_args_.begin(), app_args_.end());
    const std::vector<std::string> argv = PhosArgv(sock_a_, args);
    if (pause) {
      std::vector<std::string> env = {"PHOS_APP_PAUSE=" + pause_};
      env.insert(env.end(), app_env_.begin(), app_env_.end());
      run_ = phos::testing::StartDetached(argv, out_, err_, env);
    } else {
      run_ = phos::testing::StartDetached(argv, out_, err_, {}, {"PHOS_APP_PAUSE"});
    }
    ASSERT_GT(run_, 0);
  }

  // The host pids of app_'s sessions on the phosd at `socket`.
  std::vector<pid_t> Sessions(const std::string& socket) {
    Result ps = Phos(socket, {"ps", "--json"});
    EXPECT_EQ(ps.rc, 0) << ps.output;
    return phos::testing::SessionPids(ps.output, app_);
  }

  // The one app_ session's host pid on `socket`, waiting up to 10 s
  // for it; -1 (and a failure) if there is none.
  pid_t AppPid(const std::string& socket) {
    const auto deadline = Clock::now() + 10s;
    for (;;) {
      const std::vector<pid_t> pids = Sessions(socket);
      if (pids.size() == 1) return pids[0];
      if (Clock::now() > deadline) {
        ADD_FAILURE() << pids.size() << " sessions of " << app_ << " in phos --socket " << socket << " ps";
        return -1;
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  // The uninterrupted run's stdout (on A; once per test binary).
  void GetReference(std::string* ref) {
    const std::string name = BaseName(app_);
    if (Reference(app_).empty()) {
      StartApp(/*pause=*/false);
      const int rc = phos::testing::WaitChildExit(&run_, 60s);
      const std::string out = ReadFile(out_);
      ASSERT_EQ(rc, 0) << name << " uninterrupted under phos run:\n" << out << Logs();
      ASSERT_NE(out.find(name + ": checksum 0x"), std::string::npos) << out;
      ASSERT_NE(out.find(" OK\n"), std::string::npos) << out;
      Reference(app_) = out;
      fs::remove(out_);
      fs::remove(err_);
    }
    *ref = Reference(app_);
  }

  // Starts app_ paused at its midpoint; its host pid in pid_.
  void StartPaused() {
    std::ofstream(pause_).put('\n');
    ASSERT_NO_FATAL_FAILURE(StartApp(/*pause=*/true));
    ASSERT_TRUE(phos::testing::WaitFileText(err_, "paused at midpoint", 60s))
        << BaseName(app_) << " did not reach its midpoint:\n" << ReadFile(out_) << Logs();
    pid_ = AppPid(sock_a_);
    ASSERT_GT(pid_, 0);
    kill_list_.push_back(pid_);
  }

  // After a failed migration: the source runs on, not stopped, A still
  // lists it, nothing is left in A's outgoing/, and released it finishes
  // with the reference output.
  /// After a migration that succeeded: the source was killed once B ran the
  /// copy (its phos run reports that), A dropped the session (its consumer
  /// saw the hang-up) and left nothing in outgoing/.
  void ExpectSourceGone() {
    const int rc = phos::testing::WaitChildExit(&run_, 20s);
    EXPECT_TRUE(rc == 128 + SIGKILL || rc == -SIGKILL) << "phos run ended with " << rc << " after the migration";
    EXPECT_TRUE(phos::testing::WaitEnded(pid_, 10s)) << "the source pid " << pid_ << " still runs after the migration";
    const auto deadline = Clock::now() + 10s;
    while (!Sessions(sock_a_).empty() && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(Sessions(sock_a_).empty()) << "phos ps on A still lists saxpy_loop after the migration";
    EXPECT_TRUE(phos::testing::ListDir(root_a_ + "/outgoing").empty())
        << "left in A's outgoing/: " << phos::testing::JoinNames(phos::testing::ListDir(root_a_ + "/outgoing"));
  }

  void CheckSourceRunsOn(const std::string& ref, const std::string& migrate_output) {
    ASSERT_FALSE(ProcessEnded(pid_)) << "pid " << pid_ << " ended after the failed migration:\n"
                                     << migrate_output << Logs();
    // SIGCONT was sent before the RPC answered; allow the kernel a moment.
    const auto deadline = Clock::now() + 2s;
    char state = phos::testing::ProcessState(pid_);
    while ((state == 'T' || state == 't') && Clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
      state = phos::testing::ProcessState(pid_);
    }
    EXPECT_TRUE(state != 'T' && state != 't') << "pid " << pid_ << " is still stopped (state " << state
                                              << ") after the failed migration:\n" << migrate_output;
    EXPECT_TRUE(phos::testing::ChildRunning(run_)) << "phos run ended after the failed migration";
    const std::vector<pid_t> on_a = Sessions(sock_a_);
    EXPECT_TRUE(std::count(on_a.begin(), on_a.end(), pid_) == 1) << "phos ps on A does not list pid " << pid_;
    EXPECT_TRUE(phos::testing::ListDir(root_a_ + "/outgoing").empty())
        << "left in A's outgoing/: " << phos::testing::JoinNames(phos::testing::ListDir(root_a_ + "/outgoing"));

    fs::remove(pause_);
    EXPECT_EQ(phos::testing::WaitChildExit(&run_, 60s), 0) << ReadFile(err_) << Logs();
    EXPECT_EQ(ReadFile(out_), ref) << "the source after the failed migration:\n" << ReadFile(err_);
    EXPECT_NE(ReadFile(err_).find("resumed after midpoint"), std::string::npos) << ReadFile(err_);
  }

  static phos::Status* check_;
  std::string app_ = kApp;                        // the program a test runs
  std::vector<std::string> app_args_ = {kIters};  // and its arguments
  std::vector<std::string> app_env_;              // and more environment when paused
  std::string dir_, sock_a_, sock_b_, root_a_, root_b_, token_file_, token_, pause_, out_, err_, to_;
  Child daemon_a_, daemon_b_;
  pid_t run_ = -1;  // phos run on A (our child)
  pid_t pid_ = -1;  // the app's host pid on A
  std::vector<pid_t> kill_list_;  // app pids (the source and the copy) to kill if a test ends early
};

phos::Status* MigrateTest::check_ = nullptr;

// ------------------------------------------------------------ it works

using ModeOutput = std::tuple<std::string, bool>;  // --mode, --json

class MigrateOutput : public MigrateTest, public ::testing::WithParamInterface<ModeOutput> {};

TEST_P(MigrateOutput, Migrate_OutputIdentical) {
  const auto& [mode, json] = GetParam();
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  ASSERT_NO_FATAL_FAILURE(StartPaused());

  std::vector<std::string> args = MigrateArgs(pid_, token_file_);
  if (mode != "recopy") args.insert(args.end(), {"--mode", mode});  // recopy is the default
  if (json) args.push_back("--json");
  const Result mg = Phos(sock_a_, args);
  ASSERT_EQ(mg.rc, 0) << mg.output << Logs();

  // The new pid and the downtime, from the summary or the terminal event.
  pid_t copy = -1;
  double downtime_ms = -1;
  std::smatch m;
  if (json) {
    // {"done":{"image_dir":"HOST:PORT:incoming/NAME","pid":Q,...,"counters":{...,"downtime_us":"N"}}}
    // (uint64 as a JSON string).
    ASSERT_TRUE(std::regex_search(mg.output, m, std::regex(R"re(\{"done":\{.*"pid":(\d+),)re"))) << mg.output;
    copy = std::stoi(m[1]);
    ASSERT_TRUE(std::regex_search(mg.output, m, std::regex(R"re("downtime_us":"(\d+)")re"))) << mg.output;
    downtime_ms = std::stod(m[1]) / 1000.0;
    ASSERT_TRUE(std::regex_search(mg.output, m, std::regex(R"re("source_pid":"(\d+)")re"))) << mg.output;
    EXPECT_EQ(std::stoi(m[1]), pid_) << mg.output;
    EXPECT_TRUE(Contains(mg.output, "\"phase\":\"transfer\"")) << mg.output;
    // Pre-copy: the app is paused (writes nothing), so in recopy mode every
    // device byte went during the rounds and none after the freeze; stop
    // has no rounds.
    auto counter = [&](const std::string& key) -> long long {
      std::smatch c;
      if (!std::regex_search(mg.output, c, std::regex("\"" + key + "\":\"(\\d+)\""))) return -1;
      return std::stoll(c[1]);
    };
    ASSERT_TRUE(std::regex_search(mg.output, m, std::regex(R"re("bytes_written":"(\d+)")re"))) << mg.output;
    const long long image_bytes = std::stoll(m[1]);
    const long long gpu_bytes = counter("gpu_bytes"), precopied = counter("precopied_bytes");
    const long long after = counter("bytes_after_stop"), sent_early = counter("precopy_bytes_sent");
    ASSERT_GT(gpu_bytes, 0) << mg.output;
    if (mode == "recopy") {
      EXPECT_EQ(precopied, gpu_bytes) << "every device byte should have been pre-copied:\n" << mg.output;
      EXPECT_GE(sent_early, gpu_bytes) << mg.output;
      EXPECT_EQ(after, image_bytes - precopied) << mg.output;
    } else {
      EXPECT_EQ(precopied, 0) << mg.output;
      EXPECT_EQ(sent_early, 0) << mg.output;
      EXPECT_EQ(after, image_bytes) << mg.output;
    }
  } else {
    const std::regex line("migrated pid " + std::to_string(pid_) + " to " + std::regex_replace(to_, std::regex("\\."), "\\.") +
                          " as pid (\\d+)\n");
    ASSERT_TRUE(std::regex_search(mg.output, m, line)) << mg.output;
    copy = std::stoi(m[1]);
    ASSERT_TRUE(std::regex_search(mg.output, m, std::regex("downtime ([0-9.]+) ms"))) << mg.output;
    downtime_ms = std::stod(m[1]);
    EXPECT_TRUE(std::regex_search(mg.output, std::regex("pre-copy: \\d+ bytes sent while it ran"))) << mg.output;
  }
  kill_list_.push_back(copy);
  EXPECT_GT(downtime_ms, 0) << mg.output;
  EXPECT_LT(downtime_ms, 30000) << mg.output;

  ExpectSourceGone();

  // The copy runs under B, and B keeps the image it restored from.
  ASSERT_FALSE(ProcessEnded(copy)) << "the copy (pid " << copy << ") is not running:\n" << Logs();
  EXPECT_EQ(AppPid(sock_b_), copy) << "phos ps on B";
  const std::vector<std::string> incoming = phos::testing::ListDir(root_b_ + "/incoming");
  ASSERT_EQ(incoming.size(), 1u) << "B's incoming/: " << phos::testing::JoinNames(incoming);
  const std::string img = root_b_ + "/incoming/" + incoming[0];
  EXPECT_EQ(incoming[0].rfind("migrate-" + std::to_string(pid_) + "-", 0), 0u) << incoming[0];
  if (json) {
    EXPECT_NE(mg.output.find(to_ + ":incoming/" + incoming[0] + "\""), std::string::npos) << mg.output;
  }
  for (const char* f : {"manifest", "gpu.img", "criu/inventory.img"}) {
    EXPECT_TRUE(fs::exists(img + "/" + f)) << img << "/" << f << " missing; it holds "
                                           << phos::testing::JoinNames(phos::testing::ListDir(img));
  }

  // Released, the copy prints what an uninterrupted run prints.
  fs::remove(pause_);
  ASSERT_TRUE(phos::testing::WaitEnded(copy, 60s)) << "the copy (pid " << copy << ") did not finish:\n" << Logs();
  EXPECT_EQ(ReadFile(out_), ref) << "the migrated copy (" << mode << "):\n" << ReadFile(err_);
  EXPECT_NE(ReadFile(err_).find("resumed after midpoint"), std::string::npos) << ReadFile(err_);
}

std::string ParamName(const ::testing::TestParamInfo<ModeOutput>& info) {
  return std::get<0>(info.param) + (std::get<1>(info.param) ? "_json" : "_text");
}

INSTANTIATE_TEST_SUITE_P(Modes, MigrateOutput,
                         ::testing::Values(ModeOutput{"recopy", false}, ModeOutput{"recopy", true},
                                           ModeOutput{"stop", false}, ModeOutput{"stop", true}),
                         ParamName);

// A program holding pinned host memory (multi_stream: cudaMallocHost
// buffers, async copies from them queued when it pauses) migrates too: its
// shared host segments travel in CRIU's image and come back mapped where
// they were and registered with B's phosd, contents intact, so the copy
// finishes with the uninterrupted run's output.
TEST_F(MigrateTest, Migrate_PinnedHostMemory) {
  app_ = std::string(PHOS_APPS_DIR) + "/multi_stream";
  app_args_ = {};
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  ASSERT_NO_FATAL_FAILURE(StartPaused());
  const Result mg = Phos(sock_a_, MigrateArgs(pid_, token_file_));
  ASSERT_EQ(mg.rc, 0) << mg.output << Logs();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(mg.output, m, std::regex(R"(as pid (\d+))"))) << mg.output;
  const pid_t copy = std::stoi(m[1]);
  kill_list_.push_back(copy);
  ExpectSourceGone();
  fs::remove(pause_);
  ASSERT_TRUE(phos::testing::WaitEnded(copy, 60s)) << "the copy (pid " << copy << ") did not finish:\n" << Logs();
  EXPECT_EQ(ReadFile(out_), ref) << "the migrated multi_stream:\n" << ReadFile(err_);
  EXPECT_NE(ReadFile(err_).find("resumed after midpoint"), std::string::npos) << ReadFile(err_);
}

// ------------------------------------------------------------ several GPUs

class MigrateTwoGpusTest : public MigrateTest {
 protected:
  std::vector<std::string> SourceExtraFlags() const override { return {"--sim-gpus", "2"}; }
  std::vector<std::string> DestinationExtraFlags() const override { return {"--sim-gpus", "2"}; }
};

// docs/interposer.md "Several GPUs in one process": a process using two GPUs
// migrates live (its default recopy mode copies both GPUs' buffers in
// rounds while it runs, then t2 takes every GPU); at B it finds its state
// on both GPUs and goes on using them (several_gpus.cu checks it all after
// its hold).
TEST_F(MigrateTwoGpusTest, Migrate_AProcessOfTwoGpus) {
  app_ = PHOS_SEVERAL_GPUS;
  const std::string hold = dir_ + "/several.go";
  app_args_ = {hold};
  ASSERT_NO_FATAL_FAILURE(StartApp(/*pause=*/false));
  ASSERT_TRUE(phos::testing::WaitFileText(out_, "several: holding", 60s)) << ReadFile(out_) << Logs();
  pid_ = AppPid(sock_a_);
  ASSERT_GT(pid_, 0);
  kill_list_.push_back(pid_);
  const Result mg = Phos(sock_a_, MigrateArgs(pid_, token_file_));
  ASSERT_EQ(mg.rc, 0) << mg.output << Logs();
  // Recopy ran its rounds (not a stop-the-world fallback): the result's
  // counters print as "N name", in no fixed order.
  std::smatch rounds;
  ASSERT_TRUE(std::regex_search(mg.output, rounds, std::regex(R"((\d+) recopy_rounds)"))) << mg.output;
  EXPECT_GE(std::stoi(rounds[1]), 1) << mg.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(mg.output, m, std::regex(R"(as pid (\d+))"))) << mg.output;
  const pid_t copy = std::stoi(m[1]);
  kill_list_.push_back(copy);
  ExpectSourceGone();
  std::ofstream(hold).put('\n');
  ASSERT_TRUE(phos::testing::WaitEnded(copy, 60s)) << "the copy (pid " << copy << ") did not finish:\n" << Logs();
  const std::string out = ReadFile(out_);
  EXPECT_NE(out.find("several: state intact after the hold"), std::string::npos) << out << ReadFile(err_);
  EXPECT_NE(out.find("several: OK"), std::string::npos) << out << ReadFile(err_);
  EXPECT_EQ(out.find("several_gpus: line "), std::string::npos) << out;  // no failed check
}

// ------------------------------------------------------------ lazy pages

// CRIU's lazy migration needs userfaultfd at the destination, and its page
// server pipes of ~3.2 MiB at the source (criu_command.h
// CheckLazyDumpPrerequisites): this test raises fs.pipe-max-size to 4 MiB
// when it is lower (root) and puts it back after. A host-wide setting:
// every test that migrates lazily lives in this binary, whose tests gtest
// runs one at a time, so no two of them raise and restore it under each
// other.
class LazyPagesEnv {
 public:
  LazyPagesEnv() {
    phos::criu::CriuFeatures f;
    if (!phos::criu::CriuClient::QueryFeatures(&f).ok() || !f.lazy_pages) {
      skip_ = "skipped: CRIU reports no lazy pages (userfaultfd) on this kernel";
      return;
    }
    std::ifstream("/proc/sys/fs/pipe-max-size") >> old_;
    if (old_ >= kNeeded) return;
    if (!(std::ofstream("/proc/sys/fs/pipe-max-size") << kNeeded)) {
      skip_ = "skipped: fs.pipe-max-size is " + std::to_string(old_) + " and cannot be raised here";
      old_ = 0;
      return;
    }
    raised_ = true;
  }
  ~LazyPagesEnv() {
    if (raised_) std::ofstream("/proc/sys/fs/pipe-max-size") << old_;
  }
  const std::string& skip() const { return skip_; }

 private:
  static constexpr long kNeeded = 4 << 20;
  long old_ = 0;
  bool raised_ = false;
  std::string skip_;
};

// The process runs at B before its memory is there: its private pages come
// from A's frozen copy over the data channel (userfaultfd at B). Released,
// it prints what an uninterrupted run prints — any page that did not arrive
// intact would change its output or crash it.
TEST_F(MigrateTest, Migrate_LazyPages) {
  LazyPagesEnv env;
  if (!env.skip().empty()) GTEST_SKIP() << env.skip();
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  ASSERT_NO_FATAL_FAILURE(StartPaused());
  std::vector<std::string> args = MigrateArgs(pid_, token_file_);
  args.insert(args.end(), {"--lazy-pages", "--json"});
  const Result mg = Phos(sock_a_, args);
  ASSERT_EQ(mg.rc, 0) << mg.output << Logs();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(mg.output, m, std::regex(R"re(\{"done":\{.*"pid":(\d+),)re"))) << mg.output;
  const pid_t copy = std::stoi(m[1]);
  kill_list_.push_back(copy);
  // Reported only by the lazy path: B's `criu lazy-pages` delivered the last page.
  EXPECT_TRUE(std::regex_search(mg.output, std::regex(R"re("lazy_pages_ms":"\d+")re"))) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "pulls its memory from here")) << mg.output;
  ExpectSourceGone();

  ASSERT_FALSE(ProcessEnded(copy)) << "the copy (pid " << copy << ") is not running:\n" << Logs();
  EXPECT_EQ(AppPid(sock_b_), copy) << "phos ps on B";
  const std::vector<std::string> incoming = phos::testing::ListDir(root_b_ + "/incoming");
  ASSERT_EQ(incoming.size(), 1u) << "B's incoming/: " << phos::testing::JoinNames(incoming);
  const std::string criu_dir = root_b_ + "/incoming/" + incoming[0] + "/criu";
  EXPECT_TRUE(fs::exists(criu_dir + "/criu-lazy-pages.log")) << criu_dir << " holds "
                                                             << phos::testing::JoinNames(phos::testing::ListDir(criu_dir));
  EXPECT_FALSE(fs::exists(criu_dir + "/lazy-pages.socket")) << "the daemon's socket was left in " << criu_dir;
  // The lazy dump writes its log while it serves, i.e. while A sends the
  // image: that log must stay out of the image (it was sent once, and the
  // send failed at random: "criu-dump.log changed size while being sent").
  EXPECT_FALSE(fs::exists(criu_dir + "/criu-dump.log")) << "A's lazy dump log travelled with the image";

  fs::remove(pause_);
  ASSERT_TRUE(phos::testing::WaitEnded(copy, 60s)) << "the copy (pid " << copy << ") did not finish:\n" << Logs();
  EXPECT_EQ(ReadFile(out_), ref) << "the lazily migrated copy:\n" << ReadFile(err_);
  EXPECT_NE(ReadFile(err_).find("resumed after midpoint"), std::string::npos) << ReadFile(err_);
}

// B's `criu lazy-pages` cannot start (a wrapper in front of criu fails
// that one command): B's restore fails before anything runs there, A's
// lazy dump is ended, and the source — frozen all along — resumes and
// finishes as if nothing happened.
// Fault injection at B: its `criu` is a shell script, WrapperDir()/criu,
// that a fixture writes (WrapperScript) and that ends with the real criu.
// The directory also holds whatever the script leaves for the test.
class MigrateCriuWrapperTest : public MigrateTest {
 protected:
  static std::string WrapperDir() {
    return fs::temp_directory_path() / ("phos_criu_wrapper_" + std::to_string(getpid()));
  }
  /// The script's text (it may use WrapperDir()).
  virtual std::string WrapperScript() const = 0;
  std::vector<std::string> DestinationExtraFlags() const override {
    fs::create_directories(WrapperDir());
    const std::string wrapper = WrapperDir() + "/criu";
    std::ofstream(wrapper) << WrapperScript();
    fs::permissions(wrapper, fs::perms::owner_all);
    return {"--criu-binary", wrapper};
  }
  void TearDown() override {
    MigrateTest::TearDown();
    fs::remove_all(WrapperDir());
  }
};

class MigrateLazyPagesFailTest : public MigrateCriuWrapperTest {
 protected:
  std::string WrapperScript() const override {
    return "#!/bin/sh\n"
           "if [ \"$1\" = lazy-pages ]; then echo 'injected: lazy-pages fails' >&2; exit 3; fi\n"
           "exec criu \"$@\"\n";
  }
};

TEST_F(MigrateLazyPagesFailTest, Migrate_LazyPagesDaemonFailsSourceResumes) {
  LazyPagesEnv env;
  if (!env.skip().empty()) GTEST_SKIP() << env.skip();
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  ASSERT_NO_FATAL_FAILURE(StartPaused());
  std::vector<std::string> args = MigrateArgs(pid_, token_file_);
  args.push_back("--lazy-pages");
  const Result mg = Phos(sock_a_, args);
  EXPECT_NE(mg.rc, 0) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "lazy-pages")) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "migration abandoned")) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "keeps running here")) << mg.output;
  EXPECT_TRUE(Sessions(sock_b_).empty()) << "phos ps on B lists saxpy_loop";
  ASSERT_NO_FATAL_FAILURE(CheckSourceRunsOn(ref, mg.output));
}

// B's phosd dies while the copy runs there without all its memory: the app
// holds 256 MiB of private memory (PHOS_APP_BALLAST_MIB), B's `criu
// lazy-pages` is held (SIGSTOPped by a criu wrapper the moment B's CRIU
// restore returns: CRIU's restore itself needs the daemon, for the pages it
// touches) and phosd B is SIGKILLed once it lists the copy. The copy must
// die with it (its guard, process/lazy_copy_guard.h) rather than run on:
// once A gives up and the orphaned daemon loses its page server, a page it
// never delivered would read as zeros. A cannot confirm the migration and
// resumes the source, whose own memory is checked when it finishes.
class MigrateLazyPagesHeldTest : public MigrateCriuWrapperTest {
 protected:
  // lazy-pages: note its pid (exec keeps it). restore: restore, stop the
  // daemon, and pass the restored pid on.
  std::string WrapperScript() const override {
    return "#!/bin/sh\n"
           "held=" + WrapperDir() + "\n"
           "case \"$1\" in\n"
           "lazy-pages) echo $$ > \"$held/lazy.pid\"; exec criu \"$@\" ;;\n"
           "restore)\n"
           "  criu \"$@\"; rc=$?\n"
           "  kill -STOP \"$(cat \"$held/lazy.pid\")\"\n"
           "  prev=; for a in \"$@\"; do [ \"$prev\" = --pidfile ] && cp \"$a\" \"$held/copy.pid.tmp\"; prev=$a; done\n"
           "  [ -f \"$held/copy.pid.tmp\" ] && mv \"$held/copy.pid.tmp\" \"$held/copy.pid\"\n"
           "  exit $rc ;;\n"
           "esac\n"
           "exec criu \"$@\"\n";
  }
  static pid_t ReadPid(const std::string& path) {
    pid_t pid = -1;
    std::ifstream(path) >> pid;
    return pid;
  }
  void TearDown() override {
    // B's daemon outlives phosd B.
    if (const pid_t daemon = ReadPid(WrapperDir() + "/lazy.pid"); daemon > 0) kill(daemon, SIGKILL);
    MigrateCriuWrapperTest::TearDown();
  }
};

TEST_F(MigrateLazyPagesHeldTest, Migrate_LazyPagesDestinationDiesCopyDiesSourceResumes) {
  LazyPagesEnv env;
  if (!env.skip().empty()) GTEST_SKIP() << env.skip();
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  app_env_ = {"PHOS_APP_BALLAST_MIB=256"};
  ASSERT_NO_FATAL_FAILURE(StartPaused());
  std::vector<std::string> args = MigrateArgs(pid_, token_file_);
  args.push_back("--lazy-pages");
  Child mg = Child::Start(PhosArgv(sock_a_, args));
  // The wrapper moves the pid file into place whole.
  pid_t copy = -1;
  for (const auto until = Clock::now() + 60s; copy <= 0 && Clock::now() < until;) {
    copy = ReadPid(WrapperDir() + "/copy.pid");
    if (copy <= 0) std::this_thread::sleep_for(20ms);
  }
  if (copy <= 0) {
    for (const auto& e : fs::recursive_directory_iterator(root_b_ + "/incoming")) {
      if (e.path().extension() == ".log") std::cerr << "==== " << e.path() << "\n" << ReadFile(e.path()) << "\n";
    }
  }
  ASSERT_GT(copy, 0) << "B's CRIU restored nothing within 60 s:\n" << mg.output << Logs();
  kill_list_.push_back(copy);
  // Listed by B once adopted, which is after its guard started.
  ASSERT_EQ(AppPid(sock_b_), copy) << "phos ps on B" << Logs();
  ASSERT_FALSE(ProcessEnded(copy)) << "the copy ended before B's phosd did:\n" << Logs();

  kill(daemon_b_.pid, SIGKILL);
  EXPECT_EQ(daemon_b_.Wait(10s), -SIGKILL);
  EXPECT_TRUE(phos::testing::WaitEnded(copy, 30s))
      << "the lazily restored copy (pid " << copy << ") runs on without its phosd and without all its memory";

  const int rc = mg.Wait(90s);
  EXPECT_NE(rc, 0) << mg.output;
  EXPECT_NE(rc, -1000) << "phos migrate did not end within 90 s of the destination's death:\n" << mg.output;
  EXPECT_TRUE(Contains(mg.output, "keeps running here")) << mg.output;
  ASSERT_NO_FATAL_FAILURE(CheckSourceRunsOn(ref, mg.output));
}

// ------------------------------------------------------- it fails safely

// The image is ~1.1 MiB; capped at 200 KiB/s its transfer takes ~5 s. B is
// SIGKILLed 1 s into it.
TEST_F(MigrateTest, Migrate_DestinationDiesMidway) {
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  ASSERT_NO_FATAL_FAILURE(StartPaused());

  std::vector<std::string> args = MigrateArgs(pid_, token_file_);
  args.insert(args.end(), {"--max-rate", "200K"});
  Child mg = Child::Start(PhosArgv(sock_a_, args));
  // Progress lines go to stderr (not a terminal): "migrate: transfer ...".
  ASSERT_TRUE(mg.ReadUntil("migrate: transfer", 30s)) << "no transfer phase:\n" << mg.output << Logs();
  std::this_thread::sleep_for(1s);
  mg.ReadUntil("\x01never", 10ms);
  ASSERT_TRUE(phos::testing::ChildRunning(mg.pid) && mg.output.find("remote-restore") == std::string::npos)
      << "the transfer ended within 1 s (the test needs it to run longer: more data or a lower --max-rate):\n"
      << mg.output;

  kill(daemon_b_.pid, SIGKILL);
  EXPECT_EQ(daemon_b_.Wait(10s), -SIGKILL);
  const int rc = mg.Wait(60s);
  EXPECT_NE(rc, 0) << mg.output;
  EXPECT_NE(rc, -1000) << "phos migrate did not end within 60 s of the destination's death:\n" << mg.output;
  EXPECT_TRUE(Contains(mg.output, "migration abandoned")) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "pid " + std::to_string(pid_))) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "keeps running here")) << mg.output;

  ASSERT_NO_FATAL_FAILURE(CheckSourceRunsOn(ref, mg.output));
}

TEST_F(MigrateTest, Migrate_WrongTokenRefused) {
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  ASSERT_NO_FATAL_FAILURE(StartPaused());

  const std::string wrong_file = dir_ + "/wrong-token";
  std::string wrong;
  ASSERT_NO_FATAL_FAILURE(WriteToken(wrong_file, &wrong));
  ASSERT_NE(wrong, token_);
  const Result mg = Phos(sock_a_, MigrateArgs(pid_, wrong_file));
  EXPECT_NE(mg.rc, 0) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "token")) << mg.output;
  EXPECT_TRUE(Contains(mg.output, "keeps running here")) << mg.output;
  EXPECT_EQ(mg.output.find(wrong), std::string::npos) << "the message shows the token:\n" << mg.output;

  // Nothing reached B.
  EXPECT_TRUE(phos::testing::ListDir(root_b_ + "/incoming").empty())
      << "B's incoming/: " << phos::testing::JoinNames(phos::testing::ListDir(root_b_ + "/incoming"));
  EXPECT_TRUE(Sessions(sock_b_).empty()) << "phos ps on B lists saxpy_loop";

  ASSERT_NO_FATAL_FAILURE(CheckSourceRunsOn(ref, mg.output));
}


// ------------------------------------------------- a lost restore reply

// B runs with --test-drop-restore-reply: it restores and resumes the copy,
// then answers RestoreImage with UNAVAILABLE, as if the connection dropped
// just after the copy started running. The source must not resume its own
// copy: it asks B's RestoreStatus, hears RUNNING, and completes the
// migration (docs/migration.md "Lost restore reply").
class MigrateLostReplyTest : public MigrateTest {
 protected:
  std::vector<std::string> DestinationExtraFlags() const override { return {"--test-drop-restore-reply"}; }

  // Live (not zombie) processes running saxpy_loop whose stdout is out_:
  // the source and copies of this test's app, never another test's.
  std::vector<pid_t> AppProcesses() const {
    std::error_code ec;
    const fs::path app = fs::weakly_canonical(kApp, ec);
    const fs::path out = fs::weakly_canonical(out_, ec);
    std::vector<pid_t> pids;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || !std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); })) {
        continue;
      }
      std::error_code e1, e2;
      const fs::path exe = fs::read_symlink(e.path() / "exe", e1);
      const fs::path fd1 = fs::read_symlink(e.path() / "fd" / "1", e2);
      if (e1 || e2 || exe != app || fd1 != out) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(name));
      const char state = phos::testing::ProcessState(pid);
      if (state != 'Z' && state != 'X' && state != '\0') pids.push_back(pid);
    }
    return pids;
  }
};

TEST_F(MigrateLostReplyTest, Migrate_LostRestoreReplyRecovered) {
  std::string ref;
  ASSERT_NO_FATAL_FAILURE(GetReference(&ref));
  ASSERT_NO_FATAL_FAILURE(StartPaused());
  ASSERT_EQ(AppProcesses(), std::vector<pid_t>{pid_}) << "before the migration";

  // --mode stop: what is tested happens after the image arrived, however
  // it got there (no pre-copy stream to depend on).
  std::vector<std::string> args = MigrateArgs(pid_, token_file_);
  args.insert(args.end(), {"--mode", "stop"});
  const Result mg = Phos(sock_a_, args);
  if (mg.rc != 0) {  // both copies may run: TearDown ends every one
    for (pid_t p : AppProcesses()) kill_list_.push_back(p);
  }
  ASSERT_EQ(mg.rc, 0) << "the lost reply was not recovered:\n" << mg.output << Logs();
  std::smatch m;
  const std::regex line("migrated pid " + std::to_string(pid_) + " to " +
                        std::regex_replace(to_, std::regex("\\."), "\\.") + " as pid (\\d+)\n");
  ASSERT_TRUE(std::regex_search(mg.output, m, line)) << mg.output;
  const pid_t copy = std::stoi(m[1]);
  kill_list_.push_back(copy);
  ASSERT_TRUE(std::regex_search(mg.output, m, std::regex("downtime ([0-9.]+) ms"))) << mg.output;
  EXPECT_GT(std::stod(m[1]), 0) << "the downtime comes from RestoreStatus's copy of the reply:\n" << mg.output;

  // The reply really was dropped, and the source recovered through RestoreStatus.
  const std::string log_a = DaemonLog(daemon_a_), log_b = DaemonLog(daemon_b_);
  EXPECT_TRUE(Contains(log_b, "answering UNAVAILABLE instead of the outcome")) << log_b;
  EXPECT_TRUE(Contains(log_b, "RESTORE_STATE_RUNNING")) << log_b;
  EXPECT_TRUE(Contains(log_a, "RestoreStatus says pid " + std::to_string(copy) + " runs there")) << log_a;
  EXPECT_FALSE(Contains(log_a, "migration abandoned")) << log_a;

  ExpectSourceGone();

  // Exactly one copy runs, at B.
  ASSERT_FALSE(ProcessEnded(copy)) << "the copy (pid " << copy << ") is not running:\n" << Logs();
  EXPECT_EQ(AppPid(sock_b_), copy) << "phos ps on B";
  EXPECT_EQ(AppProcesses(), std::vector<pid_t>{copy}) << "saxpy_loop processes writing " << out_;

  // Released, the copy prints what an uninterrupted run prints.
  fs::remove(pause_);
  ASSERT_TRUE(phos::testing::WaitEnded(copy, 60s)) << "the copy (pid " << copy << ") did not finish:\n" << Logs();
  EXPECT_EQ(ReadFile(out_), ref) << "the migrated copy:\n" << ReadFile(err_);
  EXPECT_NE(ReadFile(err_).find("resumed after midpoint"), std::string::npos) << ReadFile(err_);
}

}  // namespace
