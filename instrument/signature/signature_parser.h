// Parameter types of a demangled kernel signature -> access roles, via
// libclang.
//
// The demangled types name classes, enums and templates that phos has no
// declarations for ("Holder<double>", "ns::Functor<int>", "a::(anonymous
// namespace)::S"). Before parsing, every such qualified name (with its
// template arguments) is replaced by a placeholder `struct __phos_tN;`
// (incomplete); the CUDA vector and half types (float2, int4, __half, dim3,
// ...) are declared completely, with CUDA's sizes and alignments. What
// remains for libclang is builtin types, cv-qualifiers, pointers, references,
// arrays, function and member pointers. Each parameter becomes its own
// declaration `void __phos_pN(<type>);` so an error in one parameter does not
// spoil the others; a parameter libclang rejects is reported as not parsed.
//
// A named type by value is always a class, union or enum (mangled names use
// canonical types, never typedefs, except dependent names like
// "Foo<T>::type"); the placeholder makes it kScanWords, the conservative
// role, and callers with .nv.info sizes turn sub-8-byte ones (enums) into
// kNone.
//
// Thread safety: libclang is not thread-safe per index; every libclang call
// here runs under one process-wide mutex (see signature_parser.cc), so
// ParseParameterTypes may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "signature/access_role.h"

namespace phos::signature {

struct ParsedParam {
  bool parsed = false;          // libclang accepted the type; the fields below are valid
  AccessRole role = AccessRole::kScanWords;
  bool pointee_is_pointer = false;
  bool size_known = false;      // size/align known (complete type)
  uint32_t size = 0;
  uint32_t align = 0;
  std::string error;            // why not parsed (first diagnostic)
};

/// Rewrites one demangled parameter type into text libclang can parse:
/// unknown (qualified, templated) names become placeholders, appended to
/// *placeholders (the same name twice maps to the same placeholder; the
/// placeholder for placeholders->at(i) is "__phos_t<i>"). Exposed for tests.
std::string SanitizeTypeForClang(const std::string& demangled_type,
                                 std::vector<std::string>* placeholders);

/// Parses every type text (demangled parameter types) in one libclang
/// translation unit and classifies it. out->size() == types.size(). Returns
/// an error only when libclang itself fails (no translation unit); types it
/// rejects come back with parsed == false.
Status ParseParameterTypes(const std::vector<std::string>& types, std::vector<ParsedParam>* out);

}  // namespace phos::signature
