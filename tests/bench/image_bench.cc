// image_bench: checkpoint write throughput of the image store,
// io_uring + O_DIRECT vs the pwrite fallback (docs/benchmarks.md).
//
// Each iteration writes one image of 1 GiB (one buffer, 4 MiB chunks) and
// commits it, which includes fsync of gpu.img and the manifest, so both
// backends are measured to durability, not to the page cache. The target
// directory is $PHOS_IMAGE_BENCH_DIR, default /tmp (tmpfs would measure
// memory copies, not storage).
//
//   build/tests/bench/image_bench --benchmark_filter=Write
#include <benchmark/benchmark.h>

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "image/image_writer.h"

namespace {

using namespace phos::image;

constexpr std::uint64_t kChunk = 4ull << 20;

std::string BenchDir() {
  const char* d = std::getenv("PHOS_IMAGE_BENCH_DIR");
  std::string tmpl = std::string(d ? d : "/tmp") + "/phos-image-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

const std::vector<std::uint8_t>& Source() {
  static const std::vector<std::uint8_t> src = [] {
    std::vector<std::uint8_t> v(kChunk);
    std::mt19937_64 rng(1);
    for (auto& b : v) b = static_cast<std::uint8_t>(rng());
    return v;
  }();
  return src;
}

// range(0): MiB per image; range(1): writer threads; range(2): queue depth.
void WriteImage(benchmark::State& state, bool force_pwrite) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(state.range(0)) << 20;
  const int threads = static_cast<int>(state.range(1));
  const std::string root = BenchDir();
  if (root.empty()) {
    state.SkipWithError("cannot create the benchmark directory");
    return;
  }
  const auto& src = Source();
  std::string backend;
  int n = 0;
  for (auto _ : state) {
    const std::string dir = root + "/ckpt-" + std::to_string(n++);
    ImageWriterOptions o;
    o.chunk_bytes = kChunk;
    o.io.force_pwrite = force_pwrite;
    o.io.queue_depth = static_cast<std::size_t>(state.range(2));
    std::unique_ptr<ImageWriter> w;
    phos::Status s = ImageWriter::Open(dir, {}, o, &w);
    std::size_t index = 0;
    if (s.ok()) s = w->AddBuffer(0x7f0000000000ull, bytes, &index);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    backend = std::string(w->io_backend_name());
    std::atomic<std::uint64_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&] {
      for (std::uint64_t off; (off = next.fetch_add(kChunk)) < bytes;) {
        if (!w->Write(index, off, src.data(), std::min(kChunk, bytes - off)).ok()) failed = true;
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (failed || !(s = w->Commit()).ok()) {
      state.SkipWithError(("write failed: " + s.ToString()).c_str());
      break;
    }
    state.PauseTiming();
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
  }
  std::filesystem::remove_all(root);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.SetLabel(backend);
}

void BM_WriteUring(benchmark::State& state) { WriteImage(state, false); }
void BM_WritePwrite(benchmark::State& state) { WriteImage(state, true); }

// 1 GiB; 1 and 4 writer threads; queue depth 8 (and 1 / 32 to show what
// several requests in flight buy).
BENCHMARK(BM_WriteUring)->Args({1024, 1, 8})->Args({1024, 4, 8})->Args({1024, 1, 1})
    ->Args({1024, 4, 32})->Iterations(3)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_WritePwrite)->Args({1024, 1, 8})->Args({1024, 4, 8})->Iterations(3)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
