// libFuzzer target: cubin ELF reading and .nv.info attribute tables. The
// input is tried both as a whole cubin and as one raw .nv.info.<kernel>
// section. Seeds: corpus/nv_info (real sm_90 cubins and raw sections).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fatbin/elf_reader.h"
#include "fatbin/nv_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phos::fatbin;
  const std::span<const uint8_t> bytes(data, size);

  CubinInfo info;
  (void)ReadCubinInfo(bytes, &info);
  for (const KernelNvInfo& k : info.kernels)
    for (const KernelParam& p : k.params)
      if (k.has_param_size && p.offset + p.size > k.param_size) __builtin_trap();

  ElfReader elf;
  if (elf.Parse(bytes).ok()) {
    std::vector<ElfSymbol> symbols;
    (void)elf.ReadSymbols(&symbols);
    for (size_t i = 0; i < elf.sections().size(); ++i) (void)elf.SectionData(i);
  }

  std::vector<NvInfoRecord> records;
  if (ParseNvInfoRecords(bytes, &records).ok()) {
    for (const NvInfoRecord& r : records)
      if (!r.value.empty() && (r.value.data() < data || r.value.data() + r.value.size() > data + size))
        __builtin_trap();
  }
  KernelNvInfo kernel;
  (void)ParseKernelNvInfo("fuzz", bytes, &kernel);
  return 0;
}
