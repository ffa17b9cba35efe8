// Helpers for the fatbin tests: fixture paths and file loading.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "fatbin/elf_reader.h"

namespace phos::fatbin::testing {

// The programs in tests/apps and their fatbin variants (built by nvcc).
inline const std::vector<std::string>& AppNames() {
  static const std::vector<std::string> names = {"vector_add",         "saxpy_loop",    "reduce_shared",
                                                 "struct_of_pointers", "pointer_table", "multi_stream"};
  return names;
}

inline std::string AppPath(const std::string& file) { return std::string(PHOS_TEST_APPS_DIR) + "/" + file; }

inline bool HaveFile(const std::string& path) { return std::filesystem::exists(path); }

inline std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Bytes of a host ELF's section (e.g. ".nv_fatbin"), copied out.
inline bool ReadHostSection(const std::vector<uint8_t>& elf_bytes, const std::string& name, std::vector<uint8_t>* out,
                            uint64_t* addr = nullptr) {
  ElfReader elf;
  if (!elf.Parse(elf_bytes).ok()) return false;
  const int i = elf.FindSection(name);
  if (i < 0) return false;
  auto data = elf.SectionData(i);
  out->assign(data.begin(), data.end());
  if (addr) *addr = elf.sections()[i].addr;
  return true;
}

}  // namespace phos::fatbin::testing

#define PHOS_SKIP_WITHOUT(path)                                               \
  do {                                                                       \
    if (!::phos::fatbin::testing::HaveFile(path)) GTEST_SKIP() << "missing fixture " << (path) << " (no nvcc?)"; \
  } while (0)
