// A conformance suite for phos::backend::Backend, written against the
// interface only. The sim backend runs it in every CI run
// (tests/unit/backend_sim); the cuda backend runs it on a GPU (tests/gpu).
//
// To run it against a backend, link the phos_backend_conformance object
// library and instantiate:
//   INSTANTIATE_TEST_SUITE_P(Sim, BackendConformanceTest,
//       ::testing::Values(BackendParam{"sim", &MakeMySimBackend}));
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "backend/backend.h"

namespace phos::backend::testing {

using BackendFactory = Status (*)(std::unique_ptr<Backend>* out);

struct BackendParam {
  const char* name;
  BackendFactory factory;
};

inline std::string PrintToString(const BackendParam& p) { return p.name; }

/// SetUp creates the backend and one context on device 0. If the factory
/// returns Unavailable (no driver, no GPU) the test is skipped with
/// "skipped: no GPU (<reason>)" — never passed.
class BackendConformanceTest : public ::testing::TestWithParam<BackendParam> {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Context> ctx_;
};

}  // namespace phos::backend::testing
