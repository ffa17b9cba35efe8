// Access sets of kernel launches, computed in phosd (docs/protocols.md "Access sets (implemented)" "Read and
// write sets"; docs/protocols.md "Access sets (implemented)").
//
// Deviation from docs/protocols.md "Access sets (implemented)": the design has libphos.so compute access sets.
// phosd computes them instead, from the call it decodes: the app is
// untrusted (a set the app supplies could lie and silently corrupt a
// checkpoint), and phosd already has the session's buffer map and every
// module image.
//
// Two phases:
//   module load  BuildModuleKernels: every kernel of the image gets a
//                KernelAccessPlan — its parameter table (offset, size) from
//                the cubin's .nv.info (EIATTR_KPARAM_INFO) or, for kernels
//                only the PTX describes, the PTX `.entry` list; each
//                parameter's role from instrument/signature (demangled name
//                -> libclang; extern "C": every 8-byte parameter a
//                read+write candidate). Signatures go through one
//                process-wide SignatureCache (one libclang parse per image,
//                milliseconds; a repeated image costs a hash lookup).
//   launch       ComputeLaunchAccess: each pointer-role parameter, and each
//                8-byte word of an aggregate, is looked up in the session's
//                buffer map (and module globals); a hit adds the whole
//                buffer with the role; a miss is ignored. No allocation for
//                kernels touching up to 4 buffers; ~tens of ns per probe
//                (docs/benchmarks.md "Kernel access sets").
//
// Ownership: plans belong to one session and are used on its consumer
// thread only (no lock); the word-hit statistics are written there too.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "session/executor.h"

namespace phos::signature {
class SignatureCache;
}  // namespace phos::signature

