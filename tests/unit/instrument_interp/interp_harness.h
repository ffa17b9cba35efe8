// Test harness for the PTX interpreter: loads a PTX file produced at build
// time, owns host buffers registered as device memory, builds parameter
// buffers and launches.
//
// ctest runs the suites in several variants, chosen by the environment:
//   PHOS_INTERP_THREAD_AT_A_TIME=1  each thread alone (the scheduler before
//                                   the lockstep one);
//   PHOS_INTERP_PTX_FROM=nvrtc      the corpus compiled by NVRTC at test time
//                                   instead of nvcc at build time;
//   PHOS_INTERP_AS_TWIN=1           every launch runs the kernel's twin
//                                   (write mode) with every buffer allowed —
//                                   it must report nothing, and the test's
//                                   CPU reference checks its results — and
//                                   once more per buffer it wrote, with that
//                                   buffer left out of the ranges: the
//                                   planted mis-speculation must be reported,
//                                   at addresses inside that buffer.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "interp/device_runtime_ptx.h"
#include "interp/launch.h"
#include "kernel_params.h"
#include "interp/program.h"
#include "nvrtc_compile.h"
#include "ptx/ptx_emitter.h"
#include "ptx/ptx_parser.h"
#include "twin/twin_abi.h"
#include "twin/twin_pass.h"

namespace phos::interp::test {

inline bool EnvIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

// The PTX of `stem`.cu: nvcc's, made at build time, or NVRTC's, made now.
inline ::testing::AssertionResult ReadPtx(const std::string& stem, std::string* text) {
  if (EnvIs("PHOS_INTERP_PTX_FROM", "nvrtc")) {
    std::string why;
    *text = NvrtcCompiler::Get().Compile(std::string(PHOS_INTERP_CU_DIR) + "/" + stem + ".cu",
                                         {PHOS_INTERP_CUDA_INCLUDE_DIR, std::string(PHOS_INTERP_CUDA_INCLUDE_DIR) + "/cccl"},
                                         &why);
    if (text->empty()) return ::testing::AssertionFailure() << why;
    return ::testing::AssertionSuccess();
  }
  *text = phos::test::ReadTextFile(std::string(PHOS_INTERP_PTX_DIR) + "/" + stem + ".ptx");
  if (text->empty()) return ::testing::AssertionFailure() << "no PTX for " << stem;
  return ::testing::AssertionSuccess();
}

using Params = phos::test::KernelParams;

// Which scheduler the harness's launches use: lockstep warps (the
// default), or each thread alone (LaunchOptions::thread_at_a_time) when
// PHOS_INTERP_THREAD_AT_A_TIME=1 — ctest runs the suite both ways, so every
// kernel's CPU reference checks both.
inline bool ThreadAtATimeFromEnv() { return EnvIs("PHOS_INTERP_THREAD_AT_A_TIME", "1"); }

class Harness {
 public:
  // Parses and decodes the PTX compiled from `stem`.cu.
  ::testing::AssertionResult Load(const std::string& stem) {
    std::string text;
    if (auto r = ReadPtx(stem, &text); !r) return r;
    return LoadText(text);
  }
  // In twin mode, the module's twin (emitted and parsed again, as phosd
  // loads it) is what gets built.
  ::testing::AssertionResult LoadText(const std::string& text) {
    ptx::Module m;
    Status st = ptx::ParseModule(text, &m);
    if (!st.ok()) return ::testing::AssertionFailure() << "parse: " << st.ToString();
    if (as_twin_) {
      ptx::Module twin;
      twin::TwinOptions opts;
      opts.mode = twin::TwinMode::kWrites;
      st = twin::MakeTwin(m, opts, &twin);
      if (!st.ok()) return ::testing::AssertionFailure() << "twin: " << st.ToString();
      st = ptx::ParseModule(ptx::EmitModule(twin), &m);
      if (!st.ok()) return ::testing::AssertionFailure() << "parsing the emitted twin: " << st.ToString();
    }
    SupplyDeviceRuntime(&m);  // as phosd's sim does (sim_module.cc)
    st = Program::Build(m, &prog_);
    if (!st.ok()) return ::testing::AssertionFailure() << "build: " << st.ToString();
    return ::testing::AssertionSuccess();
  }
  // The entry whose (mangled) name contains `part`.
  std::string Kernel(const std::string& part) const {
    for (size_t i = 0; i < prog_->num_functions(); ++i) {
      const auto& f = prog_->function(static_cast<int>(i));
      if (f.is_entry && f.name.find(part) != std::string::npos) return f.name;
    }
    return "<no kernel " + part + ">";
  }
  // A device buffer (host memory registered with the GlobalMemory).
  template <typename T>
  T* Alloc(const std::vector<T>& init) {
    auto buf = std::make_unique<std::vector<uint8_t>>(init.size() * sizeof(T) + 16);
    T* p = reinterpret_cast<T*>(buf->data());
    std::memcpy(p, init.data(), init.size() * sizeof(T));
    mem_.AddRange(p, init.size() * sizeof(T));
    regions_.push_back({buf->data(), init.size() * sizeof(T)});
    bufs_.push_back(std::move(buf));
    return p;
  }
  Status Launch(const std::string& kernel, Dim3 grid, Dim3 block, const Params& p, unsigned dyn = 0,
                unsigned workers = 4, DeviceOutput* output = nullptr) {
    return Run(kernel, p, output, [&](const std::string& k, const Params& params, DeviceOutput* out) {
      LaunchOptions o;
      o.workers = workers;
      o.device_output = out;
      o.textures = textures;
      o.heap_base = heap_base;
      o.heap_bytes = heap_bytes;
      o.stats = &stats;
      o.max_instructions_per_thread = 100'000'000;
      o.thread_at_a_time = thread_at_a_time;
      return LaunchKernel(*prog_, k, grid, block, dyn, params.data(), params.size(), &mem_, o);
    });
  }
  // A cooperative launch: every block at once, `workspace` its grid
  // workspace (0: none).
  Status LaunchCooperative(const std::string& kernel, Dim3 grid, Dim3 block, const Params& p,
                           uint64_t workspace) {
    return Run(kernel, p, nullptr, [&](const std::string& k, const Params& params, DeviceOutput*) {
      LaunchOptions o;
      o.cooperative = true;
      o.grid_workspace = workspace;
      o.stats = &stats;
      o.max_instructions_per_thread = 100'000'000;
      o.thread_at_a_time = thread_at_a_time;
      return LaunchKernel(*prog_, k, grid, block, 0, params.data(), params.size(), &mem_, o);
    });
  }
  bool as_twin() const { return as_twin_; }
  const Program& program() const { return *prog_; }
  LaunchStats stats;
  const TextureTable* textures = nullptr;  // what Launch passes (null: none)
  uint64_t heap_base = 0, heap_bytes = 0;  // the device heap Launch passes (0: none)
  bool thread_at_a_time = ThreadAtATimeFromEnv();  // what Launch passes

