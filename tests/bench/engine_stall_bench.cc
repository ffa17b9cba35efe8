// engine_stall_bench: what the C/R engine's checkpoint and restore modes
// cost a running application (issue #5 item 7; docs/benchmarks.md "C/R
// engine: stall and restore"). A plain program, not Google Benchmark and not
// a ctest test: one run takes tens of seconds and gigabytes of memory.
//
// In-process, like the engine tests: a sim backend with a throttled
// host<->device link (--link-gbps, `phosd --sim-link-gbps`), a real
// session::SessionServer with the engine's admission hook, and a fake app
// (tests/unit/session/fake_app.h) speaking the wire protocol through the
// data-plane ring.
//
// The app allocates --buffers x --buffer-mib and fills them. A writer
// thread then loops "iterations": --touch async memsets of --write-mib into
// random buffers, one async D2D of --write-mib between two random buffers,
// a cudaDeviceSynchronize and a 4-byte synchronous D2H (a "loss" read), then
// --think-us of host time. Only the synchronous calls can block the app, so
// their latency is the user-visible stall; every one is timed.
//
// Checkpoints: for each --modes entry the writer first runs --baseline-ms
// with no operation (its worst call latency and iteration rate there are
// the reference), then the main thread checkpoints in that mode into a
// fresh directory under --dir, and the image is deleted afterwards.
// Reported per mode: the engine's result.stall_us, the wall time of
// engine::Checkpoint, the worst synchronous call latency and the worst
// iteration among those overlapping the checkpoint, the app's iteration
// rate during it relative to the baseline, the counters, and when each
// progress phase began.
//
// Restore ("time to first kernel"): the writer stops, every buffer is set to
// byte A and a stop-the-world checkpoint is taken; then, for each restore
// (stop and concurrent verifying each chunk as it loads — the image is read
// once —, then stop verifying everything first, engine::Verify): every
// buffer is set to byte B, engine::Restore
// starts on a thread, and the app reads the last 4 bytes of each buffer in
// the image's load order (a stop image has no first-use order: ascending
// address), polling the first one until it reads A. Reported: time from
// Restore() start until the first such read returned A (time to first
// kernel), until the read of the last buffer in load order returned
// (everything the app needs is back), the engine's stall_us / total_us, and
// the phase timeline, and the stop restore's read rate (image bytes over
// its "copy" phase; with --fio, fio's sequential O_DIRECT read of the same
// gpu.img right after each round is its baseline). --restore-rounds N runs
// the three restores N times in turn: this VM's disk rate drifts.
//
// Before the checkpoints it times one malloc + D2D of a buffer's size into
// fresh memory (what a cow shadow costs the app's stream on this backend)
// and one D2D into memory already touched.
//
// Variants for finding where time goes: --d2d false (no D2D in the
// writer), --hot-buffers N (writes confined to N buffers), --trace-ms N
// (list the app's synchronous calls slower than N ms during each
// checkpoint, with their start relative to Checkpoint()).
//
// Only ratios measured in one run mean much on a shared machine.
//
//   build/tests/bench/engine_stall_bench --buffers 64 --buffer-mib 64 --link-gbps 25 --json out.json
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "backend/backend_factory.h"
#include "common/logging.h"
#include "engine/engine_hook.h"
#include "engine/operations.h"
#include "engine/shadow_pool.h"
#include "engine/progress.h"
#include "fake_app.h"
#include "session/session_server.h"

namespace {

using namespace phos;
using Clock = std::chrono::steady_clock;
using session::testing::FakeApp;
using wire::WireStatus;
constexpr WireStatus kOk = WireStatus::kSuccess;

const Clock::time_point g_epoch = Clock::now();
std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - g_epoch).count();
}

struct Flags {
  int buffers = 64;
  std::uint64_t buffer_mib = 64;
  double link_gbps = 25.0;
  int copy_engines = 2;
  std::string dir = "/var/tmp";
  std::vector<std::string> modes = {"stop", "cow", "recopy"};
  std::uint64_t cow_reserve_mib = 2048;
  int recopy_rounds = 5;
  int touch = 4;
  std::uint64_t write_mib = 8;
  std::uint64_t think_us = 2000;
  bool d2d = true;
  int hot_buffers = 0;  // 0: the writer picks from every buffer
  std::uint64_t baseline_ms = 1000;
  bool restore = true;
  std::string keep_restore_image;  // move the restores' image here instead of deleting it
  int restore_rounds = 1;          // the three restores, this many times in turn
  bool fio = false;                // fio on the restores' gpu.img after each round
  std::uint64_t seed = 1;
  std::string json;
  std::string log_level = "warn";
  std::uint64_t trace_ms = 0;
};

// ---------------------------------------------------------------- the writer

struct Sample {
  std::int64_t start_us, end_us;
  const char* what = "";
};

/// The app's steady-state loop on its own thread. Samples are appended
/// under mu_; the main thread copies them out.
class Writer {
 public:
  Writer(FakeApp* app, const std::vector<std::uint64_t>& bufs, const Flags& f) : app_(app), bufs_(bufs), f_(f) {}
  ~Writer() { Stop(); }

