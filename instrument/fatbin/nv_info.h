// .nv.info / .nv.info.<kernel> attribute tables of a cubin: parameter layout
// (EIATTR_KPARAM_INFO) and related per-kernel facts. Layout verified on
// nvcc 13.0 sm_90 cubins (docs/instrument.md).
//
// A section is a sequence of records on a 4-byte grid:
//   u8 format, u8 attribute, u16 x, then for EIFMT_SVAL x bytes of value.
//   EIFMT_NVAL (1): no value, x = 0
//   EIFMT_BVAL (2): x holds a byte value
//   EIFMT_HVAL (3): x holds a 16-bit value
//   EIFMT_SVAL (4): x = value size; the value follows
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace phos::fatbin {

enum NvInfoFormat : uint8_t {
  kEifmtNval = 1,
  kEifmtBval = 2,
  kEifmtHval = 3,
  kEifmtSval = 4,
};

// The attributes phos reads or names in diagnostics (values seen in
// cuobjdump -elf output; not exhaustive).
enum NvInfoAttr : uint8_t {
  kEiattrCtaidzUsed = 0x04,
  kEiattrMaxThreads = 0x05,
  kEiattrParamCbank = 0x0a,          // SVAL: u32 sym, u16 offset in cbank 0, u16 size
  kEiattrExterns = 0x0f,             // SVAL: u32 symbol indices of external functions
  kEiattrReqntid = 0x10,
  kEiattrFrameSize = 0x11,           // SVAL (.nv.info): u32 sym, u32 bytes
  kEiattrMinStackSize = 0x12,        // SVAL (.nv.info): u32 sym, u32 bytes
  kEiattrKparamInfo = 0x17,          // SVAL(12): u32 index, u16 ordinal, u16 offset, u32 bits
  kEiattrCbankParamSize = 0x19,      // HVAL: total parameter bytes
  kEiattrMaxregCount = 0x1b,         // HVAL
  kEiattrExitInstrOffsets = 0x1c,    // SVAL: u32 offsets into .text.<kernel>
  kEiattrS2rctaidInstrOffsets = 0x1d,
  kEiattrCrsStackSize = 0x1e,
  kEiattrRegcount = 0x2f,            // SVAL (.nv.info): u32 sym, u32 registers
  kEiattrSwWar = 0x36,               // SVAL: workaround flags
  kEiattrCudaApiVersion = 0x37,      // SVAL: u32 (0x82 = 130 on CUDA 13.0)
  // In place of KPARAM_INFO when a kernel's parameters pass 16383 bytes
  // (CUDA 12.1+ allows 32764; KPARAM_INFO's size field has 14 bits). Seen
  // from nvcc 13.0: SVAL(12): u32 index, u16 ordinal, u16 offset, u32 size
  // in bytes (no flag bits seen). Named here after its role.
  kEiattrKparamInfoV2 = 0x45,
};

std::string_view NvInfoAttrName(uint8_t attr);  // "EIATTR_KPARAM_INFO", or "EIATTR_0x5f"

struct NvInfoRecord {
  size_t offset = 0;     // of the record in the section
  uint8_t format = 0;
  uint8_t attribute = 0;
  uint16_t inline_value = 0;        // BVAL/HVAL value; SVAL size
  std::span<const uint8_t> value;   // SVAL value bytes (view into the section)
};

/// Splits a .nv.info* section into records. Corruption on a record that
/// runs past the end or an unknown format.
Status ParseNvInfoRecords(std::span<const uint8_t> section, std::vector<NvInfoRecord>* out);

/// The most parameter bytes a kernel may take (CUDA 12.1+, compute
/// capability 7.0+).
inline constexpr uint32_t kMaxKernelParamBytes = 32764;

struct KernelParam {
  uint32_t ordinal = 0;       // position in the signature, 0-based
  uint32_t offset = 0;        // byte offset in the parameter buffer
  uint32_t size = 0;          // bytes
  uint32_t log_alignment = 0; // pointee's log2 alignment (0 when unknown)
  uint32_t space = 0;
  uint32_t cbank = 0;         // 0x1f observed
  bool in_cbank = true;       // parameter lives in the constant bank (normal case)
};

struct KernelNvInfo {
  std::string name;                 // mangled kernel name (section suffix)
  std::vector<KernelParam> params;  // sorted by ordinal, ordinals 0..n-1
  bool has_param_size = false;
  uint32_t param_size = 0;          // EIATTR_CBANK_PARAM_SIZE
  bool has_param_cbank = false;
  uint32_t param_cbank_offset = 0;  // EIATTR_PARAM_CBANK: where params start in c[0x0]
  uint32_t param_cbank_size = 0;
  uint32_t max_reg_count = 0;       // EIATTR_MAXREG_COUNT (0 = absent)
  uint32_t cuda_api_version = 0;    // EIATTR_CUDA_API_VERSION (0 = absent)
  std::vector<uint32_t> exit_offsets;
  // From the module-wide .nv.info, by symbol (0 = absent):
  uint32_t regcount = 0;
  uint32_t frame_size = 0;
  uint32_t min_stack_size = 0;
};

/// Parses one .nv.info.<kernel> section. Checks that KPARAM_INFO ordinals
/// are unique and dense, and that every parameter lies inside the declared
/// total parameter size.
Status ParseKernelNvInfo(std::string_view kernel_name, std::span<const uint8_t> section, KernelNvInfo* out);

struct CubinInfo {
  uint32_t sm_arch = 0;           // from e_flags
  std::vector<KernelNvInfo> kernels;  // one per .nv.info.<kernel> section, in section order
  std::vector<std::string> externs;   // EIATTR_EXTERNS symbol names (relocatable cubins)

  const KernelNvInfo* Find(std::string_view name) const {
    for (const auto& k : kernels)
      if (k.name == name) return &k;
    return nullptr;
  }
};

/// Reads every kernel's parameter table from a cubin (ELF64, EM_CUDA).
Status ReadCubinInfo(std::span<const uint8_t> cubin, CubinInfo* out);

}  // namespace phos::fatbin
