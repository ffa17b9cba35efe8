// Demangling of kernel names and splitting of the demangled signature into
// its parameter types.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace phos::signature {

/// True for Itanium C++ mangled names (`_Z...`). Anything else is treated as
/// an extern "C" kernel: its name carries no types.
bool IsMangledName(std::string_view name);

/// abi::__cxa_demangle. Corruption when the name is not a valid mangled name.
Status Demangle(const std::string& mangled, std::string* out);

/// Splits a demangled function signature such as
///   "void tk<float>(float const*, float*, int)"
///   "a::(anonymous namespace)::b::deep(a::(anonymous namespace)::b::S, ...)"
/// into the function part ("void tk<float>") and its top-level parameter type
/// texts. "f()" and "f(void)" have no parameters. InvalidArgument when the
/// text does not end with a balanced parameter list.
Status SplitDemangledSignature(std::string_view demangled, std::string* function,
                               std::vector<std::string>* params);

}  // namespace phos::signature
