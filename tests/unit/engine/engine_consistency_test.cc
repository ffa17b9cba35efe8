// The C/R engine's core correctness (issue #5 item 6): every checkpoint
// mode and both restore modes against a randomized, deterministic workload
// (workload.h) on the sim backend, in-process (a FakeApp speaks the wire
// protocol into a real SessionServer; no nvcc program runs).
//
// The replay trick. A workload is a list of steps, each exactly one
// admitted call, and its results depend only on the seed. So:
//   run A: the workload runs in a thread; meanwhile this thread takes a
//          checkpoint in mode M -> image A, admitted_at_capture = N;
//   run B: a fresh session issues the same steps one at a time until it has
//          admitted exactly N calls, then a stop-the-world checkpoint ->
//          image B.
// Image A must equal image B buffer for buffer, byte for byte (buffers
// matched by allocation index, since addresses differ between sessions),
// and both runs must end in the same device state (a checkpoint must not
// disturb the app).
//
// Restore: run A runs part of the workload, is checkpointed (stop) while it
// runs, runs on ("junk"), is restored (stop-the-world or concurrent) and
// replays the workload from the capture point to the end while the restore
// may still be loading; its final state must equal an uninterrupted run's.
//
// Sizes: WorkloadOptions; small under ThreadSanitizer (label `concurrency`)
// or with PHOS_WORKLOAD_SCALE=small, larger with PHOS_WORKLOAD_SCALE=large.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_hook.h"
#include "engine/operations.h"
#include "engine/shadow_pool.h"
#include "engine/progress.h"
#include "engine_test_env.h"
#include "fake_app.h"
#include "image/image_reader.h"
#include "image/io_backend.h"
#include "io_gate.h"
#include "session/session_server.h"
#include "workload.h"

#if defined(__SANITIZE_THREAD__)
#define PHOS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PHOS_UNDER_TSAN 1
#endif
#endif
#ifndef PHOS_UNDER_TSAN
#define PHOS_UNDER_TSAN 0
#endif

