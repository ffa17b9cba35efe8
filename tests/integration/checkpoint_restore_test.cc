// Stop-the-world GPU-only checkpoint and in-place restore, end to end:
// phosd (sim backend) + `phos run` + libphos.so + checkpoint_app.cu, driven
// through `phos checkpoint` / `phos restore` / `phos inspect`.
// docs/protocols.md "Stop-the-world", docs/control-plane.md.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "harness.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

using phos::testing::Child;
using phos::testing::Clock;
using phos::testing::WaitForDataSocket;
using namespace std::chrono_literals;

struct Result {
  int rc;
  std::string output;
};

class CheckpointRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos_cr_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/phosd.sock";
    ctl_ = dir_ + "/ctl";
    std::filesystem::create_directories(ctl_);
    daemon_ = Child::Start({PHOS_BIN, "daemon", "--backend", "sim", "--socket", socket_});
    ASSERT_TRUE(WaitReady(20s)) << daemon_.output;
  }
  void TearDown() override {
    if (app_.pid > 0) {
      kill(app_.pid, SIGKILL);
      app_.Wait(5000ms);
    }
    if (daemon_.pid > 0) {
      kill(daemon_.pid, SIGTERM);
      EXPECT_NE(daemon_.Wait(10000ms), -1000) << "phosd did not stop on SIGTERM";
    }
    std::filesystem::remove_all(dir_);
  }

  bool WaitReady(std::chrono::milliseconds limit) { return WaitForDataSocket(socket_, limit); }

  // Starts checkpoint_app under phos run; returns its pid (the session's).
  int StartApp() {
    app_ = Child::Start({PHOS_BIN, "--socket", socket_, "run", "--lib", PHOS_LIB_PATH, "--", PHOS_CHECKPOINT_APP,
                         ctl_});
    if (!app_.ReadUntil("checkpoint_app: ready pid ", 60s) || !app_.ReadUntil("\n", 5s)) return -1;
    std::smatch m;
    std::regex re("ready pid (\\d+)");
    if (!std::regex_search(app_.output, m, re)) return -1;
    return std::stoi(m[1]);
  }

  // Sends one command to the app; returns what it printed for it.
  std::string Cmd(const std::string& cmd) {
    const int n = next_cmd_++;
    const std::string tmp = ctl_ + "/tmp";
    {
      std::ofstream f(tmp);
      f << cmd << "\n";
    }
    std::filesystem::rename(tmp, ctl_ + "/cmd-" + std::to_string(n));
    const size_t from = app_.output.size();
    const std::string ack = "ack " + std::to_string(n) + "\n";
    EXPECT_TRUE(app_.ReadUntil(ack, 120s)) << "no ack for '" << cmd << "':\n" << app_.output;
    return app_.output.substr(from);
  }

  Result Phos(std::vector<std::string> args) {
    std::vector<std::string> argv = {PHOS_BIN, "--socket", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    Child c = Child::Start(argv);
    const int rc = c.Wait(120s);
    return {rc, c.output};
  }

  void StepsSurviveEveryModeAndRestore(const std::string& step_cmd);
  static std::string Field(const std::string& text, const std::string& key) {
    std::smatch m;
    std::regex re(key + " (\\S+)");
    return std::regex_search(text, m, re) ? std::string(m[1]) : "";
  }

  std::string dir_, socket_, ctl_;
  Child daemon_, app_;
  int next_cmd_ = 0;
};

