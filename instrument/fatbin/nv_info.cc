#include "fatbin/nv_info.h"

#include <algorithm>

#include "fatbin/byte_reader.h"
#include "fatbin/elf_reader.h"

namespace phos::fatbin {

using internal::CorruptAt;
using internal::Hex;
using internal::Load16;
using internal::Load32;
using internal::Need;

namespace {
constexpr std::string_view kNvInfo = "nv.info";
constexpr std::string_view kKernelPrefix = ".nv.info.";
constexpr uint32_t kShtCudaInfo = 0x70000000;  // SHT_LOPROC: type of .nv.info* sections

Status U32At(const NvInfoRecord& r, size_t index, uint32_t* out) {
  if ((index + 1) * 4 > r.value.size())
    return CorruptAt(kNvInfo, r.offset,
                     std::string("expected ") + std::to_string((index + 1) * 4) + " value bytes for " +
                         std::string(NvInfoAttrName(r.attribute)) + ", found " + std::to_string(r.value.size()));
  *out = Load32(r.value.data() + index * 4);
  return Status::Ok();
}
}  // namespace

std::string_view NvInfoAttrName(uint8_t attr) {
  switch (attr) {
    case kEiattrCtaidzUsed: return "EIATTR_CTAIDZ_USED";
    case kEiattrMaxThreads: return "EIATTR_MAX_THREADS";
    case kEiattrParamCbank: return "EIATTR_PARAM_CBANK";
    case kEiattrExterns: return "EIATTR_EXTERNS";
    case kEiattrReqntid: return "EIATTR_REQNTID";
    case kEiattrFrameSize: return "EIATTR_FRAME_SIZE";
    case kEiattrMinStackSize: return "EIATTR_MIN_STACK_SIZE";
    case kEiattrKparamInfo: return "EIATTR_KPARAM_INFO";
    case kEiattrKparamInfoV2: return "EIATTR_KPARAM_INFO_V2";
    case kEiattrCbankParamSize: return "EIATTR_CBANK_PARAM_SIZE";
    case kEiattrMaxregCount: return "EIATTR_MAXREG_COUNT";
    case kEiattrExitInstrOffsets: return "EIATTR_EXIT_INSTR_OFFSETS";
    case kEiattrS2rctaidInstrOffsets: return "EIATTR_S2RCTAID_INSTR_OFFSETS";
    case kEiattrCrsStackSize: return "EIATTR_CRS_STACK_SIZE";
    case kEiattrRegcount: return "EIATTR_REGCOUNT";
    case kEiattrSwWar: return "EIATTR_SW_WAR";
    case kEiattrCudaApiVersion: return "EIATTR_CUDA_API_VERSION";
    default: return "EIATTR_other";
  }
}

Status ParseNvInfoRecords(std::span<const uint8_t> section, std::vector<NvInfoRecord>* out) {
  out->clear();
  size_t off = 0;
  while (off < section.size()) {
    PHOS_RETURN_IF_ERROR(Need(kNvInfo, section, off, 4, "attribute record header"));
    NvInfoRecord r;
    r.offset = off;
    r.format = section[off];
    r.attribute = section[off + 1];
    r.inline_value = Load16(section.data() + off + 2);
    switch (r.format) {
      case kEifmtNval:
      case kEifmtBval:
      case kEifmtHval:
        off += 4;
        break;
      case kEifmtSval:
        PHOS_RETURN_IF_ERROR(Need(kNvInfo, section, off + 4, r.inline_value,
                                  std::string(NvInfoAttrName(r.attribute)) + " value (attribute " +
                                      Hex(r.attribute) + ")"));
        r.value = section.subspan(off + 4, r.inline_value);
        off += 4 + r.inline_value;
        break;
      default:
        return CorruptAt(kNvInfo, off, "expected record format 1..4 (EIFMT_NVAL..EIFMT_SVAL), found " +
                                        std::to_string(r.format));
    }
    out->push_back(r);
  }
  return Status::Ok();
}

// Both parameter records (KPARAM_INFO and its V2) are 12-byte SVALs.
static Status CheckParamRecord(const NvInfoRecord& r) {
  if (r.format == kEifmtSval && r.value.size() >= 12) return Status::Ok();
  return CorruptAt(kNvInfo, r.offset, "expected " + std::string(NvInfoAttrName(r.attribute)) +
                                       " as EIFMT_SVAL of 12 bytes, found format " + std::to_string(r.format) +
                                       " size " + std::to_string(r.value.size()));
}

Status ParseKernelNvInfo(std::string_view kernel_name, std::span<const uint8_t> section, KernelNvInfo* out) {
  *out = KernelNvInfo{};
  out->name = std::string(kernel_name);
  std::vector<NvInfoRecord> records;
  PHOS_RETURN_IF_ERROR(ParseNvInfoRecords(section, &records));
  for (const NvInfoRecord& r : records) {
    switch (r.attribute) {
      case kEiattrKparamInfo: {
        PHOS_RETURN_IF_ERROR(CheckParamRecord(r));
        const uint8_t* v = r.value.data();
        KernelParam p;
        // v+0: u32 index (0 observed)
        p.ordinal = Load16(v + 4);
        p.offset = Load16(v + 6);
        const uint32_t bits = Load32(v + 8);
        p.log_alignment = bits & 0xff;
        p.space = (bits >> 8) & 0xf;
        p.cbank = (bits >> 12) & 0x1f;
        p.in_cbank = ((bits >> 17) & 1) == 0;
        p.size = bits >> 18;
        out->params.push_back(p);
        break;
      }
      case kEiattrKparamInfoV2: {
        PHOS_RETURN_IF_ERROR(CheckParamRecord(r));
        const uint8_t* v = r.value.data();
        KernelParam p;
        p.ordinal = Load16(v + 4);
        p.offset = Load16(v + 6);
        p.size = Load32(v + 8);
        if (p.size > kMaxKernelParamBytes)
          return CorruptAt(kNvInfo, r.offset, "EIATTR_KPARAM_INFO_V2: parameter of " + std::to_string(p.size) +
                                               " bytes, more than CUDA's " + std::to_string(kMaxKernelParamBytes));
        out->params.push_back(p);  // alignment, space, cbank: not encoded (defaults)
        break;
      }
      case kEiattrCbankParamSize:
        if (r.format != kEifmtHval)
          return CorruptAt(kNvInfo, r.offset, "expected EIATTR_CBANK_PARAM_SIZE as EIFMT_HVAL, found format " +
                                               std::to_string(r.format));
        out->has_param_size = true;
        out->param_size = r.inline_value;
        break;
      case kEiattrParamCbank:
        if (r.format != kEifmtSval || r.value.size() < 8)
          return CorruptAt(kNvInfo, r.offset, "expected EIATTR_PARAM_CBANK as EIFMT_SVAL of 8 bytes");
        out->has_param_cbank = true;
        out->param_cbank_offset = Load16(r.value.data() + 4);
        out->param_cbank_size = Load16(r.value.data() + 6);
        break;
      case kEiattrMaxregCount:
        if (r.format == kEifmtHval) out->max_reg_count = r.inline_value;
        break;
      case kEiattrCudaApiVersion:
        if (r.format == kEifmtSval) PHOS_RETURN_IF_ERROR(U32At(r, 0, &out->cuda_api_version));
        break;
      case kEiattrExitInstrOffsets:
        if (r.format == kEifmtSval)
          for (size_t i = 0; i + 4 <= r.value.size(); i += 4) out->exit_offsets.push_back(Load32(r.value.data() + i));
        break;
      default:
        break;
    }
  }
  // nvcc lists parameters last-first; order by ordinal and check density.
  std::sort(out->params.begin(), out->params.end(),
            [](const KernelParam& a, const KernelParam& b) { return a.ordinal < b.ordinal; });
  for (size_t i = 0; i < out->params.size(); ++i) {
    const KernelParam& p = out->params[i];
    if (p.ordinal != i)
      return Status::Corruption("nv.info: kernel " + out->name + ": expected parameter ordinal " + std::to_string(i) +
                                (p.ordinal < i ? " once, found a duplicate" : ", found " + std::to_string(p.ordinal)));
    if (out->has_param_size && static_cast<uint64_t>(p.offset) + p.size > out->param_size)
      return Status::Corruption("nv.info: kernel " + out->name + ": parameter " + std::to_string(i) + " (offset " +
                                std::to_string(p.offset) + ", size " + std::to_string(p.size) +
                                ") ends past the parameter size " + std::to_string(out->param_size));
  }
  if (out->has_param_cbank && out->has_param_size && out->param_cbank_size != out->param_size)
    return Status::Corruption("nv.info: kernel " + out->name + ": EIATTR_PARAM_CBANK size " +
                              std::to_string(out->param_cbank_size) + " != EIATTR_CBANK_PARAM_SIZE " +
                              std::to_string(out->param_size));
  return Status::Ok();
}

Status ReadCubinInfo(std::span<const uint8_t> cubin, CubinInfo* out) {
  *out = CubinInfo{};
  ElfReader elf;
  PHOS_RETURN_IF_ERROR(elf.Parse(cubin).WithContext("cubin"));
  if (elf.machine() != kEmCuda)
    return Status::Corruption("cubin: at offset 0x12: expected e_machine EM_CUDA (190), found " +
                              std::to_string(elf.machine()));
  out->sm_arch = (elf.flags() >> 8) & 0xff;
  std::vector<ElfSymbol> symbols;
  Status sym_status = elf.ReadSymbols(&symbols);
  if (!sym_status.ok() && sym_status.code() != Status::Code::kNotFound) return sym_status.WithContext("cubin");

  const auto& sections = elf.sections();
  for (size_t i = 0; i < sections.size(); ++i) {
    const ElfSection& s = sections[i];
    if (s.name.size() <= kKernelPrefix.size() || s.name.compare(0, kKernelPrefix.size(), kKernelPrefix) != 0)
      continue;
    if (s.type != kShtCudaInfo) continue;
    KernelNvInfo k;
    PHOS_RETURN_IF_ERROR(ParseKernelNvInfo(std::string_view(s.name).substr(kKernelPrefix.size()), elf.SectionData(i), &k)
                             .WithContext("cubin section " + s.name));
    out->kernels.push_back(std::move(k));
  }

  // Module-wide .nv.info: per-symbol facts, and EXTERNS.
  const int global = elf.FindSection(".nv.info");
  if (global >= 0) {
    std::vector<NvInfoRecord> records;
    PHOS_RETURN_IF_ERROR(ParseNvInfoRecords(elf.SectionData(global), &records).WithContext("cubin section .nv.info"));
    for (const NvInfoRecord& r : records) {
      if (r.format != kEifmtSval) continue;
      if (r.attribute == kEiattrExterns) {
        for (size_t j = 0; j + 4 <= r.value.size(); j += 4) {
          const uint32_t sym = Load32(r.value.data() + j);
          if (sym < symbols.size()) out->externs.push_back(symbols[sym].name);
        }
        continue;
      }
      if (r.attribute != kEiattrRegcount && r.attribute != kEiattrFrameSize && r.attribute != kEiattrMinStackSize)
        continue;
      uint32_t sym = 0, value = 0;
      PHOS_RETURN_IF_ERROR(U32At(r, 0, &sym).WithContext("cubin section .nv.info"));
      PHOS_RETURN_IF_ERROR(U32At(r, 1, &value).WithContext("cubin section .nv.info"));
      if (sym >= symbols.size()) continue;
      for (KernelNvInfo& k : out->kernels) {
        if (k.name != symbols[sym].name) continue;
        if (r.attribute == kEiattrRegcount) k.regcount = value;
        if (r.attribute == kEiattrFrameSize) k.frame_size = value;
        if (r.attribute == kEiattrMinStackSize) k.min_stack_size = value;
      }
    }
  }
  return Status::Ok();
}

}  // namespace phos::fatbin