namespace phos::engine::testing {
namespace {

using namespace std::chrono_literals;
using session::Session;
using session::SessionServer;
using session::testing::FakeApp;

// ---------------------------------------------------------------- options

const std::uint64_t kSeeds[] = {1, 2, 3, 0x5eed};
// A GEMM-heavy workload (cuBLAS GEMMs are most of its launches): checked in
// every mode and both restores like the seeds above.
const std::uint64_t kGemmHeavySeed = 0x6e77;

WorkloadOptions Options(std::uint64_t seed) {
  WorkloadOptions o;
  o.seed = seed;
  std::string scale = PHOS_UNDER_TSAN ? "small" : "normal";
  if (const char* e = std::getenv("PHOS_WORKLOAD_SCALE"); e != nullptr && *e) scale = e;
  if (scale == "small") {
    o.buffers = 4;
    o.min_bytes = 1u << 10;
    o.max_bytes = 160u << 10;
    o.steps = 60;
    o.max_copy_bytes = 64u << 10;
    o.max_kernel_elements = 1024;
  } else if (scale == "large") {
    o.buffers = 10;
    o.max_bytes = 6u << 20;
    o.steps = 600;
    o.max_kernel_elements = 1u << 16;
  } else {
    o.buffers = 6;
    o.max_bytes = 2u << 20;
    o.steps = 160;
    o.max_kernel_elements = 4096;
  }
  // PHOS_WORKLOAD_NO_GLOBAL=1: no kernel touching a module global (to tell
  // a global's problem from a buffer's).
  if (const char* e = std::getenv("PHOS_WORKLOAD_NO_GLOBAL"); e != nullptr && *e == '1') o.global_kernel = false;
  o.app_kernels = std::filesystem::exists(std::string(PHOS_TEST_APPS_DIR) + "/multi_stream.fatbin");
  if (seed == kGemmHeavySeed) o.gemm_percent = 85;
  return o;
}



// ---------------------------------------------------------------- device states

// The device state a test compares: each live allocation's bytes (by
// allocation index) and the PTX module's global.
struct DeviceState {
  std::map<int, std::vector<std::byte>> buffers;
  std::vector<std::byte> global;
};

// Empty when equal, else the first difference, precisely.
std::string Diff(const DeviceState& a, const DeviceState& b, const Workload& w) {
  for (const auto& [alloc, bytes] : a.buffers) {
    if (!b.buffers.count(alloc)) return "alloc " + std::to_string(alloc) + " only in the first state";
  }
  for (const auto& [alloc, bytes] : b.buffers) {
    auto it = a.buffers.find(alloc);
    if (it == a.buffers.end()) return "alloc " + std::to_string(alloc) + " only in the second state";
    const auto& x = it->second;
    if (x.size() != bytes.size()) {
      return "alloc " + std::to_string(alloc) + ": " + std::to_string(x.size()) + " vs " +
             std::to_string(bytes.size()) + " bytes";
    }
    if (x != bytes) {
      std::size_t first = 0, count = 0, last = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (x[i] != bytes[i]) {
          if (count++ == 0) first = i;
          last = i;
        }
      }
      return "alloc " + std::to_string(alloc) + " (" + std::to_string(w.alloc_bytes[alloc]) + " bytes): " +
             std::to_string(count) + " bytes differ in [" + std::to_string(first) + ", " + std::to_string(last) +
             "]; first: " + std::to_string(static_cast<int>(x[first])) + " vs " +
             std::to_string(static_cast<int>(bytes[first]));
    }
  }
  if (a.global != b.global) {
    auto value = [](const std::vector<std::byte>& g) {
      std::uint32_t v = 0;
      if (g.size() >= sizeof v) std::memcpy(&v, g.data(), sizeof v);
      return std::to_string(v) + " (" + std::to_string(g.size()) + " bytes)";
    };
    return "the global phos_counter differs: " + value(a.global) + " vs " + value(b.global);
  }
  return "";
}

// The last steps before `n` and the first ones from `n` on that wrote or
// read allocation `alloc` (for failure reports).
std::string TouchersOf(const Workload& w, int alloc, std::size_t n) {
  auto touches = [&](const Step& s) {
    return s.op != Op::kFree && s.op != Op::kFreeAsync && (s.dst.alloc == alloc || s.src.alloc == alloc || s.src2.alloc == alloc);
  };
  std::vector<std::size_t> before, after;
  for (std::size_t i = 0; i < w.steps.size(); ++i) {
    if (!touches(w.steps[i])) continue;
    (i < n ? before : after).push_back(i);
  }
  std::string out = "\n  steps touching alloc " + std::to_string(alloc) + " around the capture (after step " +
                    std::to_string(n) + "):";
  const std::size_t from = before.size() > 6 ? before.size() - 6 : 0;
  for (std::size_t k = from; k < before.size(); ++k) {
    out += "\n    step " + std::to_string(before[k]) + ": " + w.steps[before[k]].Describe();
  }
  out += "\n    -- capture --";
  for (std::size_t k = 0; k < after.size() && k < 3; ++k) {
    out += "\n    step " + std::to_string(after[k]) + ": " + w.steps[after[k]].Describe();
  }
  return out;
}

// ---------------------------------------------------------------- the fixture

// One app connection running one workload: its FakeApp, its Session in
// phosd and the runner that issues the steps.
struct AppRun {
  const Workload* w = nullptr;
  std::unique_ptr<FakeApp> app;
  std::shared_ptr<Session> session;
  std::unique_ptr<WorkloadRunner> runner;
  std::uint64_t base = 0;  // admitted calls before step 0
};

class EngineConsistencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.Start("phos-engine-consistency").ok());
    dir_ = env_.dir();
  }
  void TearDown() override { runs_.clear(); }

  // Connects a new app and finds its (new) session.
  AppRun* StartRun(const Workload& w) {
    auto run = std::make_unique<AppRun>();
    run->w = &w;
    Status c = env_.Connect(&run->app, &run->session);
    EXPECT_TRUE(c.ok()) << c.ToString();
    if (!c.ok()) return nullptr;
    run->base = run->session->admitted();
    run->runner = std::make_unique<WorkloadRunner>(w, run->app.get(), PHOS_TEST_APPS_DIR);
    runs_.push_back(std::move(run));
    return runs_.back().get();
  }

  // Ends a run's app; waits until its session is torn down.
  void EndRun(AppRun* run) {
    run->app.reset();
    for (int i = 0; i < 500 && !run->session->finished(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(run->session->finished());
  }

  // Waits until the session has admitted `target` calls (bounded).
  static bool WaitAdmitted(const AppRun& run, std::uint64_t target, std::chrono::milliseconds timeout = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int spin = 0;; ++spin) {
      if (run.session->admitted() >= target) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (spin < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(200us);
      }
    }
  }

  // Issues steps [from, to) as fast as the app can (posted calls do not wait).
  static bool IssueFast(AppRun& run, std::size_t from, std::size_t to, std::string* why) {
    for (std::size_t i = from; i < to; ++i) {
      if (!run.runner->Issue(i, why)) return false;
    }
    return true;
  }

  // Issues steps [from, to) one at a time: after each, waits until the
  // session admitted it, and checks it was exactly one call.
  static bool IssueStepwise(AppRun& run, std::size_t from, std::size_t to, std::string* why) {
    for (std::size_t i = from; i < to; ++i) {
      if (!run.runner->Issue(i, why)) return false;
      const std::uint64_t want = run.base + i + 1;
      if (!WaitAdmitted(run, want)) {
        *why = "step " + std::to_string(i) + " (" + run.w->steps[i].Describe() + ") was not admitted: " +
               std::to_string(run.session->admitted()) + " calls admitted, expected " + std::to_string(want);
        return false;
      }
      if (run.session->admitted() != want) {
        *why = "step " + std::to_string(i) + " (" + run.w->steps[i].Describe() + ") made " +
               std::to_string(run.session->admitted() - want + 1) + " admitted calls, not one";
        return false;
      }
    }
    return true;
  }

  // Reads every allocation live after step `k` back through the app (D2H).
  // Its calls (syncs, D2H) are not workload steps: run.base moves past them.
  static bool ReadState(AppRun& run, std::size_t k, DeviceState* out, std::string* why) {
    const std::uint64_t before = run.session->admitted();
    bool ok = true;
    for (int a : run.w->LiveAfter(k)) {
      if (ok) ok = run.runner->ReadBack(a, &out->buffers[a], why);
    }
    if (ok && run.w->uses_global) ok = run.runner->ReadGlobal(&out->global, why);
    run.base += run.session->admitted() - before;  // every read-back call was a synchronous call
    return ok;
  }

  // Diagnosis of an image that is no replayed state: which step counts in
  // [lo, hi] does it equal? (A fresh run, stepwise, compared after each.)
  std::string MatchingPrefixes(const Workload& w, const DeviceState& image, std::size_t lo, std::size_t hi) {
    std::string why;
    AppRun* c = StartRun(w);
    if (c == nullptr || !IssueStepwise(*c, 0, lo, &why)) return "diagnosis failed: " + why;
    std::string found;
    for (std::size_t k = lo; k <= hi && k <= w.steps.size(); ++k) {
      if (k > lo && !IssueStepwise(*c, k - 1, k, &why)) return "diagnosis failed: " + why;
      DeviceState st;
      if (!ReadState(*c, k, &st, &why)) return "diagnosis failed: " + why;
      if (Diff(image, st, w).empty()) found += " " + std::to_string(k);
    }
    EndRun(c);
    return found.empty() ? "equals no state after " + std::to_string(lo) + ".." + std::to_string(hi) + " steps"
                         : "equals the state after" + found + " steps";
  }

  // An image's contents, extents matched to allocations by this run's
  // addresses: exactly the allocations live after `k` steps + the global.
  static bool ImageState(const std::string& dir, const AppRun& run, std::size_t k, DeviceState* out,
                         std::string* why) {
    std::unique_ptr<image::ImageReader> reader;
    Status s = image::ImageReader::Open(dir, {}, &reader);
    if (!s.ok()) {
      *why = "image " + dir + ": " + s.ToString();
      return false;
    }
    std::map<std::uint64_t, int> by_addr;
    for (int a : run.w->LiveAfter(k)) by_addr[run.runner->ptr(a)] = a;
    bool global_seen = false;
    const auto& m = reader->manifest();
    for (int i = 0; i < m.buffers_size(); ++i) {
      const auto& e = m.buffers(i);
      std::vector<std::byte> data(e.bytes());
      s = reader->ReadBuffer(i, data.data());
      if (!s.ok()) {
        *why = "image " + dir + " buffer " + std::to_string(i) + ": " + s.ToString();
        return false;
      }
      if (run.w->uses_global && e.device_address() == run.runner->global_ptr()) {
        global_seen = true;
        out->global = std::move(data);
        continue;
      }
      auto it = by_addr.find(e.device_address());
      if (it == by_addr.end()) {
        char b[160];
        std::snprintf(b, sizeof b, "image %s holds an extent at 0x%llx (%llu bytes) that is no live allocation",
                      dir.c_str(), static_cast<unsigned long long>(e.device_address()),
                      static_cast<unsigned long long>(e.bytes()));
        *why = b;
        return false;
      }
      if (out->buffers.count(it->second)) {
        *why = "image " + dir + " holds alloc " + std::to_string(it->second) + " twice";
        return false;
      }
      if (e.bytes() != run.w->alloc_bytes[it->second]) {
        *why = "image " + dir + ": alloc " + std::to_string(it->second) + " saved with " +
               std::to_string(e.bytes()) + " bytes, allocated " + std::to_string(run.w->alloc_bytes[it->second]);
        return false;
      }
      out->buffers[it->second] = std::move(data);
    }
    if (out->buffers.size() != by_addr.size()) {
      *why = "image " + dir + " holds " + std::to_string(out->buffers.size()) + " of the " +
             std::to_string(by_addr.size()) + " allocations live after step " + std::to_string(k);
      return false;
    }
    if (run.w->uses_global && !global_seen) {
      *why = "image " + dir + " lacks the module global phos_counter";
      return false;
    }
    return true;
  }

  Status TakeCheckpoint(AppRun& run, Mode mode, const std::string& dir, CheckpointResult* result,
                        image::IoBackendFactory io = {}) {
    CheckpointOptions co;
    co.mode = mode;
    co.dir = dir;
    co.metadata.set_pid(getpid());
    co.metadata.set_mode(ModeName(mode));
    co.image.backend_factory = std::move(io);
    co.cow_reserve_bytes = cow_reserve_;
    co.shadow_pool = shadow_pool_;
    Progress progress;
    return Checkpoint(*run.session, co, &progress, result);
  }

  // A seeded point in the random part of the workload (where run A's
  // checkpoint is requested).
  static std::size_t TriggerStep(const Workload& w, std::uint64_t salt) {
    const std::size_t lo = w.setup_steps, span = (w.steps.size() - w.setup_steps) / 2 + 1;
    return lo + (w.options.seed * 7919 + salt) % span;
  }

  testing::EngineTestEnv env_;  // declared first: destroyed after the runs
  std::string dir_;
  std::vector<std::unique_ptr<AppRun>> runs_;
  std::uint64_t cow_reserve_ = 2ull << 30;
  ShadowPool* shadow_pool_ = nullptr;  // cow's shadows from phosd's reserve, when set
};

