// The characters of a C++ identifier, as the demangled-name and signature
// parsers of this library read them (ASCII only: mangled names are).
#pragma once

namespace phos::signature {

inline bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
inline bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }

}  // namespace phos::signature
