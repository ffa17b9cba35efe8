// Test harness for the PTX interpreter: loads a PTX file produced at build
// time, owns host buffers registered as device memory, builds parameter
// buffers and launches.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "interp/launch.h"
#include "kernel_params.h"
#include "interp/program.h"
#include "ptx/ptx_parser.h"

namespace phos::interp::test {

inline std::string ReadPtx(const std::string& stem) {
  return phos::test::ReadTextFile(std::string(PHOS_INTERP_PTX_DIR) + "/" + stem + ".ptx");
}

using Params = phos::test::KernelParams;

// Which scheduler the harness's launches use: lockstep warps (the
// default), or each thread alone (LaunchOptions::thread_at_a_time) when
// PHOS_INTERP_THREAD_AT_A_TIME=1 — ctest runs the suite both ways, so every
// kernel's CPU reference checks both.
inline bool ThreadAtATimeFromEnv() {
  const char* v = std::getenv("PHOS_INTERP_THREAD_AT_A_TIME");
  return v != nullptr && std::string(v) == "1";
}

class Harness {
 public:
  // Parses and decodes the PTX compiled from `stem`.cu.
  ::testing::AssertionResult Load(const std::string& stem) { return LoadText(ReadPtx(stem)); }
  ::testing::AssertionResult LoadText(const std::string& text) {
    ptx::Module m;
    Status st = ptx::ParseModule(text, &m);
    if (!st.ok()) return ::testing::AssertionFailure() << "parse: " << st.ToString();
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
    bufs_.push_back(std::move(buf));
    return p;
  }
  Status Launch(const std::string& kernel, Dim3 grid, Dim3 block, const Params& p, unsigned dyn = 0,
                unsigned workers = 4, DeviceOutput* output = nullptr) {
    LaunchOptions o;
    o.workers = workers;
    o.device_output = output;
    o.textures = textures;
    o.heap_base = heap_base;
    o.heap_bytes = heap_bytes;
    o.stats = &stats;
    o.max_instructions_per_thread = 100'000'000;
    o.thread_at_a_time = thread_at_a_time;
    return LaunchKernel(*prog_, kernel, grid, block, dyn, p.data(), p.size(), &mem_, o);
  }
  // A cooperative launch: every block at once, `workspace` its grid
  // workspace (0: none).
  Status LaunchCooperative(const std::string& kernel, Dim3 grid, Dim3 block, const Params& p,
                           uint64_t workspace) {
    LaunchOptions o;
    o.cooperative = true;
    o.grid_workspace = workspace;
    o.stats = &stats;
    o.max_instructions_per_thread = 100'000'000;
    o.thread_at_a_time = thread_at_a_time;
    return LaunchKernel(*prog_, kernel, grid, block, 0, p.data(), p.size(), &mem_, o);
  }
  const Program& program() const { return *prog_; }
  LaunchStats stats;
  const TextureTable* textures = nullptr;  // what Launch passes (null: none)
  uint64_t heap_base = 0, heap_bytes = 0;  // the device heap Launch passes (0: none)
  bool thread_at_a_time = ThreadAtATimeFromEnv();  // what Launch passes

 private:
  std::unique_ptr<Program> prog_;
  RangeGlobalMemory mem_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> bufs_;
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
