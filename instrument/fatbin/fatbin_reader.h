// Fatbin reader: __fatBinC_Wrapper_t → containers → entries (PTX / cubin),
// with decompression (zstd, LZ4). Layout: fatbin_format.h, docs/instrument.md.
//
// All reads of byte spans are bounds-checked; bad input gives
// Status::Corruption naming the offset and what was expected, never a crash.
// Offsets in messages are relative to the start of the span passed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace phos::fatbin {

enum class EntryKind : uint16_t { kPtx = 1, kElf = 2 };
enum class Compression { kNone, kZstd, kLz4 };

std::string_view EntryKindName(uint16_t kind);  // "ptx", "elf", "unknown"
std::string_view CompressionName(Compression c);  // "none", "zstd", "lz4"

struct FatbinEntry {
  uint16_t kind = 0;            // EntryKind value; other values are kept, not interpreted
  uint32_t sm_arch = 0;         // 90 for sm_90 / compute_90
  uint16_t version_major = 0;   // PTX ISA version, or cubin "code version"
  uint16_t version_minor = 0;
  uint64_t flags = 0;           // raw entry flags (fatbin_format.h kFlag*)
  Compression compression = Compression::kNone;
  size_t container_index = 0;   // which container of the input it came from
  size_t header_offset = 0;     // offset of the entry header in the input span
  size_t payload_offset = 0;    // offset of the stored payload in the input span
  uint64_t uncompressed_size = 0;  // declared by the header (0 when not compressed)
  // The stored bytes (compressed when compression != kNone), a view into
  // the input: valid only as long as the input is.
  std::span<const uint8_t> stored;
  // Decompressed contents (filled when ParseOptions::decompress, for PTX
  // and ELF entries only: other kinds stay in `stored`). PTX entries have
  // their trailing NUL padding removed, so `contents` is the PTX text; ELF
  // entries hold the cubin bytes.
  std::vector<uint8_t> contents;

  bool is_ptx() const { return kind == static_cast<uint16_t>(EntryKind::kPtx); }
  bool is_elf() const { return kind == static_cast<uint16_t>(EntryKind::kElf); }
  bool compressed() const { return compression != Compression::kNone; }
  std::string_view ptx_text() const {
    return {reinterpret_cast<const char*>(contents.data()), contents.size()};
  }
};

struct FatbinContainer {
  size_t offset = 0;        // of the container header in the input span
  size_t size = 0;          // header + payload
  size_t first_entry = 0;   // index into Fatbin::entries
  size_t entry_count = 0;
};

struct Fatbin {
  std::vector<FatbinContainer> containers;
  std::vector<FatbinEntry> entries;  // in file order, across all containers
};

struct ParseOptions {
  bool decompress = true;
  // Refuse entries that declare more than this many decompressed bytes (a
  // corrupt header must not make us allocate gigabytes).
  uint64_t max_uncompressed_size = 512ull << 20;
};

/// Parses the container whose header is at data[start]; *consumed gets its
/// size (header + payload). Its entries are appended to out->entries and it
/// to out->containers. Offsets (in results and messages) are relative to data.
Status ParseContainer(std::span<const uint8_t> data, size_t start, const ParseOptions& options, Fatbin* out,
                      size_t* consumed);

/// Parses a whole .nv_fatbin section (or an `nvcc -fatbin` file): one or more
/// containers back to back; zero padding between/after containers is allowed.
/// `out` is reset first.
Status ParseFatbin(std::span<const uint8_t> data, Fatbin* out, const ParseOptions& options = {});

/// Decompresses one entry's stored bytes into *out (copies when not
/// compressed; strips PTX NUL padding). Used by ParseFatbin.
Status DecompressEntry(const FatbinEntry& entry, const ParseOptions& options, std::vector<uint8_t>* out);

// ---- registration path -----------------------------------------------------

struct WrapperInfo {
  int32_t magic = 0;
  int32_t version = 0;
  const void* data = nullptr;         // → container header
  const void* filename_or_fatbins = nullptr;
};

/// Reads a __fatBinC_Wrapper_t that lives in this process (the argument of
/// __cudaRegisterFatBinary) and checks its magic.
Status ReadWrapper(const void* wrapper, WrapperInfo* out);

/// Size in bytes of the container at `container` (16 + payload_size), read
/// from its header. The memory is trusted to be readable for 16 bytes; the
/// size is checked against `max_size`.
Status ContainerSizeInMemory(const void* container, size_t* size, size_t max_size = 1ull << 32);

/// The registration path in one call: wrapper → its container → entries.
/// The container is read in place (the returned stored views point into it).
Status ParseFatbinFromWrapper(const void* wrapper, Fatbin* out, const ParseOptions& options = {});

// ---- summaries --------------------------------------------------------------

/// Index of the first PTX entry (or cubin for `sm_arch`) in `fatbin`, or -1.
long FindPtx(const Fatbin& fatbin);
long FindCubin(const Fatbin& fatbin, uint32_t sm_arch);

/// One line per entry, like `cuobjdump --list-elf --list-ptx`:
/// "container 0 entry 1: elf sm_90 zstd 3976 bytes".
std::string Describe(const Fatbin& fatbin);

}  // namespace phos::fatbin