TEST_F(CheckpointRestoreTest, CheckpointStepRestoreRollsTheDeviceStateBack) {
  const int pid = StartApp();
  ASSERT_GT(pid, 0) << app_.output;
  std::string at3;
  for (int i = 1; i <= 3; ++i) at3 = Cmd("step");
  ASSERT_NE(at3.find("step 3 checksum"), std::string::npos) << at3;
  const std::string sum3 = Field(at3, "checksum");
  ASSERT_FALSE(sum3.empty());

  const std::string img = dir_ + "/img1";
  Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--out", img});
  ASSERT_EQ(ck.rc, 0) << ck.output << daemon_.output;
  EXPECT_NE(ck.output.find("checkpoint OK: " + img), std::string::npos) << ck.output;
  EXPECT_NE(ck.output.find("stall "), std::string::npos) << ck.output;
  EXPECT_NE(ck.output.find("checkpoint: copy"), std::string::npos) << ck.output;  // plain progress lines
  EXPECT_TRUE(std::filesystem::exists(img + "/manifest"));
  EXPECT_FALSE(std::filesystem::exists(img + ".tmp"));

  // The app went on running; move it on, free a buffer, allocate another.
  const std::string at4 = Cmd("step");
  ASSERT_NE(at4.find("step 4 checksum"), std::string::npos) << at4;
  EXPECT_NE(Field(at4, "checksum"), sum3);
  const std::string sum4 = Field(at4, "checksum");
  Cmd("step");
  Cmd("freescratch");
  Cmd("alloc");

  Result rs = Phos({"restore", img, "--gpu-only", "--pid", std::to_string(pid)});
  ASSERT_EQ(rs.rc, 0) << rs.output << daemon_.output;
  EXPECT_NE(rs.output.find("restore OK: " + img), std::string::npos) << rs.output;
  EXPECT_NE(rs.output.find("1 allocated"), std::string::npos) << rs.output;  // scratch, at its old address
  EXPECT_NE(rs.output.find("1 freed"), std::string::npos) << rs.output;      // the buffer made after

  // The device is back at step 3: kernel state, the multi-chunk buffer and
  // the __device__ counter (a module global).
  const std::string back = Cmd("print");
  EXPECT_EQ(Field(back, "checksum"), sum3) << back;
  EXPECT_EQ(Field(back, "verify-step"), "3") << back;
  EXPECT_EQ(Field(back, "verify-big"), "3") << back;
  EXPECT_EQ(Field(back, "steps"), "3") << back;
  // A module variable the host never named, which only kernels touch.
  EXPECT_EQ(Field(back, "ksteps"), "3") << back;
  EXPECT_NE(Cmd("checkscratch").find("scratch OK"), std::string::npos);

  // And continues correctly from there (the host's own step counter is not
  // rolled back by a GPU-only restore: `big` gets step 6's pattern).
  const std::string on = Cmd("step");
  EXPECT_NE(on.find("steps 4"), std::string::npos) << on;
  const std::string after = Cmd("print");
  EXPECT_EQ(Field(after, "verify-step"), "4") << after;
  EXPECT_EQ(Field(after, "verify-big"), "6") << after;
  (void)sum4;

  // `phos inspect` verifies the image.
  Result in = Phos({"inspect", img});
  EXPECT_EQ(in.rc, 0) << in.output;
  EXPECT_NE(in.output.find("OK"), std::string::npos) << in.output;

  // A corrupt image is refused before the session is touched.
  {
    std::fstream f(img + "/gpu.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5A);
    f.seekp(4096 + 100);
    f.write(&c, 1);
  }
  Result bad = Phos({"restore", img, "--gpu-only", "--pid", std::to_string(pid)});
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_NE(bad.output.find("checksum mismatch"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("untouched"), std::string::npos) << bad.output;
  const std::string same = Cmd("print");
  EXPECT_EQ(Field(same, "verify-step"), "4") << same;
  EXPECT_EQ(Field(same, "steps"), "4") << same;
  Result bad_inspect = Phos({"inspect", img});
  EXPECT_EQ(bad_inspect.rc, 1) << bad_inspect.output;

  EXPECT_NE(Cmd("quit").find("ack"), std::string::npos);
  EXPECT_EQ(app_.Wait(30s), 0) << app_.output;
}

TEST_F(CheckpointRestoreTest, DefaultDirectoryJsonAndRefusals) {
  const int pid = StartApp();
  ASSERT_GT(pid, 0) << app_.output;
  Cmd("step");

  // Default directory: <state dir = socket's dir>/checkpoints/<class>/<pid>-<time>;
  // --json prints one event per line, progress and the result.
  Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--json"});
  ASSERT_EQ(ck.rc, 0) << ck.output << daemon_.output;
  EXPECT_NE(ck.output.find("\"phase\":\"copy\""), std::string::npos) << ck.output;
  EXPECT_NE(ck.output.find("\"stall_us\""), std::string::npos) << ck.output;
  std::string image;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/checkpoints/manual")) image = e.path().string();
  ASSERT_FALSE(image.empty());
  EXPECT_EQ(std::filesystem::path(image).filename().string().rfind(std::to_string(pid) + "-", 0), 0u) << image;
  EXPECT_NE(ck.output.find(image), std::string::npos) << ck.output;
  Result in = Phos({"inspect", image});
  EXPECT_EQ(in.rc, 0) << in.output;

  // The same --out twice: refused, the first image intact.
  Result again = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--out", image});
  EXPECT_EQ(again.rc, 1) << again.output;
  EXPECT_EQ(Phos({"inspect", image}).rc, 0);

  // No session for this pid.
  Result none = Phos({"checkpoint", "--pid", std::to_string(getpid()), "--gpu-only"});
  EXPECT_EQ(none.rc, 1) << none.output;
  EXPECT_NE(none.output.find("no phos session for pid " + std::to_string(getpid())), std::string::npos)
      << none.output;
  Result none_restore = Phos({"restore", image, "--gpu-only", "--pid", std::to_string(getpid())});
  EXPECT_EQ(none_restore.rc, 1) << none_restore.output;
  EXPECT_NE(none_restore.output.find("no phos session"), std::string::npos) << none_restore.output;

  // An unknown mode. (Whole-process checkpoints: process_restore_test.cc.)
  Result bad_mode = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--mode", "fast"});
  EXPECT_NE(bad_mode.rc, 0) << bad_mode.output;
  EXPECT_NE(bad_mode.output.find("--mode"), std::string::npos) << bad_mode.output;
  // A GPU-only image is no whole-process image.
  Result whole_restore = Phos({"restore", image});
  EXPECT_EQ(whole_restore.rc, 1) << whole_restore.output;
  EXPECT_NE(whole_restore.output.find("not a whole-process image"), std::string::npos) << whole_restore.output;

  // A directory that is not an image.
  Result notimg = Phos({"restore", dir_ + "/ctl", "--gpu-only", "--pid", std::to_string(pid)});
  EXPECT_EQ(notimg.rc, 1) << notimg.output;

  // The app is unaffected by all of this.
  const std::string st = Cmd("print");
  EXPECT_EQ(Field(st, "verify-step"), "1") << st;
  Cmd("quit");
  EXPECT_EQ(app_.Wait(30s), 0) << app_.output;
}

// A context with a sticky kernel fault is refused: its device state is
// meaningless. No image (and no .tmp) is left behind.
TEST_F(CheckpointRestoreTest, StickyFaultRefusesTheCheckpoint) {
  const int pid = StartApp();
  ASSERT_GT(pid, 0) << app_.output;
  Cmd("step");
  const std::string f = Cmd("fault");
  ASSERT_NE(f.find("fault: "), std::string::npos) << f;
  ASSERT_EQ(f.find("fault: no error"), std::string::npos) << f;
  const std::string img = dir_ + "/faulted";
  Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--out", img});
  EXPECT_EQ(ck.rc, 1) << ck.output;
  EXPECT_NE(ck.output.find("sticky error"), std::string::npos) << ck.output;
  EXPECT_FALSE(std::filesystem::exists(img));
  EXPECT_FALSE(std::filesystem::exists(img + ".tmp"));
}

// Soft copy-on-write through the CLI, the `latest` lifecycle class with its
// retention, a (default: concurrent) restore from the newest image, and the
// operation counters in `phos status`.
TEST_F(CheckpointRestoreTest, CowCheckpointsRetentionAndConcurrentRestore) {
  const int pid = StartApp();
  ASSERT_GT(pid, 0) << app_.output;
  std::string last;
  for (const char* name : {"a", "b", "c"}) {
    last = Cmd("step");
    Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--mode", "cow", "--keep", "latest",
                      "--keep-count", "2", "--name", name});
    ASSERT_EQ(ck.rc, 0) << ck.output << daemon_.output;
  }
  const std::string sum = Field(last, "checksum");
  const std::string latest = dir_ + "/checkpoints/latest";
  EXPECT_FALSE(std::filesystem::exists(latest + "/a")) << "retention kept more than --keep-count 2";
  EXPECT_TRUE(std::filesystem::exists(latest + "/b/manifest"));
  EXPECT_TRUE(std::filesystem::exists(latest + "/c/manifest"));
  std::string mode;
  Result in = Phos({"inspect", latest + "/c", "--json"});
  EXPECT_EQ(in.rc, 0) << in.output;
  EXPECT_NE(in.output.find("\"cow\""), std::string::npos) << in.output;

  Cmd("step");
  Cmd("step");
  Result rs = Phos({"restore", latest + "/c", "--gpu-only", "--pid", std::to_string(pid)});
  ASSERT_EQ(rs.rc, 0) << rs.output << daemon_.output;
  const std::string back = Cmd("print");
  EXPECT_EQ(Field(back, "checksum"), sum) << back;
  EXPECT_EQ(Field(back, "verify-step"), "3") << back;

  // `phos ps`: 3 checkpoints, 1 restore, no fallback for this session.
  Result ps = Phos({"ps", "--pid", std::to_string(pid)});
  EXPECT_EQ(ps.rc, 0) << ps.output;
  EXPECT_NE(ps.output.find("3/1/0"), std::string::npos) << ps.output;
  Result st = Phos({"status"});
  EXPECT_EQ(st.rc, 0) << st.output;
  EXPECT_NE(st.output.find("checkpoints"), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("restores"), std::string::npos) << st.output;
  Cmd("quit");
  EXPECT_EQ(app_.Wait(30s), 0) << app_.output;
}

