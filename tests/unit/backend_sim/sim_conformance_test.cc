// Runs the backend conformance suite (tests/backend_conformance) on sim.
#include "backend_conformance.h"
#include "backend/backend_factory.h"

namespace phos::backend::testing {
namespace {

Status MakeSimBackend(std::unique_ptr<Backend>* out) {
  return CreateSimBackend(SimOptions(), out);
}

INSTANTIATE_TEST_SUITE_P(Sim, BackendConformanceTest,
                         ::testing::Values(BackendParam{"sim", &MakeSimBackend}),
                         [](const ::testing::TestParamInfo<BackendParam>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace phos::backend::testing
