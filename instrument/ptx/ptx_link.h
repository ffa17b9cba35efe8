// Links several PTX modules into one, as a device linker would for PTX
// inputs (docs/ptx-ir.md "Linking PTX"): the PTX of a JIT link of several
// PTX texts (nvJitLink, numba's `link=`), which phos needs because the sim
// runs PTX and twins read it, while the real linker only gives SASS.
//
// Rules: every module must have the same address size; the result takes
// the highest .version and the newest sm_ target. A function or module variable is
// defined once: a `.visible` definition resolves the other modules'
// `.extern` declarations of its name (and prototypes without a body); two
// `.visible` definitions of one name are an error; `.weak` and `.common`
// ones give way to a strong one, else the first wins. Names without
// linkage are private to their module: one that another module also uses
// is renamed (`name$phos<N>`) everywhere in its module. Declarations nothing
// defines stay external (CUDA's device runtime: instrument/interp's
// device_runtime_ptx.h). `.file` indices are renumbered per module and the
// `.loc` lines follow; top-level raw directives (debug sections) are
// dropped.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "ptx/ptx_ir.h"

namespace phos::ptx {

/// Links `inputs` (in link order) into `*out`. InvalidArgument naming the
/// symbol or the directive on a conflict.
Status LinkModules(std::vector<Module> inputs, Module* out);

/// The same on texts (each up to its first NUL, if any): parses each, links,
/// emits. Errors name the input (by its position) that failed to parse.
Status LinkPtxTexts(const std::vector<std::string>& texts, std::string* out);

}  // namespace phos::ptx
