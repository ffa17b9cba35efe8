// Access roles of kernel parameters (docs/protocols.md "Access sets (implemented)" "Read and write sets").
//
// For every parameter of a kernel, phos decides what the launch may do to the
// buffers the parameter's value lands in:
//   kNone       scalars (arithmetic, enums, member pointers, nullptr_t) and
//               aggregates smaller than 8 bytes: ignored
//   kRead       `const T*` (also `const T* const`, `const T* __restrict__`)
//   kReadWrite  every other pointer (`T*`, `T* const`, `void*`, `T**`, ...)
//   kScanWords  aggregates passed by value (structs, classes, unions,
//               template specialisations, CUDA vector types of 8 bytes or
//               more, types the signature names but does not define): the
//               parameter's bytes are scanned in 8-byte words and every word
//               that lands in a buffer marks it read+write.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace phos::signature {

enum class AccessRole : uint8_t {
  kNone = 0,
  kRead = 1,
  kReadWrite = 2,
  kScanWords = 3,
};

/// "none", "read", "readwrite", "scan".
std::string_view AccessRoleName(AccessRole role);
/// Inverse of AccessRoleName; false on an unknown name.
bool ParseAccessRole(std::string_view name, AccessRole* out);

/// One kernel parameter: where it lies in the parameter buffer and what the
/// kernel may do through it.
struct ParamAccess {
  uint32_t ordinal = 0;        // position in the signature, 0-based
  uint32_t offset = 0;         // byte offset in the parameter buffer (valid if layout_known)
  uint32_t size = 0;           // bytes (valid if layout_known)
  bool layout_known = false;   // offset and size are known (from .nv.info or complete types)
  AccessRole role = AccessRole::kNone;
  // The pointee is itself a pointer (`float**`, `const float* const*`): the
  // buffer holds addresses the kernel may follow, which the speculation
  // cannot see. Validation (twin kernels) is what catches such accesses.
  bool pointee_is_pointer = false;
  // The parameter's type came from the kernel's (demangled) name and libclang
  // understood it; false for extern "C" kernels and for types that failed to
  // parse (their role then follows the size-only rule).
  bool typed = false;
  std::string type;            // parameter type as demangled ("float const*"); empty if untyped

  bool operator==(const ParamAccess&) const = default;
};

/// Number of 8-byte words a kScanWords parameter of `size` bytes covers
/// (the words at offset, offset+8, ... that fit entirely in the parameter).
inline uint32_t ScanWordCount(uint32_t size) { return size / 8; }

}  // namespace phos::signature
