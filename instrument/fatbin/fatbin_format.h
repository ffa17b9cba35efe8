// On-disk layout of NVIDIA fat binaries, as verified on nvcc 13.0 output
// (see docs/instrument.md for the hex dumps this was read from).
//
// Everything is little-endian and packed. These structs document the layout;
// the reader never casts raw bytes to them (it decodes field by field with
// bounds checks), so alignment of the input does not matter.
//
//   __fatBinC_Wrapper_t          (argument of __cudaRegisterFatBinary, lives in
//                                 the host ELF's .nvFatBinSegment section)
//     └─ data → container        (in .nv_fatbin; a section holds several,
//                                 back to back, each padded to 8 bytes)
//          header (16 bytes)
//          entry header (64 or 80 bytes) + payload (payload_size bytes)
//          entry header + payload ...   until header_size + payload_size
#pragma once

#include <cstdint>

namespace phos::fatbin {

// ---- __fatBinC_Wrapper_t -------------------------------------------------
inline constexpr uint32_t kWrapperMagic = 0x466243b1;  // "1CbF" on disk: b1 43 62 46

struct FatbinWrapperLayout {
  int32_t magic;                     // kWrapperMagic
  int32_t version;                   // 1 (plain), 2 (whole-program -rdc link: filename_or_fatbins
                                     // points to a NULL-terminated list of prelinked fatbins)
  const unsigned long long* data;    // → a container header (kContainerMagic)
  void* filename_or_fatbins;         // version 1: unused/filename; version 2: see above
};
static_assert(sizeof(FatbinWrapperLayout) == 24, "wrapper is 24 bytes on LP64");

// ---- container header ----------------------------------------------------
inline constexpr uint32_t kContainerMagic = 0xba55ed50;  // on disk: 50 ed 55 ba
inline constexpr uint16_t kContainerVersion = 1;
inline constexpr uint32_t kContainerHeaderSize = 16;

struct ContainerHeaderLayout {
  uint32_t magic;         // +0x00 kContainerMagic
  uint16_t version;       // +0x04 1
  uint16_t header_size;   // +0x06 16: offset of the first entry header
  uint64_t payload_size;  // +0x08 bytes of entries that follow the header
};
static_assert(sizeof(ContainerHeaderLayout) == kContainerHeaderSize);

// ---- entry header --------------------------------------------------------
inline constexpr uint32_t kEntryHeaderMinSize = 64;

enum EntryKindValue : uint16_t {
  kEntryKindPtx = 1,   // PTX text (NUL-padded)
  kEntryKindElf = 2,   // cubin (ELF64, e_machine EM_CUDA = 190)
};

// flags (+0x28)
inline constexpr uint64_t kFlag64Bit = 0x1;          // 64-bit address space
inline constexpr uint64_t kFlagDebug = 0x2;          // -G / debug info
inline constexpr uint64_t kFlagLinux = 0x10;         // host is Linux
inline constexpr uint64_t kFlagCompressedLz4 = 0x2000;   // LZ4 block (older default;
                                                         // nvcc 13 --compress-mode speed)
inline constexpr uint64_t kFlagCompressedZstd = 0x8000;  // one zstd frame (nvcc 13 default)

struct EntryHeaderLayout {
  uint16_t kind;               // +0x00 EntryKindValue
  uint16_t unknown_02;         // +0x02 0x0101 observed
  uint32_t header_size;        // +0x04 64 (cubin) or 80 (PTX, nvcc 13): payload starts here
  uint64_t payload_size;       // +0x08 stored payload bytes, padded to a multiple of 8
  uint32_t compressed_size;    // +0x10 bytes of compressed data (0 when not compressed)
  uint32_t unknown_14;         // +0x14 0x40 on 80-byte PTX headers, else 0
  uint16_t version_minor;      // +0x18 PTX: ISA minor (0 for 9.0); cubin: 8 ("code version [1,8]")
  uint16_t version_major;      // +0x1a PTX: ISA major (9);          cubin: 1
  uint32_t sm_arch;            // +0x1c e.g. 90 for sm_90 / compute_90
  uint32_t name_offset;        // +0x20 0 observed
  uint32_t name_size;          // +0x24 0 observed
  uint64_t flags;              // +0x28 kFlag*
  uint64_t zero_30;            // +0x30 0 observed
  uint64_t uncompressed_size;  // +0x38 size after decompression (0 when not compressed)
  // +0x40: header_size - 64 more bytes (16 on nvcc 13 PTX entries; first
  // u32 observed 0x48, meaning unknown). Skipped by the reader.
};
static_assert(sizeof(EntryHeaderLayout) == kEntryHeaderMinSize);

}  // namespace phos::fatbin
