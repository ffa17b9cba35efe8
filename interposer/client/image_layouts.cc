#include "interposer/client/image_layouts.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "fatbin/fatbin_format.h"
#include "protocol/wire.h"

namespace phos::client {
namespace {

constexpr uint32_t kFatbinContainerMagic = 0xBA55ED50u;
constexpr uint32_t kFatbinWrapperMagic = 0x466243B1u;
constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

template <typename T>
T Load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ELF64: the end of the header, the program and section header tables and
// every section with file contents (nvcc puts the section headers last, but
// nothing requires it).
size_t ElfSize(const unsigned char* p) {
  constexpr unsigned char kElfClass64 = 2, kElfLittleEndian = 1;
  if (p[4] != kElfClass64 || p[5] != kElfLittleEndian) return 0;  // cubins are ELF64 little-endian
  const auto phoff = Load<uint64_t>(p + 0x20), shoff = Load<uint64_t>(p + 0x28);
  const auto phentsize = Load<uint16_t>(p + 0x36), phnum = Load<uint16_t>(p + 0x38);
  const auto shentsize = Load<uint16_t>(p + 0x3A), shnum = Load<uint16_t>(p + 0x3C);
  if (shoff > wire::kMaxModuleImageBytes || phoff > wire::kMaxModuleImageBytes) return 0;
  uint64_t end = std::max<uint64_t>({64, shoff + uint64_t{shnum} * shentsize, phoff + uint64_t{phnum} * phentsize});
  if (shentsize == 64) {  // sizeof(Elf64_Shdr)
    for (uint16_t i = 0; i < shnum; ++i) {
      const unsigned char* sh = p + shoff + uint64_t{i} * shentsize;
      constexpr uint32_t kShtNobits = 8;
      if (Load<uint32_t>(sh + 4) == kShtNobits) continue;
      end = std::max(end, Load<uint64_t>(sh + 0x18) + Load<uint64_t>(sh + 0x20));
    }
  }
  return end > wire::kMaxModuleImageBytes ? 0 : static_cast<size_t>(end);
}

uint32_t PtxTypeBytes(std::string_view t) {
  // ".u64" / ".b8" / ".f32": a type letter, then the width in bits.
  if (t.size() < 3 || t[0] != '.' || (t[1] != 'u' && t[1] != 's' && t[1] != 'b' && t[1] != 'f')) return 0;
  std::string_view digits = t.substr(2);
  if (digits == "8") return 1;
  if (digits == "16") return 2;
  if (digits == "32") return 4;
  if (digits == "64") return 8;
  return 0;
}

}  // namespace

bool PtxEntryParams(std::string_view ptx, std::string_view name, std::vector<ParamSlot>* out, uint32_t* bytes) {
  out->clear();
  size_t pos = 0;
  for (;;) {
    pos = ptx.find(".entry", pos);
    if (pos == std::string_view::npos) return false;
    size_t p = pos + 6;
    while (p < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[p]))) ++p;
    if (ptx.substr(p, name.size()) == name) {
      size_t q = p + name.size();
      while (q < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[q]))) ++q;
      if (q < ptx.size() && (ptx[q] == '(' || ptx[q] == '{')) {
        pos = q;
        break;
      }
    }
    pos = p;
  }
  uint32_t offset = 0;
  if (ptx[pos] == '(') {
    const size_t end = ptx.find(')', pos);
    if (end == std::string_view::npos) return false;
    std::string_view list = ptx.substr(pos + 1, end - pos - 1);
    size_t i = 0;
    while (i < list.size()) {
      size_t comma = list.find(',', i);
      if (comma == std::string_view::npos) comma = list.size();
      std::string_view decl = list.substr(i, comma - i);
      i = comma + 1;
      // tokens: .param .align N .b8 name[M]  |  .param .u64 [.ptr ...] name
      uint32_t align = 0, elem = 0, count = 1;
      bool ptr_attr = false;  // ".ptr .global .align N": N is the pointee's alignment
      size_t t = 0;
      while (t < decl.size()) {
        while (t < decl.size() && std::isspace(static_cast<unsigned char>(decl[t]))) ++t;
        size_t e = t;
        while (e < decl.size() && !std::isspace(static_cast<unsigned char>(decl[e]))) ++e;
        std::string_view tok = decl.substr(t, e - t);
        t = e;
        if (tok.empty()) continue;
        if (tok == ".ptr") {
          ptr_attr = true;
        } else if (tok == ".align") {
          while (t < decl.size() && std::isspace(static_cast<unsigned char>(decl[t]))) ++t;
          e = t;
          while (e < decl.size() && std::isdigit(static_cast<unsigned char>(decl[e]))) ++e;
          const auto n = static_cast<uint32_t>(std::strtoul(std::string(decl.substr(t, e - t)).c_str(), nullptr, 10));
          if (!ptr_attr) align = n;
          t = e;
        } else if (tok[0] == '.' && elem == 0 && PtxTypeBytes(tok) != 0 && tok != ".param") {
          elem = PtxTypeBytes(tok);
        } else if (tok[0] != '.') {
          const size_t br = tok.find('[');
          if (br != std::string_view::npos)
            count = static_cast<uint32_t>(std::strtoul(std::string(tok.substr(br + 1)).c_str(), nullptr, 10));
        }
      }
      if (elem == 0) continue;
      if (align == 0) align = elem;
      offset = (offset + align - 1) / align * align;
      out->push_back(ParamSlot{offset, elem * count});
      offset += elem * count;
    }
  }
  *bytes = offset;
  return true;
}

