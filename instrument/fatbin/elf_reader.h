// Minimal, bounds-checked ELF64 little-endian reader: sections and symbols.
// Used for cubins (e_machine EM_CUDA = 190) and for host executables in tests
// (to find .nv_fatbin / .nvFatBinSegment). The reader keeps a view of the
// input bytes; the input must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace phos::fatbin {

inline constexpr uint16_t kEmCuda = 190;

struct ElfSection {
  std::string name;
  uint32_t type = 0;     // SHT_*
  uint64_t flags = 0;
  uint64_t addr = 0;
  uint64_t offset = 0;   // in the file
  uint64_t size = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t entsize = 0;
};

struct ElfSymbol {
  std::string name;
  uint64_t value = 0;
  uint64_t size = 0;
  uint8_t type = 0;      // STT_* (low nibble of st_info)
  uint8_t binding = 0;   // STB_* (high nibble)
  uint8_t other = 0;
  uint16_t shndx = 0;
};

class ElfReader {
 public:
  /// Parses the ELF header, the section headers and their names.
  Status Parse(std::span<const uint8_t> bytes);

  uint16_t type() const { return type_; }          // e_type (ET_EXEC = 2, ET_REL = 1, ET_DYN = 3)
  uint16_t machine() const { return machine_; }    // e_machine
  uint32_t flags() const { return flags_; }        // e_flags (cubin: arch in the low bits)
  uint8_t os_abi() const { return os_abi_; }       // cubin: 0x41 (CUDA), abi version 8 on nvcc 13
  uint8_t abi_version() const { return abi_version_; }
  const std::vector<ElfSection>& sections() const { return sections_; }

  /// Index of the first section called `name`, or -1.
  int FindSection(std::string_view name) const;
  /// The bytes of section `index` (empty for SHT_NOBITS). Bounds were
  /// checked by Parse().
  std::span<const uint8_t> SectionData(size_t index) const;
  /// Reads .symtab (or the SHT_SYMTAB section) with names from its linked
  /// string table. NotFound when there is none.
  Status ReadSymbols(std::vector<ElfSymbol>* out) const;

 private:
  Status ReadString(uint32_t strtab_index, uint64_t name_offset, std::string* out) const;

  std::span<const uint8_t> bytes_;
  uint16_t type_ = 0;
  uint16_t machine_ = 0;
  uint32_t flags_ = 0;
  uint8_t os_abi_ = 0;
  uint8_t abi_version_ = 0;
  std::vector<ElfSection> sections_;
};

}  // namespace phos::fatbin
