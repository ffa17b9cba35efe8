// PTX interpreter throughput: interpreted thread-instructions per second on
// saxpy (tests/apps/saxpy_loop.cu) and the shared-memory + shuffle
// reduction (tests/apps/reduce_shared.cu). Counter "thread_instr/s".
// Arguments: workers (host threads), lockstep (1: lockstep warps, the
// default scheduler; 0: LaunchOptions::thread_at_a_time, the one before).
//   build/tests/bench/interp_bench
//   tests/bench/interp_compare.sh   (against an older commit's interpreter)
#include <benchmark/benchmark.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "interp/launch.h"
#include "ptx/ptx_parser.h"

namespace {

using namespace phos::interp;

std::unique_ptr<Program> Load(const char* stem) {
  std::ifstream f(std::string(PHOS_INTERP_PTX_DIR) + "/" + stem + ".ptx");
  std::stringstream ss;
  ss << f.rdbuf();
  phos::ptx::Module m;
  std::unique_ptr<Program> p;
  if (!phos::ptx::ParseModule(ss.str(), &m).ok() || !Program::Build(m, &p).ok()) return nullptr;
  return p;
}

std::string Entry(const Program& p, const char* part) {
  for (size_t i = 0; i < p.num_functions(); ++i) {
    const auto& f = p.function(static_cast<int>(i));
    if (f.is_entry && f.name.find(part) != std::string::npos) return f.name;
  }
  return part;
}

template <typename... T>
std::vector<uint8_t> Pack(T... v) {
  std::vector<uint8_t> b;
  auto add = [&](auto x) {
    size_t off = (b.size() + alignof(decltype(x)) - 1) / alignof(decltype(x)) * alignof(decltype(x));
    b.resize(off + sizeof(x));
    std::memcpy(b.data() + off, &x, sizeof(x));
  };
  (add(v), ...);
  return b;
}

void Run(benchmark::State& state, const Program& p, const std::string& k, Dim3 grid, Dim3 block,
         const std::vector<uint8_t>& params, GlobalMemory* mem) {
  LaunchOptions o;
  o.workers = static_cast<unsigned>(state.range(0));
  o.thread_at_a_time = state.range(1) == 0;
  LaunchStats stats;
  o.stats = &stats;
  uint64_t total = 0;
  for (auto _ : state) {
    auto st = LaunchKernel(p, k, grid, block, 0, params.data(), params.size(), mem, o);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    total += stats.thread_instructions;
  }
  state.counters["thread_instr/s"] = benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsRate);
  state.counters["instr/launch"] = static_cast<double>(stats.thread_instructions);
}

void BM_Saxpy(benchmark::State& state) {
  static auto p = Load("saxpy_loop");
  if (!p) return state.SkipWithError("cannot load saxpy_loop.ptx");
  const int n = 1 << 18;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = d(rng), y[i] = d(rng);
  RangeGlobalMemory mem;
  mem.AddRange(x.data(), n * 4);
  mem.AddRange(y.data(), n * 4);
  Run(state, *p, Entry(*p, "saxpy"), {n / 256}, {256}, Pack(1.5f, x.data(), y.data(), n), &mem);
}

void BM_ReduceShared(benchmark::State& state) {
  static auto p = Load("reduce_shared");
  if (!p) return state.SkipWithError("cannot load reduce_shared.ptx");
  const int n = 1 << 18;
  std::mt19937 rng(2);
  std::vector<unsigned> in(n);
  for (auto& v : in) v = rng();
  unsigned long long sum = 0;
  RangeGlobalMemory mem;
  mem.AddRange(in.data(), n * 4);
  mem.AddRange(&sum, 8);
  Run(state, *p, Entry(*p, "reduce_sum"), {64}, {256}, Pack(in.data(), &sum, n), &mem);
}

}  // namespace

namespace {
void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"workers", "lockstep"});
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int lockstep : {1, 0}) {
    b->Args({1, lockstep});
    if (all > 1) b->Args({all, lockstep});
  }
}
}  // namespace

BENCHMARK(BM_Saxpy)->Apply(Shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReduceShared)->Apply(Shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
