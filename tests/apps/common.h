// Shared helpers for the phos test programs (tests/apps). Header-only, host code.
//
// Every program generates its inputs with the fixed-seed PRNG below, checks
// the GPU results against a CPU reference and prints a checksum of the GPU
// results, so a run under phos (cuda or sim backend) can be compared with a
// native run by the printed line alone. Exit status: 0 match, 1 mismatch,
// 2 CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
