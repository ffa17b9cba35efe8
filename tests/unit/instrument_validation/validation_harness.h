// Harness for the validation tests: runs a kernel and its twins (both modes)
// in the PTX interpreter on the same device memory, and reads twin reports
// back the way phosd does (docs/instrument.md "Validation without a GPU").
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "interp/launch.h"
#include "kernel_params.h"
#include "interp/memory.h"
#include "interp/program.h"
#include "ptx/ptx_emitter.h"
#include "ptx/ptx_ir.h"
#include "ptx/ptx_parser.h"
#include "twin/twin_abi.h"
#include "twin/twin_pass.h"

namespace phos::validation::test {

inline std::string ReadPtx(const std::string& stem) {
  return phos::test::ReadTextFile(std::string(PHOS_VALIDATION_PTX_DIR) + "/" + stem + ".ptx");
}

// A fresh seed per call (std::random_device), or PHOS_TEST_SEED to replay.
inline uint32_t FreshSeed() {
  if (const char* s = std::getenv("PHOS_TEST_SEED")) return static_cast<uint32_t>(std::strtoul(s, nullptr, 0));
  std::random_device rd;
  return rd();
}

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

// A kernel parameter buffer laid out as the .param list (natural alignment).
using Params = phos::test::KernelParams;

// Device memory: host buffers registered with a RangeGlobalMemory. User
// buffers remember their initial contents (Reset restores them, Snapshot
// copies them); auxiliary buffers (ranges, reports) do not.
class Device {
 public:
  template <typename T>
  T* Alloc(const std::vector<T>& init) {
    uint8_t* p = AllocBytes(init.size() * sizeof(T));
    std::memcpy(p, init.data(), init.size() * sizeof(T));
    Buf& b = user_.back();
    b.init.assign(p, p + b.bytes);
    return reinterpret_cast<T*>(p);
  }
  // Registered bytes that Reset/Snapshot ignore.
  uint8_t* AllocAux(size_t bytes) {
    auto storage = std::make_unique<uint64_t[]>((bytes + kGap) / 8 + 1);
    uint8_t* p = reinterpret_cast<uint8_t*>(storage.get());
    mem_.AddRange(p, bytes);
    aux_.push_back(std::move(storage));
    return p;
  }
  // The exact bytes of the user buffer that starts at p.
  twin::Range RangeOf(const void* p) const {
    for (const Buf& b : user_)
      if (b.data() == p) return {reinterpret_cast<uint64_t>(p), reinterpret_cast<uint64_t>(p) + b.bytes};
    ADD_FAILURE() << "RangeOf: not a buffer start";
    return {};
  }
  void Reset() {
    for (Buf& b : user_) std::memcpy(b.data(), b.init.data(), b.bytes);
  }
  std::vector<std::vector<uint8_t>> Snapshot() const {
    std::vector<std::vector<uint8_t>> s;
    for (const Buf& b : user_) s.emplace_back(b.data(), b.data() + b.bytes);
    return s;
  }
  interp::GlobalMemory* mem() { return &mem_; }

 private:
  // Unregistered bytes after every buffer, so buffers never touch.
  static constexpr size_t kGap = 64;
  struct Buf {
    std::unique_ptr<uint64_t[]> storage;
    size_t bytes = 0;
    std::vector<uint8_t> init;
    uint8_t* data() const { return reinterpret_cast<uint8_t*>(storage.get()); }
  };
  uint8_t* AllocBytes(size_t bytes) {
    Buf b;
    b.storage = std::make_unique<uint64_t[]>((bytes + kGap) / 8 + 1);
    b.bytes = bytes;
    mem_.AddRange(b.data(), bytes);
    user_.push_back(std::move(b));
    return user_.back().data();
  }
  interp::RangeGlobalMemory mem_;
  std::vector<Buf> user_;
  std::vector<std::unique_ptr<uint64_t[]>> aux_;
};

// A report buffer in device memory followed by a registered canary: a twin
// writing past ReportBytes(capacity) would change the canary, not fault.
class ReportBuffer {
 public:
  static constexpr size_t kCanaryBytes = 256;
  static constexpr uint8_t kCanary = 0xA5;
  static constexpr uint8_t kUnwritten = 0xCD;  // records not yet written