// ---------------------------------------------------------------- the workload itself

// The generator is deterministic, every step is one admitted call, and two
// runs (one stepwise, one as fast as the app can post) end in the same
// state: the premise of every test below.
TEST_F(EngineConsistencyTest, WorkloadIsDeterministic) {
  for (std::uint64_t seed : {std::uint64_t{1}, std::uint64_t{2}, kGemmHeavySeed}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Workload w = Generate(Options(seed));
    const Workload again = Generate(Options(seed));
    ASSERT_EQ(w.steps.size(), again.steps.size());
    for (std::size_t i = 0; i < w.steps.size(); ++i) ASSERT_EQ(w.steps[i].Describe(), again.steps[i].Describe());
    ASSERT_GT(w.steps.size(), w.setup_steps);
    std::printf("[ seed %llu ] %s\n", static_cast<unsigned long long>(seed), w.Summary().c_str());

    std::string why;
    AppRun* a = StartRun(w);
    ASSERT_NE(a, nullptr);
    ASSERT_TRUE(IssueStepwise(*a, 0, w.steps.size(), &why)) << why;
    DeviceState sa;
    ASSERT_TRUE(ReadState(*a, w.steps.size(), &sa, &why)) << why;
    EndRun(a);

    AppRun* b = StartRun(w);
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(IssueFast(*b, 0, w.steps.size(), &why)) << why;
    DeviceState sb;
    ASSERT_TRUE(ReadState(*b, w.steps.size(), &sb, &why)) << why;
    EndRun(b);
    EXPECT_EQ(Diff(sa, sb, w), "");
    // Not trivially equal: the kernels changed the buffers.
    EXPECT_FALSE(sa.buffers.empty());
  }
}