// Steps made by `step_cmd` (a variant of `step`), checkpointed in each mode
// while such steps go on, restored (stop-the-world and concurrently): the
// device is back at the checkpointed step and the app's objects (an
// executable graph, ...) keep stepping from there.
void CheckpointRestoreTest::StepsSurviveEveryModeAndRestore(const std::string& step_cmd) {
  const int pid = StartApp();
  ASSERT_GT(pid, 0) << app_.output;
  int step = 0;  // the app's step counter (a GPU-only restore does not roll it back)
  int dev = 0;   // kernel steps the device state has had
  for (const char* mode : {"stop", "cow", "recopy"}) {
    SCOPED_TRACE(mode);
    const std::string at = Cmd(step_cmd);
    ++step;
    ++dev;
    ASSERT_NE(at.find("step " + std::to_string(step) + " checksum"), std::string::npos) << at << daemon_.output;
    const int dev_at = dev;
    const std::string img = dir_ + "/" + step_cmd + "-" + mode;
    Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--mode", mode, "--out", img});
    ASSERT_EQ(ck.rc, 0) << ck.output << daemon_.output;
    Cmd(step_cmd);
    ++step;
    ++dev;
    for (const char* how : {"--stop-the-world", "--concurrent"}) {
      Result rs = Phos({"restore", img, "--gpu-only", "--pid", std::to_string(pid), how});
      ASSERT_EQ(rs.rc, 0) << how << "\n" << rs.output << daemon_.output;
      dev = dev_at;
      const std::string back = Cmd("print");
      EXPECT_EQ(Field(back, "checksum"), Field(at, "checksum")) << how << "\n" << back;
      EXPECT_EQ(Field(back, "verify-step"), std::to_string(dev)) << how << "\n" << back;
    }
    Cmd(step_cmd);
    ++step;
    ++dev;
    const std::string after = Cmd("print");
    EXPECT_EQ(Field(after, "verify-step"), std::to_string(dev)) << after;
    EXPECT_EQ(Field(after, "verify-big"), std::to_string(step)) << after;
  }
  Cmd("quit");
  EXPECT_EQ(app_.Wait(30s), 0) << app_.output;
}

