// Kernel signatures: for every parameter of a kernel, its place in the
// parameter buffer and its access role (docs/protocols.md "Access sets (implemented)"; docs/instrument.md
// "Kernel signatures and access roles").
//
// Sources, merged:
//   - the mangled name: demangled (abi::__cxa_demangle), its parameter types
//     parsed with libclang (signature_parser.h) -> roles;
//   - the cubin's .nv.info parameter table (EIATTR_KPARAM_INFO: ordinal,
//     offset, size), when the caller has it -> layout, authoritative.
// extern "C" kernels (names that are not `_Z...`) carry no types: each
// 8-byte parameter is a candidate pointer (kReadWrite), larger ones are
// scanned (kScanWords), smaller ones ignored (kNone).
//
// libclang is slow (milliseconds per parse): resolve through SignatureCache,
// which parses once per fatbin and keeps results on disk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "signature/access_role.h"

namespace phos::signature {

/// One row of a kernel's .nv.info parameter table (EIATTR_KPARAM_INFO).
struct ParamInfo {
  uint32_t ordinal = 0;
  uint32_t offset = 0;
  uint32_t size = 0;

  bool operator==(const ParamInfo&) const = default;
};

struct KernelSignature {
  std::string mangled_name;
  std::string demangled;        // empty for extern "C" kernels
  bool extern_c = false;        // the name carries no types
  // Every parameter came from parsed types (no size-only fallback).
  bool fully_typed = false;
  // The parameter list came from the .nv.info table (offsets and sizes
  // authoritative); otherwise from the types alone (layout_known per param).
  bool from_nv_info = false;
  std::vector<ParamAccess> params;  // by ordinal

  /// Total parameter bytes (end of the last parameter), 0 if unknown.
  uint32_t ParamBufferSize() const;
  /// "tk<float>(const float* : read @0+8, ...)"-style one-line summary.
  std::string ToString() const;

  bool operator==(const KernelSignature&) const = default;
};

/// Resolves one kernel. `kparams` (ordinal, offset, size from .nv.info) may
/// be empty (= unknown; see KernelRequest::has_nv_info); when given, the ordinals must be 0..n-1 (any order). Errors:
///   InvalidArgument  bad kparams (duplicate/missing ordinals)
///   NotFound         extern "C" kernel (or an undemanglable name) and no
///                    kparams: nothing says how many parameters it has
///   Internal         libclang failed as a whole
/// A typed kernel whose parsed parameter count differs from the .nv.info
/// table is resolved with the size-only rule (and a warning).
Status ResolveKernelSignature(const std::string& mangled_name, const std::vector<ParamInfo>& kparams,
                              KernelSignature* out);

struct KernelRequest {
  std::string mangled_name;
  std::vector<ParamInfo> kparams;  // may be empty
  // The kernel's .nv.info table was read, so an empty kparams means "no
  // parameters" rather than "unknown" (matters for extern "C" kernels).
  // Implied by a non-empty kparams.
  bool has_nv_info = false;

  bool operator==(const KernelRequest&) const = default;
};

/// Resolves many kernels with a single libclang parse (what a fatbin
/// registration needs). out and statuses get one entry per request.
void ResolveKernelSignatures(const std::vector<KernelRequest>& requests,
                             std::vector<KernelSignature>* out, std::vector<Status>* statuses);

}  // namespace phos::signature
