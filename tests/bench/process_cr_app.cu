// The application of tests/bench/process_cr_bench.sh (docs/benchmarks.md
// "Whole process: checkpoint, restore, migration, templates"): a CUDA
// program with a device-memory footprint large enough that copies matter,
// which keeps writing part of it while the benchmark checkpoints, migrates
// or templates it, and logs when each of its iterations finished — so the
// script sees, from the app's side, how long it was stopped and when a
// restored copy ran its first kernel.
//
//   process_cr_app MIB [DIRTY_MIB] [PERIOD_US] [HOT_MIB] [HOST_MIB]
//
// Allocates a 4 KiB counter buffer, then MIB MiB in buffers of at most
// 16 MiB, fills them (cudaMemset: on the sim a PTX kernel over hundreds of
// MiB would take minutes), prints "process_cr_app: ready pid P gpu_mib M"
// and loops:
//   - cudaMemset of DIRTY_MIB MiB (default 4), walking round the buffers,
//     so a checkpoint always finds buffers written since its start; with
//     HOT_MIB > 0 the walk stays inside a hot set of HOT_MIB MiB that
//     starts 8 MiB into the memory (the second half of the first 16 MiB
//     buffer onwards: it covers parts of buffers, as real hot sets do);
//   - one small kernel (Tick: 32 threads increment the counter buffer);
//   - a 4-byte cudaMemcpy of the counter back (a synchronous call: the
//     iteration ends when the kernel is done);
//   - prints "iter K end_us T dur_us D" (T: CLOCK_REALTIME in µs, so a
//     restored copy's lines compare with the script's clock; D: the
//     iteration's own duration) and sleeps PERIOD_US (default 2000).
// The counter must equal the iteration number: a restored copy whose
// device state does not match its host state says so and exits 1.
// HOST_MIB > 0 (default 0): that much private host memory, every 4 KiB page
// filled with a pattern of its index before "ready"; each iteration checks
// 16 pages (walking round it), so a copy whose memory did not come back
// intact (a migration with lazy pages) says so and exits 1. It is not
// written after "ready": it is what CRIU moves, not what the app dirties.
// A restored copy continues the loop where the image left it, writing to
// the same log (opened O_APPEND by the script).
//
// No __device__ variables on purpose: a whole-process restore reloads
// modules and needs module variables at their old addresses, which the
// sim gives only in a phosd that has placed nothing yet (docs/criu.md
// "Limits"); without them every restore and template start works in a
// phosd whose memory at the app's addresses is free.
//
// Bounded: the loop ends 15 minutes (CLOCK_REALTIME) after the original
// started, so a copy the script failed to kill does not run forever.
#include <cuda_runtime.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "host_pid.h"

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("process_cr_app: %s failed: %s\n", #x, cudaGetErrorString(e));       \
      std::fflush(stdout);                                                                \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

__global__ void Tick(uint32_t* c) { c[threadIdx.x] += 1; }

static long long NowUs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf("usage: process_cr_app MIB [DIRTY_MIB] [PERIOD_US] [HOT_MIB] [HOST_MIB]\n");
    return 2;
  }
  const size_t mib = std::strtoull(argv[1], nullptr, 10);
  const size_t dirty_mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4;
  const long period_us = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 2000;
  const size_t hot_mib = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 0;
  const size_t host_mib = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 0;
  if (mib == 0 || period_us < 0 || (hot_mib > 0 && hot_mib + 8 > mib)) {
    std::printf("process_cr_app: MIB must be > 0, PERIOD_US >= 0, HOT_MIB + 8 <= MIB\n");
    return 2;
  }
  constexpr size_t kMiB = 1u << 20;
  constexpr size_t kMaxBuffer = 16 * kMiB;
  const long long deadline = NowUs() + 15LL * 60 * 1000000;

  uint32_t* counter = nullptr;
  CHECK(cudaMalloc(&counter, 4096));
  CHECK(cudaMemset(counter, 0, 4096));
  std::vector<unsigned char*> bufs;
  std::vector<size_t> sizes;
  for (size_t left = mib * kMiB; left > 0;) {
    const size_t n = left < kMaxBuffer ? left : kMaxBuffer;
    unsigned char* p = nullptr;
    CHECK(cudaMalloc(&p, n));
    CHECK(cudaMemset(p, static_cast<int>(bufs.size() * 37 + 1) & 0xff, n));
    bufs.push_back(p);
    sizes.push_back(n);
    left -= n;
  }
  CHECK(cudaDeviceSynchronize());
  // Host memory: page p holds words p * kMix + w.
  constexpr uint64_t kMix = 0x9E3779B97F4A7C15ull;
  constexpr size_t kPageWords = 4096 / sizeof(uint64_t);
  const size_t host_pages = host_mib * kMiB / 4096;
  std::vector<uint64_t> host_mem(host_pages * kPageWords);
  for (size_t p = 0; p < host_pages; ++p) {
    for (size_t w = 0; w < kPageWords; ++w) host_mem[p * kPageWords + w] = p * kMix + w;
  }
  size_t next_page = 0;
  std::printf("process_cr_app: ready pid %ld gpu_mib %zu buffers %zu host_mib %zu\n", HostPid(), mib,
              bufs.size() + 1, host_mib);
  std::fflush(stdout);

  // The walk: every buffer, or [8 MiB, 8 MiB + HOT_MIB) of the memory.
  const size_t walk_from = hot_mib > 0 ? 8 * kMiB : 0;
  const size_t walk_bytes = hot_mib > 0 ? hot_mib * kMiB : mib * kMiB;
  size_t walked = 0;  // bytes into the walk
  uint32_t host = 0;
  for (unsigned long long iter = 1; NowUs() < deadline; ++iter) {
    const long long t0 = NowUs();
    // DIRTY_MIB MiB, continuing where the last iteration stopped.
    for (size_t left = dirty_mib * kMiB; left > 0;) {
      // The buffer and offset of memory byte walk_from + walked.
      size_t at = walk_from + walked, b = 0;
      while (at >= sizes[b]) at -= sizes[b++];
      size_t n = sizes[b] - at;
      if (n > left) n = left;
      if (n > walk_bytes - walked) n = walk_bytes - walked;
      CHECK(cudaMemset(bufs[b] + at, static_cast<int>(iter & 0xff), n));
      left -= n;
      walked = (walked + n) % walk_bytes;
    }
    Tick<<<1, 32>>>(counter);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&host, counter, sizeof host, cudaMemcpyDeviceToHost));
    const long long t1 = NowUs();
    std::printf("iter %llu end_us %lld dur_us %lld\n", iter, t1, t1 - t0);
    std::fflush(stdout);
    if (host != static_cast<uint32_t>(iter)) {
      // A restored copy gets its host state (iter) and its device state
      // (the counter) from one instant of the image, so they must agree:
      // a mismatch is a broken restore, and the script fails on it.
      std::printf("process_cr_app: counter %u != iteration %llu\n", host, iter);
      std::fflush(stdout);
      return 1;
    }
    for (int k = 0; k < 16 && host_pages > 0; ++k, next_page = (next_page + 1) % host_pages) {
      for (size_t w = 0; w < kPageWords; ++w) {
        if (host_mem[next_page * kPageWords + w] != next_page * kMix + w) {
          std::printf("process_cr_app: host page %zu word %zu differs\n", next_page, w);
          std::fflush(stdout);
          return 1;
        }
      }
    }
    if (period_us > 0) usleep(static_cast<useconds_t>(period_us));
  }
  std::printf("process_cr_app: 15 minutes are up, exiting\n");
  return 0;
}
