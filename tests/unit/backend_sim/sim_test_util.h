// Helpers shared by the sim backend's own tests.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "collective_ops.h"

#define SIM_ASSERT_OK(expr)                                    \
  do {                                                         \
    ::phos::Status _s = (expr);                                \
    ASSERT_TRUE(_s.ok()) << #expr << " -> " << _s.ToString();  \
  } while (0)
#define SIM_EXPECT_CODE(expr, code_)                           \
  do {                                                         \
    ::phos::Status _s = (expr);                                \
    EXPECT_EQ(_s.code(), ::phos::Status::Code::code_)          \
        << #expr << " -> " << _s.ToString();                  \
  } while (0)

namespace phos::backend::sim_test {

inline constexpr std::size_t kMiB = 1u << 20;

/// One seed per run (PHOS_TEST_SEED=<n> fixes it); printed on failures.
inline std::uint32_t RunSeed() {
  static const std::uint32_t seed = [] {
    if (const char* s = std::getenv("PHOS_TEST_SEED")) {
      return static_cast<std::uint32_t>(std::strtoul(s, nullptr, 0));
    }
    return static_cast<std::uint32_t>(std::random_device{}());
  }();
  return seed;
}
#define SIM_SEED_TRACE() \
  SCOPED_TRACE("PHOS_TEST_SEED=" + std::to_string(::phos::backend::sim_test::RunSeed()))

/// Random bytes, never all zero.
inline std::vector<std::uint8_t> RandomBytes(std::size_t n, std::uint32_t salt) {
  std::mt19937 rng(RunSeed() ^ (salt * 0x9e3779b9u));
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  if (n > 0) v[0] |= 1;
  return v;
}

inline std::uint64_t H(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

/// A sim backend and one context on device 0.
struct SimFixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Context> ctx;
  Status Init(const SimOptions& options = SimOptions()) {
    PHOS_RETURN_IF_ERROR(CreateSimBackend(options, &backend));
    return backend->CreateContext(0, &ctx);
  }
};

/// A float32 collective op of the sim's NCCL tests (sim_collectives_test,
/// sim_fabric_test): the backend tests' one (tests/common/collective_ops.h).
using testing::FloatOp;

/// Device memory of the sim is phosd's memory: its floats.
inline float* Floats(DevicePtr p) { return reinterpret_cast<float*>(p); }

}  // namespace phos::backend::sim_test
