// Shared helpers for the phos test programs (tests/apps). Header-only, host code.
//
// Every program generates its inputs with the fixed-seed PRNG below, checks
// the GPU results against a CPU reference and prints a checksum of the GPU
// results, so a run under phos (cuda or sim backend) can be compared with a
// native run by the printed line alone. Exit status: 0 match, 1 mismatch,
// 2 CUDA error.
//
// Every program also calls AppMidpoint() once, in the middle of its GPU
// work, so a test can checkpoint it at a known point (see AppMidpoint).
#pragma once

#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#define APP_CHECK(call)                                                         \
  do {                                                                          \
    cudaError_t _e = (call);                                                    \
    if (_e != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(_e));                                     \
      std::exit(2);                                                             \
    }                                                                           \
  } while (0)

// splitmix64: small, fixed-seed, identical on every platform.
struct AppRng {
  uint64_t state;
  explicit AppRng(uint64_t seed) : state(seed) {}
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform float in [-1, 1) with 24 significant bits (exactly representable).
  float NextFloat() { return static_cast<float>(static_cast<int32_t>(Next() >> 40) - (1 << 23)) / float(1 << 23); }
  uint32_t NextU32() { return static_cast<uint32_t>(Next() >> 32); }
};

// FNV-1a over raw bytes: the printed checksum.
inline uint64_t AppFnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// Prints "<name>: checksum 0x... OK|MISMATCH" and returns the exit status.
inline int AppReport(const char* name, uint64_t checksum, size_t mismatches) {
  std::printf("%s: checksum 0x%016llx %s\n", name, static_cast<unsigned long long>(checksum),
              mismatches == 0 ? "OK" : "MISMATCH");
  if (mismatches != 0) std::fprintf(stderr, "%s: %zu results differ from the CPU reference\n", name, mismatches);
  return mismatches == 0 ? 0 : 1;
}

// The pause point of the end-to-end checkpoint/restore tests
// (tests/integration/e2e_process_test.cc). Called once in the middle of a
// program's GPU work: some kernels have run (or are queued) and device
// buffers hold intermediate results. Without PHOS_APP_PAUSE it does nothing.
// With PHOS_APP_PAUSE=PATH it prints "NAME: paused at midpoint ..." on
// STDERR (stdout stays exactly the uninterrupted run's, so outputs can be
// compared byte for byte) and sleeps in 5 ms steps while PATH exists:
// the test checkpoints the process meanwhile, and removing PATH releases
// the original and every restored copy alike (they poll the same path).
// Bounded: after kMaxWait the program gives up, says so, and goes on.
// Device work queued before the pause is not synchronised on purpose: a
// checkpoint must cope with it.
// With PHOS_APP_BALLAST_MIB=N as well, N MiB of private host memory are
// filled with a pattern before the pause and checked after it — memory a
// whole-process migration must bring along (lazily, with --lazy-pages); a
// copy whose memory came back wrong says so and exits 1.
inline void AppMidpoint(const char* name) {
  const char* path = std::getenv("PHOS_APP_PAUSE");
  if (path == nullptr || *path == '\0') return;
  const char* ballast_env = std::getenv("PHOS_APP_BALLAST_MIB");
  const size_t ballast_words = ballast_env != nullptr ? (std::strtoull(ballast_env, nullptr, 10) << 20) / 8 : 0;
  uint64_t* ballast = ballast_words != 0 ? new uint64_t[ballast_words] : nullptr;
  AppRng fill(0xba11a57);
  for (size_t i = 0; i < ballast_words; ++i) ballast[i] = fill.Next();
  std::fprintf(stderr, "%s: paused at midpoint; remove %s to continue\n", name, path);
  std::fflush(stderr);
  constexpr auto kMaxWait = std::chrono::minutes(10);
  const auto deadline = std::chrono::steady_clock::now() + kMaxWait;
  while (access(path, F_OK) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s: %s still exists after 10 minutes; continuing\n", name, path);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "%s: resumed after midpoint\n", name);
  std::fflush(stderr);
  AppRng check(0xba11a57);
  for (size_t i = 0; i < ballast_words; ++i) {
    if (ballast[i] != check.Next()) {
      std::fprintf(stderr, "%s: host memory differs after the pause (word %zu of the ballast)\n", name, i);
      std::exit(1);
    }
  }
  delete[] ballast;
}