// ---------------------------------------------------------------- every checkpoint mode

struct ModeCase {
  Mode mode;
  std::uint64_t seed;
  bool reserve = false;  // cow: shadows from a reserve filled beforehand (shadow_pool.h), as in phosd
};

class ModeConsistencyTest : public EngineConsistencyTest, public ::testing::WithParamInterface<ModeCase> {};

// Image A (mode M, taken while the workload runs) == image B (stop, taken
// after exactly admitted_at_capture calls of the same workload), and the
// checkpointed run ends where an undisturbed run ends.
TEST_P(ModeConsistencyTest, ImageEqualsReplayedState) {
  const Mode mode = GetParam().mode;
  const Workload w = Generate(Options(GetParam().seed));
  const std::size_t total = w.steps.size();
  std::string why;
  std::unique_ptr<ShadowPool> reserve;
  if (GetParam().reserve) {
    ShadowPoolOptions po;
    po.bytes_per_device = 64ull << 20;
    reserve = std::make_unique<ShadowPool>(env_.backend(), po);
    ASSERT_TRUE(reserve->WaitUntilReady(std::chrono::seconds(60)));
    shadow_pool_ = reserve.get();
  }

  // Run A: the workload in a thread, the checkpoint from here.
  AppRun* a = StartRun(w);
  ASSERT_NE(a, nullptr);
  std::string app_error;
  std::atomic<bool> app_ok{true};
  std::thread app([&] {
    if (!IssueFast(*a, 0, total, &app_error)) app_ok.store(false);
  });
  const std::size_t trigger = TriggerStep(w, static_cast<std::uint64_t>(mode));
  const bool reached = WaitAdmitted(*a, a->base + trigger);
  const std::string img_a = dir_ + "/a";
  CheckpointResult ra;
  Status s = reached ? TakeCheckpoint(*a, mode, img_a, &ra) : Status::Internal("trigger not reached");
  app.join();
  ASSERT_TRUE(app_ok.load()) << app_error;
  ASSERT_TRUE(s.ok()) << ModeName(mode) << ": " << s.ToString();
  ASSERT_TRUE(WaitAdmitted(*a, a->base + total));
  ASSERT_GE(ra.admitted_at_capture, a->base);
  const std::size_t n = ra.admitted_at_capture - a->base;
  ASSERT_LE(n, total);
  std::printf("[ seed %llu mode %s ] capture after step %zu of %zu (requested at %zu; result mode %s, "
              "%u buffers, %llu bytes, stall %llu us, shadows %llu, recopy rounds %llu, fallbacks %llu, "
              "twin launches %llu, misses %llu)\n",
              static_cast<unsigned long long>(w.options.seed), ModeName(mode), n, total, trigger,
              ModeName(ra.mode), ra.buffers, static_cast<unsigned long long>(ra.bytes),
              static_cast<unsigned long long>(ra.stall_us), static_cast<unsigned long long>(ra.counters.shadows),
              static_cast<unsigned long long>(ra.counters.recopy_rounds),
              static_cast<unsigned long long>(ra.counters.cow_fallbacks),
              static_cast<unsigned long long>(ra.counters.twin_launches),
              static_cast<unsigned long long>(ra.counters.twin_misses));
  DeviceState image_a, final_a;
  ASSERT_TRUE(ImageState(img_a, *a, n, &image_a, &why)) << why;
  ASSERT_TRUE(ReadState(*a, total, &final_a, &why)) << why;
  EndRun(a);
  if (reserve) {
    EXPECT_EQ(ra.counters.shadows_from_reserve, ra.counters.shadows) << "a shadow was allocated, not taken";
    EXPECT_EQ(reserve->stats()[0].in_use, 0u) << "shadows were not given back to the reserve";
    shadow_pool_ = nullptr;
  }

  // Run B: replay exactly n calls, checkpoint stop-the-world, run on.
  AppRun* b = StartRun(w);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(IssueStepwise(*b, 0, n, &why)) << why;
  const std::string img_b = dir_ + "/b";
  CheckpointResult rb;
  s = TakeCheckpoint(*b, Mode::kStop, img_b, &rb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rb.admitted_at_capture, b->base + n);
  DeviceState image_b, direct_b, final_b;
  ASSERT_TRUE(ImageState(img_b, *b, n, &image_b, &why)) << why;
  // Image B itself against the device (an independent check of stop).
  ASSERT_TRUE(ReadState(*b, n, &direct_b, &why)) << why;
  EXPECT_EQ(Diff(image_b, direct_b, w), "") << "stop image vs. the device after step " << n;
  ASSERT_TRUE(IssueFast(*b, n, total, &why)) << why;
  ASSERT_TRUE(ReadState(*b, total, &final_b, &why)) << why;
  EndRun(b);

  const std::string d = Diff(image_a, image_b, w);
  std::string writers;
  if (!d.empty()) {
    const int alloc = std::atoi(d.c_str() + 6);  // "alloc N ..."
    if (d.rfind("alloc ", 0) == 0) writers = TouchersOf(w, alloc, n);
    const std::size_t lo = n > 25 ? std::max(n - 25, w.setup_steps) : w.setup_steps;
    writers += "\n  image A " + MatchingPrefixes(w, image_a, lo, n + 5);
  }
  EXPECT_EQ(d, "") << ModeName(mode) << " image (seed " << w.options.seed << ", capture after step " << n
                   << ") differs from the replayed state" << writers;
  EXPECT_EQ(Diff(final_a, final_b, w), "") << "the checkpointed run ended elsewhere";
}

