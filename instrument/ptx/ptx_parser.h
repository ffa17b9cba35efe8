// PTX text -> Module (docs/ptx-ir.md lists what is accepted).
#pragma once

#include <string_view>

#include "common/status.h"
#include "ptx/ptx_ir.h"

namespace phos::ptx {

// Parses a whole PTX module. On error returns
// Status::Corruption("ptx:LINE:COL: expected ..., got ...") and leaves *out
// in an unspecified state. Never crashes or hangs, whatever the input.
Status ParseModule(std::string_view text, Module* out);

// Parses one instruction statement such as "@!%p1 ld.global.u32 %r1, [%rd2+4];"
// (the trailing ';' is optional). Handy for passes and tests.
Status ParseInstruction(std::string_view text, Instruction* out);

}  // namespace phos::ptx