  void Start() {
    stop_.store(false);
    thread_ = std::thread([this] { Run(); });
  }
  /// Returns false if a call failed (message in error()).
  bool Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return error_.empty();
  }
  const std::string& error() const { return error_; }

  struct Window {
    std::uint64_t iterations = 0;       // iterations that ended in the window
    std::uint64_t sync_calls = 0;       // synchronous calls overlapping it
    std::uint64_t worst_call_us = 0;    // worst synchronous call overlapping it
    std::uint64_t worst_iteration_us = 0;
    double seconds = 0;
    double rate() const { return seconds > 0 ? static_cast<double>(iterations) / seconds : 0; }
  };
  Window Stats(std::int64_t from_us, std::int64_t to_us) {
    std::lock_guard<std::mutex> lock(mu_);
    Window w;
    w.seconds = static_cast<double>(to_us - from_us) / 1e6;
    auto overlaps = [&](const Sample& s) { return s.end_us >= from_us && s.start_us <= to_us; };
    for (const Sample& s : calls_) {
      if (!overlaps(s)) continue;
      ++w.sync_calls;
      w.worst_call_us = std::max<std::uint64_t>(w.worst_call_us, static_cast<std::uint64_t>(s.end_us - s.start_us));
    }
    for (const Sample& s : iterations_) {
      if (s.end_us >= from_us && s.end_us <= to_us) ++w.iterations;
      if (overlaps(s)) {
        w.worst_iteration_us =
            std::max<std::uint64_t>(w.worst_iteration_us, static_cast<std::uint64_t>(s.end_us - s.start_us));
      }
    }
    return w;
  }
  /// Synchronous calls overlapping [from, to] that took >= min_us.
  std::vector<Sample> Slow(std::int64_t from_us, std::int64_t to_us, std::int64_t min_us) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Sample> out;
    for (const Sample& s : calls_) {
      if (s.end_us >= from_us && s.start_us <= to_us && s.end_us - s.start_us >= min_us) out.push_back(s);
    }
    return out;
  }

 private:
  std::uint64_t Next() {  // xorshift64: the same pattern every run
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_;
  }
  bool Check(WireStatus w, const char* what) {
    if (w == kOk) return true;
    error_ = std::string(what) + " failed: " + app_->message();
    return false;
  }
  void Run() {
    const std::uint64_t buf_bytes = f_.buffer_mib << 20;
    const std::uint64_t len = std::min<std::uint64_t>(f_.write_mib << 20, buf_bytes);
    const std::uint64_t slots = buf_bytes / len;
    const std::uint64_t n = f_.hot_buffers > 0 ? std::min<std::uint64_t>(f_.hot_buffers, bufs_.size()) : bufs_.size();
    for (std::uint64_t it = 0; !stop_.load(); ++it) {
      const std::int64_t t0 = NowUs();
      for (int k = 0; k < f_.touch; ++k) {
        const std::uint64_t b = bufs_[Next() % n] + (Next() % slots) * len;
        if (!Check(app_->Memset(b, static_cast<std::uint32_t>(it & 0xff), 1, len, 0, /*sync=*/false), "memset")) return;
      }
      const std::uint64_t src = bufs_[Next() % n] + (Next() % slots) * len;
      const std::uint64_t dst = bufs_[Next() % n] + (Next() % slots) * len;
      if (f_.d2d && src != dst) {
        if (!Check(app_->D2D(dst, src, len, 0, /*sync=*/false), "d2d")) return;
      }
      std::int64_t c0 = NowUs();
      if (!Check(app_->DeviceSync(), "device sync")) return;
      std::int64_t c1 = NowUs();
      std::uint32_t loss = 0;
      if (!Check(app_->D2H(&loss, bufs_[Next() % n], sizeof loss), "d2h")) return;
      const std::int64_t c2 = NowUs();
      {
        std::lock_guard<std::mutex> lock(mu_);
        calls_.push_back({c0, c1, "device-sync"});
        calls_.push_back({c1, c2, "d2h-4B"});
        iterations_.push_back({t0, c2, "iteration"});
      }
      if (f_.think_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(f_.think_us));
    }
  }

  FakeApp* const app_;
  const std::vector<std::uint64_t> bufs_;
  const Flags& f_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string error_;        // written by the writer thread, read after Stop()
  std::uint64_t rng_ = 0x9E3779B97F4A7C15ull;
  std::mutex mu_;
  std::vector<Sample> calls_, iterations_;  // guarded by mu_
};

// ---------------------------------------------------------------- phase timeline