std::vector<ModeCase> ModeCases() {
  std::vector<ModeCase> out;
  for (Mode m : {Mode::kStop, Mode::kCow, Mode::kRecopy}) {
    for (std::uint64_t seed : kSeeds) out.push_back({m, seed});
    out.push_back({m, kGemmHeavySeed});
  }
  out.push_back({Mode::kCow, kSeeds[0], true});
  out.push_back({Mode::kCow, kGemmHeavySeed, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Modes, ModeConsistencyTest, ::testing::ValuesIn(ModeCases()),
                         [](const ::testing::TestParamInfo<ModeCase>& i) {
                           return std::string(ModeName(i.param.mode)) + (i.param.reserve ? "_reserve" : "") +
                                  "_seed" + std::to_string(i.param.seed);
                         });

// ---------------------------------------------------------------- restore

struct RestoreCase {
  bool concurrent;
  std::uint64_t seed;
};

class RestoreConsistencyTest : public EngineConsistencyTest,
                               public ::testing::WithParamInterface<RestoreCase> {};

// Checkpoint while running, run on (junk), restore, replay from the capture
// point to the end: the final state equals an uninterrupted run's.
TEST_P(RestoreConsistencyTest, RestoreMatchesUninterrupted) {
  const bool concurrent = GetParam().concurrent;
  const Workload w = Generate(Options(GetParam().seed));
  const std::size_t total = w.steps.size();
  const std::size_t junk_end = w.setup_steps + (total - w.setup_steps) * 3 / 4;
  std::string why;

  // The reference: uninterrupted.
  AppRun* ref = StartRun(w);
  ASSERT_NE(ref, nullptr);
  ASSERT_TRUE(IssueFast(*ref, 0, total, &why)) << why;
  DeviceState want;
  ASSERT_TRUE(ReadState(*ref, total, &want, &why)) << why;
  // Every host function's gate was reached and answered (the read-back
  // waited for the device).
  const auto host_functions = std::count_if(w.steps.begin(), w.steps.end(),
                                            [](const Step& st) { return st.op == Op::kHostFunc; });
  EXPECT_EQ(ref->runner->host_functions_answered(), static_cast<std::uint64_t>(host_functions));
  EndRun(ref);

  AppRun* a = StartRun(w);
  ASSERT_NE(a, nullptr);
  std::string app_error;
  std::atomic<bool> app_ok{true};
  std::thread app([&] {
    if (!IssueFast(*a, 0, junk_end, &app_error)) app_ok.store(false);
  });
  const std::size_t trigger = TriggerStep(w, 11);
  const bool reached = WaitAdmitted(*a, a->base + trigger);
  const std::string img = dir_ + "/img";
  CheckpointResult cr;
  Status s = reached ? TakeCheckpoint(*a, Mode::kStop, img, &cr) : Status::Internal("trigger not reached");
  app.join();
  ASSERT_TRUE(app_ok.load()) << app_error;
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Every junk call must have run before the restore (posted calls wait in
  // the ring: they would otherwise run after it).
  ASSERT_TRUE(WaitAdmitted(*a, a->base + junk_end));
  const std::size_t n = cr.admitted_at_capture - a->base;
  ASSERT_LE(n, junk_end);
  std::printf("[ seed %llu restore %s ] capture after step %zu, junk to step %zu, %zu steps\n",
              static_cast<unsigned long long>(w.options.seed), concurrent ? "concurrent" : "stop", n, junk_end,
              total);

  RestoreOptions ro;
  ro.dir = img;
  ro.concurrent = concurrent;
  Progress progress;
  RestoreResult rr;
  s = Restore(*a->session, ro, &progress, &rr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // The workload goes on from the capture point at once (a concurrent
  // restore may still be loading).
  ASSERT_TRUE(IssueFast(*a, n, total, &why)) << why;
  DeviceState got;
  ASSERT_TRUE(ReadState(*a, total, &got, &why)) << why;
  std::printf("[ restore %s ] stall %llu us, total %llu us, %u buffers (%u allocated, %u freed), "
              "absent waits %llu\n",
              concurrent ? "concurrent" : "stop", static_cast<unsigned long long>(rr.stall_us),
              static_cast<unsigned long long>(rr.total_us), rr.buffers, rr.allocated, rr.freed,
              static_cast<unsigned long long>(rr.counters.absent_waits));
  EndRun(a);
  EXPECT_EQ(Diff(got, want, w), "") << "seed " << w.options.seed << ", capture after step " << n
                                    << ", restored " << (concurrent ? "concurrently" : "stop-the-world");
}

std::vector<RestoreCase> RestoreCases() {
  std::vector<RestoreCase> out;
  for (bool c : {false, true}) {
    for (std::uint64_t seed : {kSeeds[0], kSeeds[1], kGemmHeavySeed}) out.push_back({c, seed});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Restore, RestoreConsistencyTest, ::testing::ValuesIn(RestoreCases()),
                         [](const ::testing::TestParamInfo<RestoreCase>& i) {
                           return std::string(i.param.concurrent ? "concurrent" : "stop") + "_seed" +
                                  std::to_string(i.param.seed);
                         });

// ---------------------------------------------------------------- failures

class ModeTest : public EngineConsistencyTest, public ::testing::WithParamInterface<Mode> {};

// The app exits while its checkpoint is writing its first chunk (an I/O
// gate holds it there): the checkpoint ends (no hang, no crash) and leaves
// no DIR.tmp. Stop and recopy have the whole state in host memory before
// they write anything (recopy writes after t2), so they commit a complete
// image; cow writes while the app runs and its t1 state is not saved yet,
// so it must fail, saying why, and leave no image.
TEST_P(ModeTest, SessionExitsMidCheckpoint) {
  const Mode mode = GetParam();
  const Workload w = Generate(Options(3));
  AppRun* a = StartRun(w);
  ASSERT_NE(a, nullptr);
  std::string why;
  ASSERT_TRUE(IssueFast(*a, 0, w.steps.size(), &why)) << why;
  ASSERT_TRUE(WaitAdmitted(*a, a->base + w.steps.size()));

  auto gate = std::make_shared<Gate>();
  const std::string img = dir_ + "/img";
  CheckpointResult r;
  Status s;
  std::thread ck([&] { s = TakeCheckpoint(*a, mode, img, &r, GatedIoFactory(gate)); });
  const bool reached = gate->WaitReached(10s);
  a->app.reset();  // the app exits
  // A stop checkpoint holds the consumer thread (its capture is a control
  // task): the session cannot end before the gate opens.
  const int polls = mode == Mode::kStop ? 20 : 300;
  for (int i = 0; i < polls && !a->session->finished(); ++i) std::this_thread::sleep_for(10ms);
  gate->Open();
  ck.join();
  EXPECT_TRUE(reached) << "the checkpoint never wrote";
  EXPECT_FALSE(std::filesystem::exists(img + ".tmp"));
  if (mode == Mode::kCow) {
    EXPECT_FALSE(s.ok()) << "cow checkpoint of an exited app succeeded";
    EXPECT_FALSE(s.message().empty());
    EXPECT_FALSE(std::filesystem::exists(img)) << s.ToString();
    std::printf("[ %s ] the checkpoint of an exited app: %s\n", ModeName(mode), s.ToString().c_str());
  } else {
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::unique_ptr<image::ImageReader> reader;
    ASSERT_TRUE(image::ImageReader::Open(img, {}, &reader).ok());
    EXPECT_TRUE(reader->VerifyAll().ok());
  }
  for (int i = 0; i < 300 && !a->session->finished(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(a->session->finished());
}

// The app exits at some point of a checkpoint while it was busy (no gate:
// several delays): whatever the point, the checkpoint ends, leaves no
// DIR.tmp, and either commits an image whose every chunk verifies or fails
// with a message and no image.
TEST_P(ModeTest, SessionExitsAtAnyPoint) {
  const Mode mode = GetParam();
  const Workload w = Generate(Options(5));
  int committed = 0, failed = 0;
  for (int delay_us : {0, 300, 1000, 3000, 10000}) {
    SCOPED_TRACE("exit " + std::to_string(delay_us) + " us after the request");
    AppRun* a = StartRun(w);
    ASSERT_NE(a, nullptr);
    std::atomic<bool> exit{false};
    std::thread app([&] {
      std::string ignored;
      for (std::size_t i = 0; i < w.steps.size() && !exit.load(); ++i) {
        if (!a->runner->Issue(i, &ignored)) break;
      }
      while (!exit.load()) std::this_thread::sleep_for(1ms);
      a->app.reset();  // on this thread: nobody else uses the app
    });
    ASSERT_TRUE(WaitAdmitted(*a, a->base + w.setup_steps));
    const std::string img = dir_ + "/img" + std::to_string(delay_us);
    CheckpointResult r;
    Status s;
    std::thread ck([&] { s = TakeCheckpoint(*a, mode, img, &r); });
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    exit.store(true);
    app.join();
    ck.join();
    EXPECT_FALSE(std::filesystem::exists(img + ".tmp"));
    if (s.ok()) {
      ++committed;
      std::unique_ptr<image::ImageReader> reader;
      ASSERT_TRUE(image::ImageReader::Open(img, {}, &reader).ok());
      EXPECT_TRUE(reader->VerifyAll().ok());
    } else {
      ++failed;
      EXPECT_FALSE(s.message().empty());
      EXPECT_FALSE(std::filesystem::exists(img)) << s.ToString();
    }
    for (int i = 0; i < 300 && !a->session->finished(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(a->session->finished());
  }
  std::printf("[ %s ] app exits during a checkpoint: %d committed, %d failed cleanly\n", ModeName(mode),
              committed, failed);
}

// A second checkpoint while one is in flight is refused at once
// (FailedPrecondition); the first one completes with a valid image.
TEST_P(ModeTest, SecondCheckpointIsRefused) {
  const Mode mode = GetParam();
  const Workload w = Generate(Options(4));
  AppRun* a = StartRun(w);
  ASSERT_NE(a, nullptr);
  std::string why;
  ASSERT_TRUE(IssueFast(*a, 0, w.steps.size(), &why)) << why;
  ASSERT_TRUE(WaitAdmitted(*a, a->base + w.steps.size()));

  auto gate = std::make_shared<Gate>();
  const std::string img = dir_ + "/img", img2 = dir_ + "/img2";
  CheckpointResult r, r2;
  Status s;
  std::thread ck([&] { s = TakeCheckpoint(*a, mode, img, &r, GatedIoFactory(gate)); });
  const bool reached = gate->WaitReached(10s);
  const auto t0 = std::chrono::steady_clock::now();
  Status s2 = TakeCheckpoint(*a, Mode::kStop, img2, &r2);
  const auto refused_after = std::chrono::steady_clock::now() - t0;
  gate->Open();
  ck.join();
  EXPECT_TRUE(reached);
  EXPECT_EQ(s2.code(), Status::Code::kFailedPrecondition) << s2.ToString();
  EXPECT_NE(s2.message().find("already in progress"), std::string::npos) << s2.message();
  EXPECT_LT(refused_after, 2s) << "the second request was queued, not refused";
  EXPECT_FALSE(std::filesystem::exists(img2));
  EXPECT_FALSE(std::filesystem::exists(img2 + ".tmp"));
  ASSERT_TRUE(s.ok()) << s.ToString();
  DeviceState image, device;
  ASSERT_TRUE(ImageState(img, *a, w.steps.size(), &image, &why)) << why;
  ASSERT_TRUE(ReadState(*a, w.steps.size(), &device, &why)) << why;
  EXPECT_EQ(Diff(image, device, w), "");
  // And once it is done, the next one is accepted.
  EXPECT_TRUE(TakeCheckpoint(*a, Mode::kStop, img2, &r2).ok());
  EndRun(a);
}

INSTANTIATE_TEST_SUITE_P(Modes, ModeTest, ::testing::Values(Mode::kStop, Mode::kCow, Mode::kRecopy),
                         [](const ::testing::TestParamInfo<Mode>& i) { return std::string(ModeName(i.param)); });

}  // namespace
}  // namespace phos::engine::testing