// docs/interposer.md "CUDA graphs": steps made by launching a captured
// graph (the same executable graph keeps stepping after each restore).
TEST_F(CheckpointRestoreTest, GraphLaunchesAcrossCheckpointsAndRestores) { StepsSurviveEveryModeAndRestore("graphstep"); }

// docs/interposer.md "CUDA arrays, textures and surfaces": steps whose
// kernel reads through a texture object and stores through a surface of a
// CUDA array (the objects' buffers are in every launch's access set).
TEST_F(CheckpointRestoreTest, TextureStepsAcrossCheckpointsAndRestores) { StepsSurviveEveryModeAndRestore("texstep"); }

// docs/interposer.md "CUDA graphs", conditional nodes: steps made by an if
// node whose value a kernel sets from device data. The handle's slot is
// device memory the image carries.
TEST_F(CheckpointRestoreTest, ConditionalGraphLaunchesAcrossCheckpointsAndRestores) {
  StepsSurviveEveryModeAndRestore("condstep");
}

// docs/interposer.md "The driver's virtual-memory API": steps that also
// advance arrays in memory the app mapped itself (back-to-back cuMemMap
// mappings of one reserved range; the kernel writes across a boundary
// through a pointer into the first mapping, a copy crosses another),
// checkpointed in each mode while such steps go on and restored
// stop-the-world and concurrently. A protocol that tracked only the mapping
// a kernel's pointer names would miss the writes to the next one; the
// restored arrays must match the checkpointed step's CPU reference.
TEST_F(CheckpointRestoreTest, AppMappedMemoryAcrossCheckpointsAndRestores) {
  const int pid = StartApp();
  ASSERT_GT(pid, 0) << app_.output;
  int vmm = 0;     // vmmsteps the device state has had
  int vsteps = 0;  // the app's vmmstep counter (a GPU-only restore does not roll it back)
  for (const char* mode : {"stop", "cow", "recopy"}) {
    SCOPED_TRACE(mode);
    const std::string at = Cmd("vmmstep");
    ++vmm;
    ++vsteps;
    ASSERT_NE(at.find(" checksum "), std::string::npos) << at << daemon_.output;
    const int vmm_at = vmm;
    const int vbig_at = vsteps;  // vbig holds the pattern of the app's vmmstep count
    const std::string img = dir_ + "/vmm-" + mode;
    Result ck = Phos({"checkpoint", "--pid", std::to_string(pid), "--gpu-only", "--mode", mode, "--out", img});
    ASSERT_EQ(ck.rc, 0) << ck.output << daemon_.output;
    Cmd("vmmstep");
    ++vmm;
    ++vsteps;
    for (const char* how : {"--stop-the-world", "--concurrent"}) {
      Result rs = Phos({"restore", img, "--gpu-only", "--pid", std::to_string(pid), how});
      ASSERT_EQ(rs.rc, 0) << how << "\n" << rs.output << daemon_.output;
      vmm = vmm_at;
      const std::string back = Cmd("print");
      EXPECT_EQ(Field(back, "checksum"), Field(at, "checksum")) << how << "\n" << back;
      EXPECT_EQ(Field(back, "verify-vmm"), std::to_string(vmm)) << how << "\n" << back;
      EXPECT_EQ(Field(back, "verify-vbig"), std::to_string(vbig_at)) << how << "\n" << back;
    }
    // The app's mappings are where it left them: steps go on.
    Cmd("vmmstep");
    ++vmm;
    ++vsteps;
    const std::string after = Cmd("print");
    EXPECT_EQ(Field(after, "verify-vmm"), std::to_string(vmm)) << after;
    EXPECT_EQ(Field(after, "verify-vbig"), std::to_string(vsteps)) << after;
  }
  Cmd("quit");
  EXPECT_EQ(app_.Wait(30s), 0) << app_.output;
}

TEST_F(CheckpointRestoreTest, NoDaemonIsAClearError) {
  Child c = Child::Start({PHOS_BIN, "--socket", dir_ + "/nothing.sock", "checkpoint", "--pid", "1", "--gpu-only"});
  EXPECT_EQ(c.Wait(60s), 1) << c.output;
  EXPECT_NE(c.output.find(dir_ + "/nothing.sock"), std::string::npos) << c.output;  // says where it looked
}

}  // namespace
