// Access-set cost in phosd (docs/benchmarks.md "Kernel access sets"):
// ComputeLaunchAccess for a kernel with 10 parameters (8 pointers, 2
// scalars; 6 pointers land in buffers, 2 are null/unmapped) against a
// session with N buffers, a kernel taking a 5-word struct, a launch in a
// session with many module variables (now vs stop 46's way), and building a
// module's plans from the vector_add fatbin with the signature cache warm.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "session/kernel_access.h"
#include "signature/signature_cache.h"

using namespace phos::session;

namespace {

std::map<uint64_t, uint64_t> Buffers(int n) {
  std::map<uint64_t, uint64_t> m;
  for (int i = 0; i < n; ++i) m[0x7f0000000000ull + static_cast<uint64_t>(i) * 0x40000] = 0x20000;
  return m;
}
uint64_t Buf(int i) { return 0x7f0000000000ull + static_cast<uint64_t>(i) * 0x40000; }

void BM_LaunchAccess10Params(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto buffers = Buffers(n);
  const std::map<uint64_t, uint64_t> globals;
  KernelAccessPlan plan;
  plan.kind = AccessKind::kSpeculated;
  plan.typed = true;
  std::vector<uint8_t> params(80);
  for (uint32_t i = 0; i < 8; ++i) {  // params 0..7: pointers (3 const); 8, 9: scalars
    plan.probes.push_back({i * 8, i, i >= 3, false});
    uint64_t v = i < 6 ? Buf(static_cast<int>((i * 97) % n)) + 64 : (i == 6 ? 0 : 0x1234);
    std::memcpy(params.data() + i * 8, &v, 8);
  }
  plan.word_hits.assign(plan.probes.size(), 0);
  CallView v;
  for (auto _ : state) {
    ComputeLaunchAccess(plan, params, buffers, globals, &v);
    benchmark::DoNotOptimize(v.ranges.data());
  }
  state.counters["ranges"] = static_cast<double>(v.ranges.size());
}
BENCHMARK(BM_LaunchAccess10Params)->Arg(10)->Arg(1000)->Arg(100000);

void BM_LaunchAccessStruct5Words(benchmark::State& state) {
  const auto buffers = Buffers(1000);
  const std::map<uint64_t, uint64_t> globals;
  KernelAccessPlan plan;
  plan.kind = AccessKind::kSpeculated;
  std::vector<uint8_t> params(48);
  for (uint32_t w = 0; w < 5; ++w) {
    plan.probes.push_back({w * 8, 0, true, true});
    uint64_t v = w < 4 ? Buf(static_cast<int>(w * 211)) : 0x0000000700002710ull;  // n, scale
    std::memcpy(params.data() + w * 8, &v, 8);
  }
  plan.word_hits.assign(plan.probes.size(), 0);
  CallView v;
  for (auto _ : state) {
    ComputeLaunchAccess(plan, params, buffers, globals, &v);
    benchmark::DoNotOptimize(v.ranges.data());
  }
}
BENCHMARK(BM_LaunchAccessStruct5Words);

// A launch of a kernel whose module may use its variables by symbol, in a
// session with M module variables (CUDA's libraries load hundreds), the
// kernel's own module holding 64 of them: what phosd adds now (its own
// module's variables, merged against the parameter ranges only) against
// stop 46's way, the baseline (every global of the session, each merged by
// a scan of the whole set: quadratic).
void LaunchWithVariables(benchmark::State& state, bool baseline) {
  const int m = static_cast<int>(state.range(0));
  const auto buffers = Buffers(100);
  std::map<uint64_t, uint64_t> globals;
  std::vector<std::pair<uint64_t, uint64_t>> own;
  for (int i = 0; i < m; ++i) {
    const uint64_t at = 0x7e0000000000ull + static_cast<uint64_t>(i) * 0x100;
    globals[at] = 16;
    if (i < 64) own.emplace_back(at, 16);
  }
  KernelAccessPlan plan;
  plan.kind = AccessKind::kSpeculated;
  std::vector<uint8_t> params(32);
  for (uint32_t i = 0; i < 4; ++i) {
    plan.probes.push_back({i * 8, i, true, false});
    const uint64_t v = Buf(static_cast<int>(i * 7));
    std::memcpy(params.data() + i * 8, &v, 8);
  }
  plan.word_hits.assign(plan.probes.size(), 0);
  CallView v;
  for (auto _ : state) {
    if (baseline) {
      ComputeLaunchAccess(plan, params, buffers, globals, &v);
      for (const auto& [start, bytes] : globals) v.AddOrMerge(start, bytes, true);
    } else {
      ComputeLaunchAccess(plan, params, buffers, globals, &v, own);
    }
    benchmark::DoNotOptimize(v.ranges.data());
  }
  state.counters["ranges"] = static_cast<double>(v.ranges.size());
}
void BM_LaunchOwnModuleVariables(benchmark::State& state) { LaunchWithVariables(state, false); }
void BM_LaunchEveryGlobalBaseline(benchmark::State& state) { LaunchWithVariables(state, true); }
BENCHMARK(BM_LaunchOwnModuleVariables)->Arg(64)->Arg(1000);
BENCHMARK(BM_LaunchEveryGlobalBaseline)->Arg(64)->Arg(1000);

std::vector<std::byte> Fixture(const char* name) {
  std::ifstream f(std::string(PHOS_TEST_APPS_DIR) + "/" + name, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Module load: the first call resolves signatures with libclang (reported
// as cold_ms), later ones hit the signature cache (phosd has one, shared by
// every session; here one for the benchmark).
void BM_ModuleKernelsWarm(benchmark::State& state) {
  const auto image = Fixture("struct_of_pointers.fatbin");
  ModuleKernels mk;
  static phos::signature::SignatureCache cache;
  // The benchmark body runs several times; only the process's first build is cold.
  static const double cold_ms = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    (void)BuildModuleKernels(image, &cache, &mk);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }();
  if (!BuildModuleKernels(image, &cache, &mk).ok()) state.SkipWithError("fixture missing or unreadable");
  for (auto _ : state) {
    (void)BuildModuleKernels(image, &cache, &mk);
    benchmark::DoNotOptimize(mk.kernels.size());
  }
  state.counters["cold_ms"] = cold_ms;
}
BENCHMARK(BM_ModuleKernelsWarm)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
