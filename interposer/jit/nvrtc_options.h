// NVRTC options, as phos's NVRTC shim needs them (docs/interposer.md
// "JIT-compiled kernels keep their PTX"): NVRTC keeps no PTX when it
// compiles for a real architecture (-arch=sm_90 gives a cubin and an empty
// PTX), so the shim compiles the same program once more for the matching
// virtual architecture (compute_90) to obtain it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace phos::jit {

/// The options with every real architecture (`sm_XX[a|f]`) given to
/// -arch / --gpu-architecture (`=` form or as the next option) replaced by
/// `compute_XX[a|f]`; nullopt when no option names a real architecture (the
/// program then has PTX and no cubin, or the options say something phos
/// does not rewrite).
std::optional<std::vector<std::string>> OptionsForPtx(const std::vector<std::string>& options);

}  // namespace phos::jit
