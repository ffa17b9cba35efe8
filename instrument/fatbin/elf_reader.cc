#include "fatbin/elf_reader.h"

#include <cstring>

#include "fatbin/byte_reader.h"

namespace phos::fatbin {

using internal::CorruptAt;
using internal::Hex;
using internal::InBounds;
using internal::Load16;
using internal::Load32;
using internal::Load64;
using internal::Need;

namespace {
constexpr std::string_view kElf = "elf";
constexpr uint32_t kShtNobits = 8;
constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtStrtab = 3;
constexpr size_t kEhdrSize = 64;
constexpr size_t kShdrSize = 64;
constexpr size_t kSymSize = 24;
constexpr uint16_t kShnXindex = 0xffff;
// A sanity cap: real cubins have tens to a few thousand sections.
constexpr uint64_t kMaxSections = 1u << 20;
}  // namespace

Status ElfReader::Parse(std::span<const uint8_t> bytes) {
  bytes_ = bytes;
  sections_.clear();
  PHOS_RETURN_IF_ERROR(Need(kElf, bytes, 0, kEhdrSize, "ELF64 header"));
  const uint8_t* h = bytes.data();
  if (std::memcmp(h, "\x7f" "ELF", 4) != 0) return CorruptAt(kElf, 0, "expected ELF magic 7f 45 4c 46");
  if (h[4] != 2) return CorruptAt(kElf, 4, "expected ELFCLASS64 (2), found " + std::to_string(h[4]));
  if (h[5] != 1) return CorruptAt(kElf, 5, "expected little-endian data (1), found " + std::to_string(h[5]));
  os_abi_ = h[7];
  abi_version_ = h[8];
  type_ = Load16(h + 0x10);
  machine_ = Load16(h + 0x12);
  flags_ = Load32(h + 0x30);
  const uint64_t shoff = Load64(h + 0x28);
  const uint16_t shentsize = Load16(h + 0x3a);
  uint64_t shnum = Load16(h + 0x3c);
  uint32_t shstrndx = Load16(h + 0x3e);
  const uint64_t phoff = Load64(h + 0x20);
  const uint16_t phentsize = Load16(h + 0x36);
  const uint16_t phnum = Load16(h + 0x38);
  if (phnum != 0 && phnum != 0xffff)
    PHOS_RETURN_IF_ERROR(Need(kElf, bytes, phoff, static_cast<uint64_t>(phnum) * phentsize,
                              std::to_string(phnum) + " program headers (e_phoff " + Hex(phoff) + ")"));
  if (shoff == 0) return Status::Ok();  // no section headers
  if (shentsize != kShdrSize)
    return CorruptAt(kElf, 0x3a, "expected section header size 64, found " + std::to_string(shentsize));
  PHOS_RETURN_IF_ERROR(Need(kElf, bytes, shoff, kShdrSize, "section header 0"));
  // Extended numbering: real counts live in section 0.
  if (shnum == 0) shnum = Load64(bytes.data() + shoff + 0x20);
  if (shstrndx == kShnXindex) shstrndx = Load32(bytes.data() + shoff + 0x28);
  if (shnum > kMaxSections)
    return CorruptAt(kElf, 0x3c, "expected at most " + std::to_string(kMaxSections) + " sections, found " +
                                     std::to_string(shnum));
  if (!InBounds(shoff, shnum * kShdrSize, bytes.size()))
    return Need(kElf, bytes, shoff, shnum * kShdrSize, std::to_string(shnum) + " section headers");
  sections_.resize(shnum);
  std::vector<uint32_t> name_offsets(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint8_t* s = bytes.data() + shoff + i * kShdrSize;
    ElfSection& sec = sections_[i];
    name_offsets[i] = Load32(s + 0x00);
    sec.type = Load32(s + 0x04);
    sec.flags = Load64(s + 0x08);
    sec.addr = Load64(s + 0x10);
    sec.offset = Load64(s + 0x18);
    sec.size = Load64(s + 0x20);
    sec.link = Load32(s + 0x28);
    sec.info = Load32(s + 0x2c);
    sec.entsize = Load64(s + 0x38);
    if (i != 0 && sec.type != kShtNobits && !InBounds(sec.offset, sec.size, bytes.size()))
      return CorruptAt(kElf, shoff + i * kShdrSize + 0x18,
                       "expected section " + std::to_string(i) + " (offset " + Hex(sec.offset) + ", size " +
                           Hex(sec.size) + ") inside the file of " + Hex(bytes.size()) + " bytes");
  }
  if (shstrndx != 0) {
    if (shstrndx >= shnum)
      return CorruptAt(kElf, 0x3e, "expected section name table index < " + std::to_string(shnum) + ", found " +
                                       std::to_string(shstrndx));
    for (uint64_t i = 0; i < shnum; ++i)
      PHOS_RETURN_IF_ERROR(ReadString(shstrndx, name_offsets[i], &sections_[i].name));
  }
  return Status::Ok();
}

Status ElfReader::ReadString(uint32_t strtab_index, uint64_t name_offset, std::string* out) const {
  if (strtab_index >= sections_.size())
    return Status::Corruption("elf: expected string table index < " + std::to_string(sections_.size()) +
                              ", found " + std::to_string(strtab_index));
  const ElfSection& st = sections_[strtab_index];
  if (st.type == kShtNobits)
    return Status::Corruption("elf: expected string table section " + std::to_string(strtab_index) +
                              " to have data, it is SHT_NOBITS");
  if (name_offset >= st.size)
    return CorruptAt(kElf, st.offset, "expected string at " + Hex(name_offset) + " inside string table of " +
                                          std::to_string(st.size) + " bytes");
  const char* begin = reinterpret_cast<const char*>(bytes_.data() + st.offset + name_offset);
  const size_t max = st.size - name_offset;
  const void* nul = std::memchr(begin, 0, max);
  if (nul == nullptr)
    return CorruptAt(kElf, st.offset + name_offset, "expected a NUL-terminated string inside the string table");
  out->assign(begin, static_cast<const char*>(nul));
  return Status::Ok();
}

int ElfReader::FindSection(std::string_view name) const {
  for (size_t i = 0; i < sections_.size(); ++i)
    if (sections_[i].name == name) return static_cast<int>(i);
  return -1;
}

std::span<const uint8_t> ElfReader::SectionData(size_t index) const {
  if (index >= sections_.size() || index == 0) return {};
  const ElfSection& s = sections_[index];
  if (s.type == kShtNobits) return {};
  return bytes_.subspan(s.offset, s.size);
}

Status ElfReader::ReadSymbols(std::vector<ElfSymbol>* out) const {
  out->clear();
  int symtab = -1;
  for (size_t i = 1; i < sections_.size(); ++i)
    if (sections_[i].type == kShtSymtab) {
      symtab = static_cast<int>(i);
      break;
    }
  if (symtab < 0) return Status::NotFound("elf: no symbol table");
  const ElfSection& st = sections_[symtab];
  if (st.entsize != kSymSize)
    return CorruptAt(kElf, st.offset, "expected symbol entries of 24 bytes, found " + std::to_string(st.entsize));
  if (st.link >= sections_.size() || sections_[st.link].type != kShtStrtab)
    return Status::Corruption("elf: expected the symbol table to link to a string table, found section " +
                              std::to_string(st.link));
  std::span<const uint8_t> data = SectionData(symtab);
  const size_t n = data.size() / kSymSize;
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* s = data.data() + i * kSymSize;
    ElfSymbol& sym = (*out)[i];
    const uint32_t name = Load32(s);
    sym.type = s[4] & 0xf;
    sym.binding = s[4] >> 4;
    sym.other = s[5];
    sym.shndx = Load16(s + 6);
    sym.value = Load64(s + 8);
    sym.size = Load64(s + 16);
    if (name != 0) PHOS_RETURN_IF_ERROR(ReadString(st.link, name, &sym.name));
  }
  return Status::Ok();
}

}  // namespace phos::fatbin