  ReportBuffer(Device& dev, uint32_t capacity, uint32_t kernel_id, uint32_t flags) : capacity_(capacity) {
    const size_t bytes = twin::ReportBytes(capacity);
    base_ = dev.AllocAux(bytes + kCanaryBytes);
    std::memset(base_, kUnwritten, bytes);
    std::memset(base_ + bytes, kCanary, kCanaryBytes);
    Status st = twin::InitReport(base_, bytes, capacity, kernel_id, flags);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  uint64_t address() const { return reinterpret_cast<uint64_t>(base_); }
  uint32_t capacity() const { return capacity_; }
  const twin::ReportHeader& header() const { return *reinterpret_cast<const twin::ReportHeader*>(base_); }
  bool CanaryIntact() const {
    const uint8_t* c = base_ + twin::ReportBytes(capacity_);
    return std::all_of(c, c + kCanaryBytes, [](uint8_t b) { return b == kCanary; });
  }
  // Whether the record slots past the first `n` still hold kUnwritten.
  bool SlotsUnwrittenFrom(uint32_t n) const {
    const uint8_t* b = base_ + twin::ReportBytes(std::min(n, capacity_));
    const uint8_t* e = base_ + twin::ReportBytes(capacity_);
    return std::all_of(b, e, [](uint8_t x) { return x == kUnwritten; });
  }
  Status Decode(twin::Report* out) const { return twin::DecodeReport(base_, twin::ReportBytes(capacity_), out); }

 private:
  uint8_t* base_ = nullptr;
  uint32_t capacity_ = 0;
};

// One PTX module: the original program and its twins in both modes. Every
// kernel gets a distinct id (kIdBase + its index among the module's kernels).
class Kernels {
 public:
  static constexpr uint32_t kIdBase = 0x700;

  ::testing::AssertionResult Load(const std::string& stem) { return LoadText(ReadPtx(stem)); }
  ::testing::AssertionResult LoadText(const std::string& text) {
    ptx::Module m;
    Status st = ptx::ParseModule(text, &m);
    if (!st.ok()) return ::testing::AssertionFailure() << "parse: " << st.ToString();
    twin::TwinOptions opts;
    uint32_t next = kIdBase;
    for (ptx::Function* f : m.Kernels()) {
      if (!f->has_body) continue;
      ids_[f->name] = next;
      opts.kernel_ids[f->name] = next++;
    }
    if (ids_.empty()) return ::testing::AssertionFailure() << "no kernels";
    st = interp::Program::Build(m, &orig_);
    if (!st.ok()) return ::testing::AssertionFailure() << "build original: " << st.ToString();
    for (twin::TwinMode mode : {twin::TwinMode::kWrites, twin::TwinMode::kReadsAndWrites}) {
      opts.mode = mode;
      ptx::Module out;
      twin::TwinInfo info;
      st = twin::MakeTwin(m, opts, &out, &info);
      if (!st.ok()) return ::testing::AssertionFailure() << "MakeTwin: " << st.ToString();
      // Round-trip through the emitter: the twin the interposer JIT-loads is text.
      ptx::Module reparsed;
      st = ptx::ParseModule(ptx::EmitModule(out), &reparsed);
      if (!st.ok()) return ::testing::AssertionFailure() << "reparse twin: " << st.ToString();
      st = interp::Program::Build(reparsed, &Twin(mode));
      if (!st.ok()) return ::testing::AssertionFailure() << "build twin: " << st.ToString();
      infos_[static_cast<int>(mode)] = std::move(info);
    }
    return ::testing::AssertionSuccess();
  }
  // The (mangled) kernel whose name contains `part`.
  std::string Kernel(const std::string& part) const {
    for (const auto& [name, id] : ids_)
      if (name.find(part) != std::string::npos) return name;
    ADD_FAILURE() << "no kernel " << part;
    return "<no kernel " + part + ">";
  }
  uint32_t Id(const std::string& kernel) const { return ids_.at(kernel); }
  std::vector<std::string> Names() const {
    std::vector<std::string> v;
    for (const auto& [name, id] : ids_) v.push_back(name);
    return v;
  }
  const twin::TwinInfo& info(twin::TwinMode mode) const { return infos_[static_cast<int>(mode)]; }

