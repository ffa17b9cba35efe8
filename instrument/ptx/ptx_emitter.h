// Module -> PTX text. Emit(Parse(Emit(m))) == Emit(m), and ptxas produces
// the same SASS for Emit(Parse(text)) as for text (docs/ptx-ir.md).
#pragma once

#include <string>

#include "ptx/ptx_ir.h"

namespace phos::ptx {

std::string EmitModule(const Module& m);
std::string EmitFunction(const Function& f);
std::string EmitInstruction(const Instruction& in);  // "@%p1 bra $L__BB0_2;"
std::string EmitOperand(const Operand& o);
std::string EmitVarDecl(const VarDecl& v);           // without the ';'

}  // namespace phos::ptx