 private:
  using Runner = std::function<Status(const std::string&, const Params&, DeviceOutput*)>;
  struct Region {
    uint8_t* p;
    size_t bytes;
  };
  static constexpr uint32_t kReportCapacity = 1024;

  // One launch: the kernel itself, or in twin mode its twin as described at
  // the top of this file.
  Status Run(const std::string& name, const Params& p, DeviceOutput* output, const Runner& run) {
    if (!as_twin_) return run(name, p, output);
    // A test may name a kernel outright: its twin has the twin's name.
    const std::string kernel = FindEntry(name) == nullptr ? twin::TwinKernelName(name) : name;
    // The buffers, and the module's own variables (__device__ counters).
    std::vector<Region> regions = regions_;
    if (prog_->storage_base() != 0) {
      regions.push_back({reinterpret_cast<uint8_t*>(prog_->storage_base()), prog_->storage_bytes()});
    }
    const std::vector<std::vector<uint8_t>> before = Snapshot(regions);
    std::vector<twin::Range> all;
    for (const Region& r : regions) all.push_back({Addr(r.p), Addr(r.p) + r.bytes});
    twin::Report report;
    Status s = RunTwin(kernel, p, all, output, run, &report);
    if (!s.ok()) return s;
    EXPECT_EQ(report.misses(), 0u) << "the twin of " << kernel << " reported a write outside every buffer"
                                   << (report.records.empty() ? std::string()
                                                              : " (first at 0x" + Hex(report.records[0].address) + ")");
    const std::vector<std::vector<uint8_t>> after = Snapshot(regions);
    // The planted mis-speculations: each buffer the launch changed, left
    // out. Not planted: the device heap (malloc/free write it themselves)
    // and launches with textures (surface stores: their buffers are in
    // phosd's access sets, not checked by twins, docs/instrument.md).
    int planted = 0;
    for (size_t b = 0; b < regions.size() && planted < 4 && textures == nullptr; ++b) {
      if (before[b] == after[b] || (heap_base != 0 && Addr(regions[b].p) == heap_base)) continue;
      ++planted;
      Restore(regions, before);
      std::vector<twin::Range> ranges;
      for (size_t i = 0; i < regions.size(); ++i)
        if (i != b) ranges.push_back(all[i]);
      DeviceOutput scratch;
      twin::Report miss;
      Status ps = RunTwin(kernel, p, ranges, output != nullptr ? &scratch : nullptr, run, &miss);
      EXPECT_TRUE(ps.ok()) << "the twin of " << kernel << " without buffer " << b << ": " << ps.ToString();
      EXPECT_GT(miss.misses(), 0u) << "the twin of " << kernel << " wrote buffer " << b
                                   << " left out of its ranges, unreported";
      for (const twin::ReportRecord& rec : miss.records) {
        EXPECT_TRUE(rec.address >= all[b].begin && rec.address < all[b].end && rec.is_write == 1)
            << "the twin of " << kernel << " reported 0x" << Hex(rec.address) << ", outside buffer " << b;
      }
    }
    Restore(regions, after);
    return s;
  }
  // The twin with `ranges` allowed; its report decoded into *report.
  Status RunTwin(const std::string& kernel, const Params& p, const std::vector<twin::Range>& ranges,
                 DeviceOutput* output, const Runner& run, twin::Report* report) {
    aux_.emplace_back(std::max<size_t>(ranges.size(), 1) * sizeof(twin::Range) / 8 + 1);
    uint8_t* range_buf = reinterpret_cast<uint8_t*>(aux_.back().data());
    std::memcpy(range_buf, ranges.data(), ranges.size() * sizeof(twin::Range));
    mem_.AddRange(range_buf, std::max<size_t>(ranges.size(), 1) * sizeof(twin::Range));
    aux_.emplace_back(twin::ReportBytes(kReportCapacity) / 8 + 1);
    uint8_t* report_buf = reinterpret_cast<uint8_t*>(aux_.back().data());
    PHOS_RETURN_IF_ERROR(twin::InitReport(report_buf, twin::ReportBytes(kReportCapacity), kReportCapacity, 1, 0));
    mem_.AddRange(report_buf, twin::ReportBytes(kReportCapacity));
    Params tp = p;
    tp.Add(Addr(range_buf)).Add(static_cast<uint32_t>(ranges.size())).Add(Addr(report_buf));
    if (const Function* f = FindEntry(kernel); f != nullptr && f->formal_bytes != tp.size()) {
      return Status::Internal("harness: the twin's parameters do not follow those given to " + kernel + " (" +
                              std::to_string(tp.size()) + " bytes given, its formals take " +
                              std::to_string(f->formal_bytes) + ")");
    }
    Status s = run(kernel, tp, output);
    mem_.RemoveRange(Addr(range_buf));
    mem_.RemoveRange(Addr(report_buf));
    if (!s.ok()) return s;
    return twin::DecodeReport(report_buf, twin::ReportBytes(kReportCapacity), report);
  }
  const Function* FindEntry(const std::string& name) const {
    for (size_t i = 0; i < prog_->num_functions(); ++i) {
      const Function& f = prog_->function(static_cast<int>(i));
      if (f.is_entry && f.name == name) return &f;
    }
    return nullptr;
  }
  static std::vector<std::vector<uint8_t>> Snapshot(const std::vector<Region>& regions) {
    std::vector<std::vector<uint8_t>> out;
    for (const Region& r : regions) out.emplace_back(r.p, r.p + r.bytes);
    return out;
  }
  static void Restore(const std::vector<Region>& regions, const std::vector<std::vector<uint8_t>>& snap) {
    for (size_t i = 0; i < regions.size(); ++i) std::memcpy(regions[i].p, snap[i].data(), regions[i].bytes);
  }
  static uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }
  static std::string Hex(uint64_t v) {
    std::ostringstream os;
    os << std::hex << v;
    return os.str();
  }

  const bool as_twin_ = EnvIs("PHOS_INTERP_AS_TWIN", "1");
  std::unique_ptr<Program> prog_;
  RangeGlobalMemory mem_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> bufs_;
  std::vector<Region> regions_;              // the Alloc'd buffers, in order
  std::vector<std::vector<uint64_t>> aux_;   // twin ranges and reports
};

// Random vectors; never zero-filled.
template <typename T>
std::vector<T> RandInts(std::mt19937& rng, size_t n, T lo, T hi) {
  std::uniform_int_distribution<long long> d(static_cast<long long>(lo), static_cast<long long>(hi));
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}
template <typename T>
std::vector<T> RandReals(std::mt19937& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

inline bool Near(double got, double want, double rel, double abs_tol = 0) {
  if (std::isnan(want)) return std::isnan(got);
  return std::fabs(got - want) <= std::max(abs_tol, rel * std::fabs(want));
}

}  // namespace phos::interp::test
