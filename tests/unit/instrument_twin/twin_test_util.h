// Helpers shared by the twin tests.
#pragma once

#include <string>
#include <string_view>

#include "ptx/ptx_ir.h"
#include "twin/twin_pass.h"

namespace phos::twin::test {

std::string ReadFile(const std::string& path);

// Runs ptxas (PHOS_PTXAS) on `ptx` for `arch` ("sm_80"). Returns ptxas's exit
// status (-1 if it could not be run) and its diagnostics in *diag.
int RunPtxas(std::string_view ptxas, const std::string& ptx, const std::string& arch, std::string* diag);

// Checks present in a twin module: one `atom.global.add.u32` on the report
// count per check.
int CountInsertedChecks(const ptx::Module& twin);
int CountInsertedChecks(const ptx::Function& f);

// Independent count of the accesses MakeTwin must check in `in` (global or
// generic st/atom/red, plus ld/ldu in read mode, plus global sides of
// cp.async), for functions with bodies.
int ExpectedChecks(const ptx::Module& in, TwinMode mode);

}  // namespace phos::twin::test