void ReadFatbinLayouts(const fatbin::Fatbin& fb, ImageLayouts* out) {
  for (const auto& e : fb.entries) {
    if (e.is_elf()) {
      fatbin::CubinInfo ci;
      if (fatbin::ReadCubinInfo(e.contents, &ci).ok())
        for (auto& k : ci.kernels)
          if (out->cubin.Find(k.name) == nullptr) out->cubin.kernels.push_back(std::move(k));
    } else if (e.is_ptx() && out->ptx.empty()) {
      out->ptx = std::string(e.ptx_text());
    }
  }
}

bool ReadImageLayouts(std::span<const std::byte> image, ImageLayouts* out) {
  const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kElfMagic, 4) == 0) {
    return fatbin::ReadCubinInfo(bytes, &out->cubin).ok();
  }
  if (bytes.size() >= 4 && Load<uint32_t>(bytes.data()) == kFatbinContainerMagic) {
    fatbin::Fatbin fb;
    if (!fatbin::ParseFatbin(bytes, &fb).ok()) return false;
    ReadFatbinLayouts(fb, out);
    return true;
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data());
  out->ptx.assign(text, strnlen(text, bytes.size()));
  return out->ptx.find(".version") != std::string::npos;
}

bool FindParamLayout(const ImageLayouts& layouts, std::string_view name, std::vector<ParamSlot>* params,
                     uint32_t* param_bytes) {
  params->clear();
  if (const fatbin::KernelNvInfo* info = layouts.cubin.Find(name)) {
    uint32_t end = 0;
    for (const auto& p : info->params) {
      params->push_back(ParamSlot{p.offset, p.size});
      end = std::max(end, p.offset + p.size);
    }
    *param_bytes = info->has_param_size ? std::max(info->param_size, end) : end;
    return true;
  }
  if (!layouts.ptx.empty()) return PtxEntryParams(layouts.ptx, name, params, param_bytes);
  return false;
}

std::span<const std::byte> ImageInMemory(const void* image) {
  if (image == nullptr) return {};
  const auto* p = static_cast<const unsigned char*>(image);
  const auto span_of = [](const void* at, size_t n) {
    return std::span<const std::byte>(static_cast<const std::byte*>(at), n);
  };
  if (std::memcmp(p, kElfMagic, 4) == 0) return span_of(p, ElfSize(p));
  const uint32_t magic = Load<uint32_t>(p);
  if (magic == kFatbinWrapperMagic || magic == kFatbinContainerMagic) {
    const void* container = image;
    if (magic == kFatbinWrapperMagic) {
      fatbin::WrapperInfo info;
      if (!fatbin::ReadWrapper(image, &info).ok()) return {};
      container = info.data;
    }
    size_t size = 0;
    if (!fatbin::ContainerSizeInMemory(container, &size, wire::kMaxModuleImageBytes).ok()) return {};
    return span_of(container, size);
  }
  return span_of(p, std::strlen(static_cast<const char*>(image)) + 1);
}

}  // namespace phos::client