namespace phos::session {

/// One 8-byte value to look up at launch: a pointer parameter, or one word
/// of an aggregate passed by value.
struct AccessProbe {
  uint32_t offset = 0;      // in the parameter buffer
  uint32_t ordinal = 0;     // the parameter it belongs to
  bool write = true;        // false only for `const T*`
  bool aggregate_word = false;  // a word of a struct scanned for pointers
};

/// Everything a launch of one kernel needs to build its access set.
struct KernelAccessPlan {
  std::string name;                     // mangled
  /// kSpeculated (its module has PTX: twin-able), kUnvalidatable (no PTX),
  /// or kUnknown (no parameter layout: nothing to probe).
  AccessKind kind = AccessKind::kUnknown;
  /// Why a kUnvalidatable kernel is (no PTX; an access its twin cannot
  /// check, twin_pass.h "unchecked"); empty otherwise.
  std::string unvalidatable_reason;
  /// It calls cudaGraphSetConditional, directly or through the functions it
  /// calls (KernelsSettingGraphConditionals): it writes a conditional
  /// handle's slot, which no access set names, so the plan is kUnknown; and
  /// only a backend that implements phos's handles may run it
  /// (Backend::ImplementsConditionalHandles).
  bool sets_graph_conditionals = false;
  /// Every parameter's role came from parsed types. False for extern "C"
  /// kernels and size-only fallbacks: every 8-byte parameter is a
  /// read+write candidate ("all candidates").
  bool typed = false;
  uint32_t param_bytes = 0;             // end of the last parameter
  std::vector<AccessProbe> probes;      // in parameter order
  // Per-kernel cache of which aggregate words turned out to be pointers:
  // hits per probe (parallel to `probes`; only aggregate words counted).
  // Statistics today; a future fast path may probe only words that ever hit.
  std::vector<uint64_t> word_hits;
  uint64_t launches = 0;
};

/// The plans of one module image, by mangled kernel name.
struct ModuleKernels {
  bool has_ptx = false;
  /// The module may have module-scope variables (__device__, __constant__)
  /// its kernels use by symbol — invisible in their parameters. False only
  /// when the module's PTX was read and declares none; a SASS-only image
  /// counts as "may". Launches of such modules add the session's globals
  /// to their access set (ComputeLaunchAccess).
  bool may_have_variables = true;
  /// Its kernels may sample textures or load/store surfaces (the PTX names
  /// tex/tld4/txq/suld/sust/sured/suq, or there is no PTX to tell): their
  /// launches read and write the session's texture and surface objects'
  /// buffers (AddTextureAccess, call_handlers.h).
  bool may_use_textures = true;
  /// Its kernels call device-side malloc/free (the PTX declares them): a
  /// launch needs the device heap (when the backend wants one made).
  bool uses_device_heap = false;
  /// Some kernel of it calls cudaGraphSetConditional (its plan says which:
  /// KernelAccessPlan::sets_graph_conditionals). Launches without a plan go
  /// by this.
  bool sets_graph_conditionals = false;
  /// The module-scope variables the PTX defines (__device__, __constant__,
  /// static ones and string constants; not .extern declarations, not
  /// texture references), by PTX name. The session records each as a
  /// global of the module when the app loads it (RecordModuleVariables),
  /// so a checkpoint saves the values kernels left in them even when the
  /// host never named them. Empty without PTX.
  std::vector<std::string> variables;
  std::unordered_map<std::string, std::shared_ptr<KernelAccessPlan>> kernels;
};

/// True when `ptx` has a texture or surface instruction (conservative: a
/// match in a comment or string counts too).
bool PtxUsesTextures(std::string_view ptx);
/// True when `ptx` declares cudaGraphSetConditional (ptx/device_runtime.h).
bool PtxSetsGraphConditionals(std::string_view ptx);
/// The kernels (.entry names) of `ptx` that call cudaGraphSetConditional,
/// directly or through the .func functions they call; a call through a
/// pointer counts as one. Empty when the module does not declare it;
/// nullopt when the PTX cannot be parsed (then any kernel may).
std::optional<std::set<std::string>> KernelsSettingGraphConditionals(std::string_view ptx);
/// The kernels of `ptx` a twin cannot fully check for writes, with the
/// reason (twin::TwinInfo::UncheckedReason in write mode). Only modules that
/// name one of the instruction families that can go unchecked in write
/// mode are parsed (tensor-map copies, multimem, tensormap, wmma stores, an
/// .extern function the device runtime does not provide); others answer
/// empty at the cost of a text scan. A module the
/// parser or the pass refuses answers empty too: its twin is refused at
/// validation time (engine/twin_validator.h), with the reason.
std::map<std::string, std::string> UncheckedKernels(std::string_view ptx);
/// True when `ptx` declares the external `malloc`, `free` or an aligned
/// malloc (`__cuda_syscall_aligned_malloc`, `__nv_aligned_device_malloc`):
/// its kernels need the device heap.
bool PtxUsesDeviceHeap(std::string_view ptx);

/// Reads an image (fatbin container, cubin ELF or PTX text) and builds a
/// plan for each kernel in it. An image phos cannot read yields no plans
/// (its launches are kUnknown) and an error naming why; the module still
/// loads (the backend judges the image). Kernel signatures come from
/// `cache` (phosd's one SignatureCache, which the Daemon owns and passes
/// to every session: SessionServerOptions::signature_cache); null = a
/// memory-only cache for this call (tests, benchmarks).
Status BuildModuleKernels(std::span<const std::byte> image, signature::SignatureCache* cache, ModuleKernels* out);

/// True when PTX text declares a module-scope variable in the global,
/// const or texture state space (a line outside any function starting with
/// `.global`, `.const`, `.tex`, optionally after `.visible`/`.extern`/`.weak`).
bool PtxDeclaresModuleVariables(std::string_view ptx);
/// The names of the module-scope variables `ptx` defines in .global or
/// .const (ModuleKernels::variables), in declaration order.
std::vector<std::string> PtxModuleVariableNames(std::string_view ptx);

/// A plan for a kernel the module does not describe (kUnknown, no probes).
std::shared_ptr<KernelAccessPlan> UnknownKernelPlan(const std::string& name);

/// Fills `view->kind` and `view->ranges` for one launch of `plan` with the
/// parameter block `params` against the session's `buffers` and `globals`
/// (start -> bytes). Probes past the end of `params` are ignored.
/// `module_variables`: the (start, bytes) of the variables of the kernel's
/// own module when it may use them by symbol
/// (ModuleKernels::may_have_variables; SessionState::module_globals), added
/// read+write: a kernel names only its own module's variables by symbol
/// (another module's it reaches through a pointer, which a probe finds), and
/// a checkpoint never misses their writes. O(probes x variables): a variable
/// already in the set through a pointer parameter is merged, not repeated.
void ComputeLaunchAccess(KernelAccessPlan& plan, std::span<const uint8_t> params,
                         const std::map<uint64_t, uint64_t>& buffers, const std::map<uint64_t, uint64_t>& globals,
                         CallView* view, std::span<const std::pair<uint64_t, uint64_t>> module_variables = {});

}  // namespace phos::session