/// Polls a Progress and records when each phase began (ms after start).
class PhaseLog {
 public:
  PhaseLog(engine::Progress* p, std::int64_t t0_us) : p_(p), t0_(t0_us) {
    thread_ = std::thread([this] {
      std::string last;
      std::uint64_t seen = 0;
      while (!stop_.load()) {
        p_->WaitForChange(seen, std::chrono::milliseconds(5));
        const auto s = p_->Snapshot();
        seen = s.version;
        if (s.phase != last && !s.phase.empty()) {
          last = s.phase;
          phases_.emplace_back(s.phase, static_cast<double>(NowUs() - t0_) / 1e3);
        }
      }
    });
  }
  /// Stops polling; returns "phase@ms phase@ms ...".
  std::vector<std::pair<std::string, double>> Finish() {
    stop_.store(true);
    p_->Notify();
    thread_.join();
    return phases_;
  }

 private:
  engine::Progress* p_;
  std::int64_t t0_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::pair<std::string, double>> phases_;  // polling thread until joined
};

std::string PhasesText(const std::vector<std::pair<std::string, double>>& ph) {
  std::string s;
  char b[96];
  for (const auto& [name, ms] : ph) {
    std::snprintf(b, sizeof b, "%s%s@%.0f", s.empty() ? "" : " ", name.c_str(), ms);
    s += b;
  }
  return s;
}
std::string PhasesJson(const std::vector<std::pair<std::string, double>>& ph) {
  std::string s = "[";
  char b[96];
  for (const auto& [name, ms] : ph) {
    std::snprintf(b, sizeof b, "%s{\"phase\":\"%s\",\"at_ms\":%.1f}", s.size() > 1 ? "," : "", name.c_str(), ms);
    s += b;
  }
  return s + "]";
}

// ---------------------------------------------------------------- results

struct CheckpointRow {
  std::string mode, result_mode;
  engine::CheckpointResult r;
  double wall_ms = 0;
  Writer::Window base, during;
  std::vector<std::pair<std::string, double>> phases;
};

struct RestoreRow {
  std::string mode;
  int round = 0;
  engine::RestoreResult r;
  double first_ms = 0;    // Restore() start -> first read returned A
  double last_ms = 0;     // -> read of the last buffer in load order returned A
  double return_ms = 0;   // -> Restore() returned
  /// GB/s: image bytes over the "copy" phase (stop-the-world only).
  double CopyRate() const {
    for (std::size_t i = 0; i < phases.size(); ++i) {
      if (phases[i].first != "copy") continue;
      const double end = i + 1 < phases.size() ? phases[i + 1].second : return_ms;
      return end > phases[i].second ? static_cast<double>(r.bytes) / ((end - phases[i].second) * 1e6) : 0;
    }
    return 0;
  }
  std::uint64_t polls = 0;
  std::vector<std::pair<std::string, double>> phases;
  /// ms after Restore() start when the phase after "verify" began (the
  /// session is touched from there on); 0 if not seen.
  double VerifiedMs() const {
    for (std::size_t i = 0; i + 1 < phases.size(); ++i) {
      if (phases[i].first == "verify") return phases[i + 1].second;
    }
    return 0;
  }
};

/// fio's sequential O_DIRECT read rate of `path` in GB/s; 0 (and a line on
/// stderr) when fio is missing or fails.
double FioReadGBps(const std::string& path) {
  const std::string cmd = "fio --name=restore-read --filename='" + path +
                          "' --rw=read --direct=1 --bs=4M --ioengine=io_uring --iodepth=4 --readonly "
                          "--output-format=terse --terse-version=3 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return 0;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int rc = ::pclose(p);
  // terse v3: field 7 (1-based) is the read bandwidth in KiB/s.
  std::vector<std::string> fields;
  std::stringstream ss(out);
  for (std::string x; std::getline(ss, x, ';');) fields.push_back(x);
  if (rc != 0 || fields.size() < 7) {
    std::fprintf(stderr, "fio on %s failed (rc %d): is fio installed?\n", path.c_str(), rc);
    return 0;
  }
  return std::stod(fields[6]) * 1024 / 1e9;
}

std::string CountersJson(const engine::OperationCounters& c) {
  std::ostringstream o;
  o << "{\"shadows\":" << c.shadows << ",\"shadow_bytes\":" << c.shadow_bytes << ",\"shadows_from_reserve\":" << c.shadows_from_reserve << ",\"reserve_waits\":"
    << c.reserve_waits << ",\"writer_waits\":" << c.writer_waits << ",\"copier_yields\":" << c.copier_yields
    << ",\"recopy_rounds\":" << c.recopy_rounds << ",\"recopy_dirty_bytes\":" << c.recopy_dirty_bytes
    << ",\"twin_launches\":" << c.twin_launches << ",\"cow_fallbacks\":" << c.cow_fallbacks
    << ",\"recopy_misses\":" << c.recopy_misses << ",\"restore_rollbacks\":" << c.restore_rollbacks
    << ",\"absent_waits\":" << c.absent_waits << "}";
  return o.str();
}

int Fail(const std::string& why) {
  std::fprintf(stderr, "engine_stall_bench: %s\n", why.c_str());
  return 1;
}

