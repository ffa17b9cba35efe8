// What one nvJitLink link was given, and where the PTX of its result comes
// from (docs/interposer.md "JIT-compiled kernels keep their PTX").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace phos::jit {

// nvJitLinkInputType values (nvJitLink.h), restated so this header needs
// no CUDA header.
enum class InputType : int { kNone = 0, kCubin = 1, kPtx = 2, kLtoIr = 3, kFatbin = 4, kObject = 5,
                             kLibrary = 6, kIndex = 7, kAny = 10 };

/// True when `bytes` is PTX text: not an ELF, fatbin or archive, and it has
/// `.version` and `.target` directives before any NUL. Used for inputs
/// typed NVJITLINK_INPUT_ANY (and files added with that type).
bool LooksLikePtx(std::string_view bytes);

/// One input the real library accepted, kept so that an LTO link can be
/// run again for its PTX.
struct LinkInput {
  InputType type = InputType::kNone;  // as given (kAny stays kAny)
  bool is_ptx = false;                // PTX by type or by content
  bool is_ltoir = false;              // LTO-IR by type (kAny content is not sniffed for it)
  bool is_device_runtime = false;     // libcudadevrt.a (by its name): see PtxSource::kSinglePtx
  std::string bytes;                  // PTX text or LTO-IR bytes (AddData's, or a PTX file's); else empty
  std::string name;                   // AddData's name (may be empty)
  std::string file;                   // AddFile's path ("" for AddData)
};

/// How the PTX of a link's cubin is obtained.
enum class PtxSource {
  kSinglePtx,  // the link's one PTX input, alone or with CUDA's device runtime
               // library (libcudadevrt.a, SASS only: numba's cooperative
               // kernels), whose functions the sim's interpreter defines
               // itself (instrument/interp/device_runtime_ptx.h)
  kLtoRelink,  // every input is LTO-IR (or the device runtime library, left
               // out of the relink): link them again with -ptx
  kPtxLink,    // several PTX inputs, or PTX with LTO-IR under -lto (the
               // LTO-IR linked again with -ptx alone): the texts linked as
               // PTX by phos (instrument/ptx/ptx_link.h)
  kNone,       // anything else (see Why())
};

/// The options and inputs of one link. Owned by the link handle; nvJitLink
/// handles are not shared between threads without the app's own locking,
/// so neither is this.
class LinkRecord {
 public:
  void SetOptions(uint32_t n, const char* const* options);
  void Add(InputType type, std::string_view bytes, const char* name, const char* file);

  PtxSource Source() const;
  /// For kNone: what was linked, e.g. "2 inputs: PTX and a library".
  std::string Why() const;

  const std::vector<std::string>& options() const { return options_; }
  const std::vector<LinkInput>& inputs() const { return inputs_; }
  /// The one PTX input's text (valid for kSinglePtx).
  std::string_view single_ptx() const;

 private:
  std::vector<std::string> options_;
  std::vector<LinkInput> inputs_;
};

}  // namespace phos::jit