  static interp::LaunchOptions Options() {
    interp::LaunchOptions o;
    o.workers = 4;
    o.max_instructions_per_thread = 50'000'000;
    return o;
  }
  Status RunOriginal(Device& dev, const std::string& kernel, interp::Dim3 grid, interp::Dim3 block,
                     const Params& p, unsigned dyn = 0) const {
    return interp::LaunchKernel(*orig_, kernel, grid, block, dyn, p.data(), p.size(), dev.mem(), Options());
  }
  // Launches the twin of `kernel`: p + (ranges, nranges, report). The ranges
  // are copied into a fresh device buffer.
  Status RunTwin(Device& dev, twin::TwinMode mode, const std::string& kernel, interp::Dim3 grid,
                 interp::Dim3 block, const Params& p, const std::vector<twin::Range>& ranges,
                 const ReportBuffer& report, unsigned dyn = 0) {
    uint8_t* r = dev.AllocAux(std::max<size_t>(1, ranges.size()) * sizeof(twin::Range));
    if (!ranges.empty()) std::memcpy(r, ranges.data(), ranges.size() * sizeof(twin::Range));
    Params tp = p;
    tp.Add(reinterpret_cast<uint64_t>(r)).Add(static_cast<uint32_t>(ranges.size())).Add(report.address());
    return interp::LaunchKernel(*Twin(mode), twin::TwinKernelName(kernel), grid, block, dyn, tp.data(),
                                tp.size(), dev.mem(), Options());
  }

 private:
  std::unique_ptr<interp::Program>& Twin(twin::TwinMode mode) {
    return mode == twin::TwinMode::kWrites ? twin_w_ : twin_rw_;
  }
  std::map<std::string, uint32_t> ids_;
  std::unique_ptr<interp::Program> orig_, twin_w_, twin_rw_;
  twin::TwinInfo infos_[2];
};

inline const char* ModeName(twin::TwinMode m) {
  return m == twin::TwinMode::kWrites ? "writes" : "reads+writes";
}
inline uint32_t ModeFlags(twin::TwinMode m) {
  return m == twin::TwinMode::kWrites ? 0u : static_cast<uint32_t>(twin::kReportFlagReads);
}

// Test 1: from the initial contents of every buffer, the original kernel and
// its twin in both modes (ranges = `ranges`, which must cover everything the
// kernel touches) leave bit-identical memory, and the twins report nothing.
// Memory is left as the last twin run left it, for the CPU reference check.
inline void ExpectTwinsMatchOriginal(Kernels& k, Device& dev, const std::string& kernel, interp::Dim3 grid,
                                     interp::Dim3 block, const Params& p,
                                     const std::vector<twin::Range>& ranges, unsigned dyn = 0) {
  SCOPED_TRACE(kernel);
  for (twin::TwinMode mode : {twin::TwinMode::kWrites, twin::TwinMode::kReadsAndWrites}) {
    const twin::FunctionTwinInfo* f = k.info(mode).Find(kernel);
    ASSERT_NE(f, nullptr);
    // Every kernel here has global loads and (in it or its callees) stores.
    if (mode == twin::TwinMode::kReadsAndWrites) {
      EXPECT_GT(f->loads, 0u);
    }
  }
  dev.Reset();
  Status st = k.RunOriginal(dev, kernel, grid, block, p, dyn);
  ASSERT_TRUE(st.ok()) << "original: " << st.ToString();
  const auto want = dev.Snapshot();
  for (twin::TwinMode mode : {twin::TwinMode::kWrites, twin::TwinMode::kReadsAndWrites}) {
    SCOPED_TRACE(ModeName(mode));
    dev.Reset();
    ReportBuffer report(dev, 64, k.Id(kernel), ModeFlags(mode));
    st = k.RunTwin(dev, mode, kernel, grid, block, p, ranges, report, dyn);
    ASSERT_TRUE(st.ok()) << "twin: " << st.ToString();
    const auto got = dev.Snapshot();
    ASSERT_EQ(got.size(), want.size());
    for (size_t b = 0; b < got.size(); ++b) EXPECT_TRUE(got[b] == want[b]) << "buffer " << b << " differs";
    twin::Report r;
    st = report.Decode(&r);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(r.header.count, 0u);
    EXPECT_TRUE(r.records.empty());
    EXPECT_TRUE(report.CanaryIntact());
    EXPECT_TRUE(report.SlotsUnwrittenFrom(0));
  }
}

}  // namespace phos::validation::test