/// Sets every buffer to `value` (synchronous memsets).
bool FillAll(FakeApp* app, const std::vector<std::uint64_t>& bufs, std::uint64_t bytes, std::uint32_t value,
             std::string* why) {
  for (std::uint64_t p : bufs) {
    if (app->Memset(p, value, 1, bytes, 0, false) != kOk) {
      *why = "memset: " + app->message();
      return false;
    }
  }
  if (app->DeviceSync() != kOk) {
    *why = "device sync: " + app->message();
    return false;
  }
  return true;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App cli{"engine_stall_bench: application stall of checkpoint modes and time to first kernel of restores"};
  // engine_stall_bench.sh passes its defaults first: a later flag wins.
  cli.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cli.add_option("--buffers", f.buffers, "device buffers the app allocates")->check(CLI::Range(2, 100000));
  cli.add_option("--buffer-mib", f.buffer_mib, "size of each buffer (MiB)")->check(CLI::Range(1, 65536));
  cli.add_option("--link-gbps", f.link_gbps, "sim host<->device link, GB/s per copy engine (phosd --sim-link-gbps)");
  cli.add_option("--copy-engines", f.copy_engines, "sim copy engines");
  cli.add_option("--dir", f.dir, "where images are written (a fresh subdirectory; deleted at the end)");
  cli.add_option("--modes", f.modes,
                 "checkpoint modes, in order: stop cow recopy, and cow-alloc (cow without phosd's reserve: "
                 "each shadow allocated when needed, as before the reserve existed)")
      ->delimiter(',');
  cli.add_option("--cow-reserve-mib", f.cow_reserve_mib, "cow: device memory shadows may take (--cow-reserve)");
  cli.add_option("--recopy-rounds", f.recopy_rounds, "recopy: rounds before the final quiesce");
  cli.add_option("--touch", f.touch, "async memsets per writer iteration")->check(CLI::Range(0, 1024));
  cli.add_option("--write-mib", f.write_mib, "bytes of each memset / D2D (MiB)")->check(CLI::Range(1, 65536));
  cli.add_option("--hot-buffers", f.hot_buffers, "the writer touches only the first N buffers (0 = all)");
  cli.add_option("--d2d", f.d2d, "one async D2D per writer iteration (true/false)");
  cli.add_option("--think-us", f.think_us, "host time between writer iterations (us)");
  cli.add_option("--baseline-ms", f.baseline_ms, "writer time with no operation before each checkpoint (ms)");
  cli.add_option("--restore", f.restore, "also measure restores (true/false)");
  cli.add_option("--restore-rounds", f.restore_rounds, "run the restores this many times in turn (the disk's rate drifts)")
      ->check(CLI::Range(1, 20));
  cli.add_option("--fio", f.fio,
                 "after each round of restores, fio's sequential O_DIRECT read (io_uring, 4 MiB, iodepth 4) of "
                 "the same gpu.img: the read-rate baseline measured beside it");
  cli.add_option("--keep-restore-image", f.keep_restore_image,
                 "move the restores' image to this directory afterwards (for fio on the same gpu.img)");
  cli.add_option("--json", f.json, "also write the results as JSON to this file ('-' = stdout)");
  cli.add_option("--trace-ms", f.trace_ms, "list the app's synchronous calls slower than this during each checkpoint");
  cli.add_option("--log-level", f.log_level, "phos log level");
  CLI11_PARSE(cli, argc, argv);
  if (Status s = InitLogging(f.log_level); !s.ok()) return Fail(s.ToString());
  struct ModeRun {
    std::string name;
    engine::Mode mode;
    bool reserve;  // cow: shadows from the reserve filled beforehand (engine/shadow_pool.h), as phosd does
  };
  std::vector<ModeRun> modes;
  for (const auto& m : f.modes) {
    engine::Mode mode;
    if (m == "cow-alloc") {
      modes.push_back({m, engine::Mode::kCow, false});
    } else if (engine::ParseMode(m, &mode)) {
      modes.push_back({m, mode, true});
    } else {
      return Fail("unknown mode '" + m + "' (stop, cow, cow-alloc, recopy)");
    }
  }

  std::string root = f.dir + "/phos-engine-bench-XXXXXX";
  if (mkdtemp(root.data()) == nullptr) return Fail("mkdtemp under " + f.dir + ": " + std::strerror(errno));
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{root};

  backend::BackendOptions bo;
  bo.kind = backend::BackendKind::kSim;
  bo.sim.link_gbps = f.link_gbps;
  bo.sim.copy_engines = f.copy_engines;
  std::unique_ptr<backend::Backend> be;
  std::string why;
  if (Status s = backend::CreateBackend(bo, &be, &why); !s.ok()) return Fail(s.ToString() + " " + why);
  auto server = std::make_unique<session::SessionServer>(be.get(), session::SessionServerOptions{},
                                                         session::SessionCallbacks{});
  server->SetHookFactory(engine::EngineHook::Make);
  if (Status s = server->Start(root + "/phosd.sock.data"); !s.ok()) return Fail(s.ToString());
  std::unique_ptr<FakeApp> app;
  if (Status s = FakeApp::Connect(root + "/phosd.sock.data", &app); !s.ok()) return Fail(s.ToString());
  std::shared_ptr<session::Session> sess;
  for (int i = 0; i < 500 && !sess; ++i) {
    sess = server->FindByPid(getpid());
    if (!sess) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!sess) return Fail("no session for this process");

  const std::uint64_t buf_bytes = f.buffer_mib << 20;
  const std::uint64_t total = buf_bytes * static_cast<std::uint64_t>(f.buffers);
  std::vector<std::uint64_t> bufs;
  const std::int64_t fill0 = NowUs();
  for (int i = 0; i < f.buffers; ++i) {
    std::uint64_t p = 0;
    if (app->Malloc(buf_bytes, &p) != kOk) return Fail("malloc: " + app->message());
    if (app->Memset(p, static_cast<std::uint32_t>(i + 1), 1, buf_bytes, 0, false) != kOk) {
      return Fail("memset: " + app->message());
    }
    bufs.push_back(p);
  }
  if (app->DeviceSync() != kOk) return Fail("sync: " + app->message());
  std::fprintf(stderr, "allocated and filled %d x %" PRIu64 " MiB = %.2f GiB in %.1f s; link %.3g GB/s x %d engines\n",
               f.buffers, f.buffer_mib, static_cast<double>(total) / (1ull << 30),
               static_cast<double>(NowUs() - fill0) / 1e6, f.link_gbps, f.copy_engines);

  // ---- what one cow shadow costs on this backend, outside any operation:
  // a fresh allocation of one buffer's size and a D2D into it (the sim
  // faults in and zeroes fresh host pages), vs a D2D into memory already
  // touched.
  double shadow_fresh_ms = 0, d2d_warm_ms = 0;
  {
    std::uint64_t a = 0;
    const std::int64_t c0 = NowUs();
    if (app->Malloc(buf_bytes, &a) != kOk) return Fail("malloc: " + app->message());
    if (app->D2D(a, bufs[0], buf_bytes, 0, true) != kOk) return Fail("d2d: " + app->message());
    const std::int64_t c1 = NowUs();
    if (app->D2D(a, bufs[1], buf_bytes, 0, true) != kOk) return Fail("d2d: " + app->message());
    const std::int64_t c2 = NowUs();
    if (app->Free(a) != kOk) return Fail("free: " + app->message());
    shadow_fresh_ms = static_cast<double>(c1 - c0) / 1e3;
    d2d_warm_ms = static_cast<double>(c2 - c1) / 1e3;
    std::fprintf(stderr, "one buffer (%" PRIu64 " MiB): malloc + D2D into fresh memory %.1f ms, D2D into touched memory %.1f ms\n",
                 f.buffer_mib, shadow_fresh_ms, d2d_warm_ms);
  }

  // ---- phosd's cow reserve, filled before any checkpoint (as phosd does
  // when it starts)
  engine::ShadowPoolOptions reserve_options;
  reserve_options.bytes_per_device = f.cow_reserve_mib << 20;
  engine::ShadowPool reserve(be.get(), reserve_options);
  const std::int64_t r0 = NowUs();
  if (f.cow_reserve_mib > 0 && !reserve.WaitUntilReady(std::chrono::minutes(5))) {
    return Fail("the cow reserve of " + std::to_string(f.cow_reserve_mib) + " MiB was not ready: " +
                reserve.stats()[0].last_error);
  }
  const double reserve_fill_ms = static_cast<double>(reserve.stats()[0].fill_us) / 1e3;
  std::fprintf(stderr, "cow reserve: %" PRIu64 " MiB allocated and written in %.1f ms (waited %.1f ms)\n",
               f.cow_reserve_mib, reserve_fill_ms, static_cast<double>(NowUs() - r0) / 1e3);

  // ---- checkpoints while the app writes
  std::vector<CheckpointRow> rows;
  {
    Writer writer(app.get(), bufs, f);
    writer.Start();
    for (std::size_t i = 0; i < modes.size(); ++i) {
      CheckpointRow row;
      row.mode = modes[i].name;
      const std::int64_t b0 = NowUs();
      std::this_thread::sleep_for(std::chrono::milliseconds(f.baseline_ms));
      const std::int64_t b1 = NowUs();
      engine::CheckpointOptions o;
      o.mode = modes[i].mode;
      o.dir = root + "/img-" + row.mode;
      o.cow_reserve_bytes = f.cow_reserve_mib << 20;
      if (modes[i].reserve) o.shadow_pool = &reserve;
      o.recopy_rounds = f.recopy_rounds;
      o.metadata.set_pid(static_cast<std::int64_t>(getpid()));
      engine::Progress progress;
      const std::int64_t t0 = NowUs();
      PhaseLog phases(&progress, t0);
      Status s = engine::Checkpoint(*sess, o, &progress, &row.r);
      const std::int64_t t1 = NowUs();
      row.phases = phases.Finish();
      if (!s.ok()) {
        writer.Stop();
        return Fail(std::string("checkpoint ") + row.mode + ": " + s.ToString());
      }
      row.wall_ms = static_cast<double>(t1 - t0) / 1e3;
      row.result_mode = engine::ModeName(row.r.mode);
      row.base = writer.Stats(b0, b1);
      row.during = writer.Stats(t0, t1);
      if (row.r.bytes < total) {
        writer.Stop();
        return Fail("checkpoint " + row.mode + " saved " + std::to_string(row.r.bytes) + " bytes, want >= " +
                    std::to_string(total));
      }
      std::error_code ec;
      std::filesystem::remove_all(o.dir, ec);
      std::fprintf(stderr, "checkpoint %-6s done: stall %.1f ms, wall %.1f ms\n", row.mode.c_str(),
                   static_cast<double>(row.r.stall_us) / 1e3, row.wall_ms);
      if (f.trace_ms > 0) {
        for (const Sample& c : writer.Slow(t0, t1, static_cast<std::int64_t>(f.trace_ms) * 1000)) {
          std::fprintf(stderr, "  slow %-11s at %8.1f ms took %8.1f ms\n", c.what,
                       static_cast<double>(c.start_us - t0) / 1e3, static_cast<double>(c.end_us - c.start_us) / 1e3);
        }
      }
      rows.push_back(std::move(row));
    }
    if (!writer.Stop()) return Fail("writer: " + writer.error());
  }

  // ---- restores: time to first kernel
  std::vector<RestoreRow> restores;
  std::vector<double> fio_gbps;  // per round (--fio); 0 when fio failed
  if (f.restore) {
    const std::uint32_t kA = 0x5A, kB = 0xB5;
    if (!FillAll(app.get(), bufs, buf_bytes, kA, &why)) return Fail(why);
    engine::CheckpointOptions o;
    o.mode = engine::Mode::kStop;
    o.dir = root + "/img-restore";
    o.metadata.set_pid(static_cast<std::int64_t>(getpid()));
    engine::Progress cp;
    engine::CheckpointResult cr;
    if (Status s = engine::Checkpoint(*sess, o, &cp, &cr); !s.ok()) return Fail("checkpoint for restore: " + s.ToString());
    std::vector<std::uint64_t> order = bufs;  // a stop image's load order: ascending address
    std::sort(order.begin(), order.end());
    struct Kind {
      const char* name;
      bool concurrent;
      engine::Verify verify;
    };
    for (int round = 0; round < f.restore_rounds; ++round) {
    for (const Kind& kind : {Kind{"stop", false, engine::Verify::kAsLoaded},
                             Kind{"concurrent", true, engine::Verify::kAsLoaded},
                             Kind{"stop-vfy1st", false, engine::Verify::kFirst}}) {
      const bool concurrent = kind.concurrent;
      RestoreRow row;
      row.mode = kind.name;
      row.round = round;
      if (!FillAll(app.get(), bufs, buf_bytes, kB, &why)) return Fail(why);
      engine::RestoreOptions ro;
      ro.dir = o.dir;
      ro.concurrent = concurrent;
      ro.verify = kind.verify;
      engine::Progress progress;
      Status rs;
      std::atomic<std::int64_t> returned{0};
      const std::int64_t t0 = NowUs();
      PhaseLog phases(&progress, t0);
      std::thread restorer([&] {
        rs = engine::Restore(*sess, ro, &progress, &row.r);
        returned.store(NowUs());
      });
      std::string bad;
      for (std::size_t k = 0; k < order.size() && bad.empty(); ++k) {
        for (;;) {
          std::uint32_t v = 0;
          ++row.polls;
          if (app->D2H(&v, order[k] + buf_bytes - sizeof v, sizeof v) != kOk) {
            bad = "d2h: " + app->message();
            break;
          }
          const std::uint32_t want = kA * 0x01010101u;
          if (v == want) break;
          if (k > 0 || v != kB * 0x01010101u || returned.load() != 0) {
            char b[160];
            std::snprintf(b, sizeof b, "buffer %zu in load order read 0x%08x after the restore began (want 0x%08x)",
                          k, v, want);
            bad = b;
            break;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        if (k == 0) row.first_ms = static_cast<double>(NowUs() - t0) / 1e3;
      }
      row.last_ms = static_cast<double>(NowUs() - t0) / 1e3;
      restorer.join();
      row.phases = phases.Finish();
      row.return_ms = static_cast<double>(returned.load() - t0) / 1e3;
      if (!rs.ok()) return Fail("restore " + row.mode + ": " + rs.ToString());
      if (!bad.empty()) return Fail("restore " + row.mode + ": " + bad);
      std::fprintf(stderr, "restore %-10s done: first call %.1f ms, last buffer %.1f ms\n", row.mode.c_str(),
                   row.first_ms, row.last_ms);
      restores.push_back(std::move(row));
    }
    if (f.fio) fio_gbps.push_back(FioReadGBps(o.dir + "/gpu.img"));
    }
    std::error_code ec;
    if (!f.keep_restore_image.empty()) {
      std::filesystem::remove_all(f.keep_restore_image, ec);
      std::filesystem::rename(o.dir, f.keep_restore_image, ec);
      if (ec) std::fprintf(stderr, "cannot move %s to %s: %s\n", o.dir.c_str(), f.keep_restore_image.c_str(),
                           ec.message().c_str());
    }
    std::filesystem::remove_all(o.dir, ec);
  }
  app.reset();
  sess.reset();
  server->Stop();

  // ---- report
  auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
  const CheckpointRow* stop = nullptr;
  for (const auto& r : rows) {
    if (r.mode == "stop") stop = &r;
  }
  std::printf("engine_stall_bench: %d x %" PRIu64 " MiB = %.2f GiB, sim link %.3g GB/s x %d engines, images in %s\n",
              f.buffers, f.buffer_mib, static_cast<double>(total) / (1ull << 30), f.link_gbps, f.copy_engines,
              f.dir.c_str());
  std::printf("writer: %d x %" PRIu64 " MiB memsets + %s device sync + 4-byte D2H, think %" PRIu64
              " us, into %d of the buffers; cow reserve %" PRIu64 " MiB\n\n",
              f.touch, f.write_mib, f.d2d ? "1 D2D +" : "no D2D +", f.think_us,
              f.hot_buffers > 0 ? std::min(f.hot_buffers, f.buffers) : f.buffers, f.cow_reserve_mib);
  std::printf("one buffer outside any operation: malloc + D2D into fresh memory %.1f ms (what a cow-alloc shadow costs\n"
              "the app's stream), D2D into touched memory %.1f ms (what a shadow from the reserve costs); the reserve\n"
              "was allocated and written in %.1f ms before the first checkpoint\n\n",
              shadow_fresh_ms, d2d_warm_ms, reserve_fill_ms);
  std::printf("%-7s %-6s %10s %8s %10s %9s %12s %12s %9s %8s %7s %7s %6s\n", "mode", "image", "stall_ms",
              "vs_stop", "wall_ms", "vs_stop", "worst_call", "base_worst", "worst_it", "rate", "shadow", "waits",
              "rounds");
  for (const auto& r : rows) {
    const double st = static_cast<double>(r.r.stall_us) / 1e3;
    std::printf("%-7s %-6s %10.1f %7.2f%% %10.1f %8.1f%% %10.1fms %10.1fms %7.1fms %7.0f%% %7" PRIu64 " %7" PRIu64
                " %6" PRIu64 "\n",
                r.mode.c_str(), r.result_mode.c_str(), st,
                stop ? pct(static_cast<double>(r.r.stall_us), static_cast<double>(stop->r.stall_us)) : 0.0,
                r.wall_ms, stop ? pct(r.wall_ms, stop->wall_ms) : 0.0,
                static_cast<double>(r.during.worst_call_us) / 1e3, static_cast<double>(r.base.worst_call_us) / 1e3,
                static_cast<double>(r.during.worst_iteration_us) / 1e3, pct(r.during.rate(), r.base.rate()),
                r.r.counters.shadows, r.r.counters.reserve_waits + r.r.counters.writer_waits,
                r.r.counters.recopy_rounds);
  }
  std::printf("\n(stall_ms: result.stall_us; worst_call: the app's worst synchronous call overlapping the checkpoint;\n"
              " base_worst: the same over %" PRIu64 " ms before it with no operation; worst_it: worst writer iteration;\n"
              " rate: writer iterations/s during the checkpoint vs that baseline; waits: reserve + writer waits)\n",
              f.baseline_ms);
  for (const auto& r : rows) {
    std::printf("  %-7s phases (ms after Checkpoint()): %s; shadows_from_reserve %" PRIu64 " reserve_waits %" PRIu64
                " writer_waits %" PRIu64 " copier_yields %" PRIu64 " recopy_dirty %.1f MiB; writer %" PRIu64
                " iterations (%.0f/s, base %.0f/s)\n",
                r.mode.c_str(), PhasesText(r.phases).c_str(), r.r.counters.shadows_from_reserve,
                r.r.counters.reserve_waits, r.r.counters.writer_waits,
                r.r.counters.copier_yields, static_cast<double>(r.r.counters.recopy_dirty_bytes) / (1 << 20),
                r.during.iterations, r.during.rate(), r.base.rate());
  }
  if (!restores.empty()) {
    std::printf("\n%-11s %13s %8s %10s %16s %8s %12s %10s %10s %10s %8s %9s\n", "restore", "first_call_ms", "vs_stop",
                "verify_ms", "first_after_vfy", "vs_stop", "last_buf_ms", "return_ms", "stall_ms", "total_ms",
                "absent", "copy_GBps");
    for (const auto& r : restores) {
      const RestoreRow& s = restores[static_cast<std::size_t>(r.round) * 3];  // that round's stop restore
      const double s_after = s.first_ms - s.VerifiedMs();
      const double after = r.first_ms - r.VerifiedMs();
      const std::string name = f.restore_rounds > 1 ? r.mode + "#" + std::to_string(r.round + 1) : r.mode;
      std::printf("%-11s %13.1f %7.1f%% %10.1f %16.1f %7.1f%% %12.1f %10.1f %10.1f %10.1f %8" PRIu64 " %9.2f\n",
                  name.c_str(), r.first_ms, pct(r.first_ms, s.first_ms), r.VerifiedMs(), after, pct(after, s_after),
                  r.last_ms, r.return_ms, static_cast<double>(r.r.stall_us) / 1e3,
                  static_cast<double>(r.r.total_us) / 1e3, r.r.counters.absent_waits, r.CopyRate());
    }
    std::printf("(first_call: Restore() start -> the app's first read of a restored buffer returned the image's bytes;\n"
                " first_after_vfy: the same from the end of checksum verification, when the session is first touched;\n"
                " last_buf: -> the read of the last buffer in load order returned;\n"
                " stop, concurrent: each chunk verified as it loads (the image read once); stop-vfy1st: all first;\n"
                " copy_GBps: image bytes / the stop restore's copy phase, reads from gpu.img included)\n");
    for (const auto& r : restores) {
      std::printf("  %-10s phases (ms after Restore()): %s\n", r.mode.c_str(), PhasesText(r.phases).c_str());
    }
    for (std::size_t i = 0; i < fio_gbps.size(); ++i) {
      const double ours = restores[i * 3].CopyRate();
      std::printf("round %zu: stop restore reads at %.2f GB/s, fio (io_uring, O_DIRECT, 4 MiB, iodepth 4) right after "
                  "at %.2f GB/s: %.0f %%\n",
                  i + 1, ours, fio_gbps[i], fio_gbps[i] > 0 ? 100.0 * ours / fio_gbps[i] : 0.0);
    }
  }

  if (!f.json.empty()) {
    std::ostringstream j;
    j << "{\"buffers\":" << f.buffers << ",\"buffer_mib\":" << f.buffer_mib << ",\"total_bytes\":" << total
      << ",\"link_gbps\":" << f.link_gbps << ",\"copy_engines\":" << f.copy_engines << ",\"touch\":" << f.touch
      << ",\"write_mib\":" << f.write_mib << ",\"d2d\":" << (f.d2d ? "true" : "false") << ",\"hot_buffers\":" << f.hot_buffers << ",\"think_us\":" << f.think_us << ",\"cow_reserve_mib\":"
      << f.cow_reserve_mib << ",\"shadow_fresh_ms\":" << shadow_fresh_ms << ",\"d2d_warm_ms\":" << d2d_warm_ms
      << ",\"reserve_fill_ms\":" << reserve_fill_ms
      << ",\"checkpoints\":[";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      j << (i ? "," : "") << "{\"mode\":\"" << r.mode << "\",\"image_mode\":\"" << r.result_mode
        << "\",\"stall_us\":" << r.r.stall_us << ",\"wall_us\":" << static_cast<std::uint64_t>(r.wall_ms * 1e3)
        << ",\"stall_vs_stop\":"
        << (stop ? static_cast<double>(r.r.stall_us) / static_cast<double>(std::max<std::uint64_t>(1, stop->r.stall_us))
                 : 0)
        << ",\"worst_call_us\":" << r.during.worst_call_us << ",\"baseline_worst_call_us\":"
        << r.base.worst_call_us << ",\"worst_iteration_us\":" << r.during.worst_iteration_us
        << ",\"iterations\":" << r.during.iterations << ",\"rate\":" << r.during.rate()
        << ",\"baseline_rate\":" << r.base.rate() << ",\"bytes\":" << r.r.bytes
        << ",\"counters\":" << CountersJson(r.r.counters) << ",\"phases\":" << PhasesJson(r.phases) << "}";
    }
    j << "],\"restores\":[";
    for (std::size_t i = 0; i < restores.size(); ++i) {
      const auto& r = restores[i];
      j << (i ? "," : "") << "{\"mode\":\"" << r.mode << "\",\"first_call_ms\":" << r.first_ms
        << ",\"verified_ms\":" << r.VerifiedMs() << ",\"copy_gbps\":" << r.CopyRate() << ",\"last_buffer_ms\":" << r.last_ms << ",\"return_ms\":" << r.return_ms << ",\"stall_us\":"
        << r.r.stall_us << ",\"total_us\":" << r.r.total_us << ",\"polls\":" << r.polls
        << ",\"counters\":" << CountersJson(r.r.counters) << ",\"phases\":" << PhasesJson(r.phases) << "}";
    }
    j << "]}\n";
    if (f.json == "-") {
      std::fputs(j.str().c_str(), stdout);
    } else {
      FILE* out = std::fopen(f.json.c_str(), "w");
      if (!out) return Fail("cannot write " + f.json);
      std::fputs(j.str().c_str(), out);
      std::fclose(out);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
