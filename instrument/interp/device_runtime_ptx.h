// Functions of CUDA's device runtime library (libcudadevrt.a) that the
// interpreter runs from PTX phos wrote itself (docs/instrument.md "Device
// runtime functions"). libcudadevrt ships as SASS only, so a kernel linked
// against it (numba's cooperative kernels: this_grid().sync() calls
// cudaCGGetIntrinsicHandle and cudaCGSynchronize) reaches the sim as PTX
// with `.extern .func` prototypes and no bodies. SupplyDeviceRuntime gives
// those prototypes the bodies below; the rest stay external, and a call to
// one is refused by name when the program is built (program.cc).
#pragma once

#include <string>
#include <vector>

#include "ptx/ptx_ir.h"

namespace phos::interp {

/// Replaces each body-less prototype in `module` of a function this file
/// defines by its definition, when the prototype's parameters and results
/// match the definition's (a mismatch is left alone, and refused later).
/// Returns the names supplied.
std::vector<std::string> SupplyDeviceRuntime(ptx::Module* module);

}  // namespace phos::interp
