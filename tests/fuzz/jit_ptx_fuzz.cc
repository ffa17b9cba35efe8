// libFuzzer target: what phos does with the bytes an app hands nvJitLink
// and the images it loads (docs/interposer.md "JIT-compiled kernels keep
// their PTX"): the shim's link record (PTX by content, the PTX source
// decision) and the fatbin writer, whose output must read back with the
// same contents. Seeds: corpus/ptx (PTX texts) and corpus/nv_info (cubins).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "fatbin/fatbin_reader.h"
#include "fatbin/fatbin_writer.h"
#include "link_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phos;
  if (size < 2) return 0;
  // Byte 0 picks each input's type (low nibble) and whether the link has
  // -lto; byte 1 how many pieces the rest is cut into.
  const auto type = static_cast<jit::InputType>(data[0] & 0x0f);
  const bool lto = (data[0] & 0x10) != 0;
  const size_t pieces = 1 + data[1] % 4;
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  jit::LinkRecord record;
  const char* options[] = {"-arch=sm_90", "-lto"};
  record.SetOptions(lto ? 2 : 1, options);
  for (size_t i = 0; i < pieces; ++i) {
    const size_t begin = rest.size() * i / pieces, end = rest.size() * (i + 1) / pieces;
    record.Add(type, rest.substr(begin, end - begin), nullptr, nullptr);
  }
  const jit::PtxSource source = record.Source();
  if (source == jit::PtxSource::kNone && record.Why().empty()) __builtin_trap();
  if (source == jit::PtxSource::kSinglePtx && record.single_ptx().find('\0') != std::string_view::npos)
    __builtin_trap();

  // The writer: the input as a cubin (when it is an ELF) or as PTX (when it
  // looks like PTX), and both; what it writes must parse back unchanged.
  const std::span<const uint8_t> bytes(data + 2, size - 2);
  std::vector<fatbin::FatbinImage> images;
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "\x7f" "ELF", 4) == 0)
    images.push_back({fatbin::EntryKind::kElf, 90, bytes});
  const std::string_view text = rest.substr(0, rest.find('\0'));
  const std::span<const uint8_t> ptx(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (jit::LooksLikePtx(rest)) images.push_back({fatbin::EntryKind::kPtx, 90, ptx});
  std::vector<uint8_t> written;
  if (!fatbin::WriteFatbin(images, &written).ok()) return 0;
  fatbin::Fatbin back;
  fatbin::ParseOptions po;
  po.max_uncompressed_size = 16u << 20;
  if (!fatbin::ParseFatbin(written, &back, po).ok()) __builtin_trap();
  if (back.entries.size() != images.size()) __builtin_trap();
  for (size_t i = 0; i < images.size(); ++i) {
    const auto& want = images[i].bytes;
    const auto& got = back.entries[i].contents;
    if (images[i].kind == fatbin::EntryKind::kElf) {
      // A cubin comes back padded with zeros to 8 bytes, as nvcc stores one.
      if (got.size() != ((want.size() + 7) & ~size_t{7}) || std::memcmp(got.data(), want.data(), want.size()) != 0)
        __builtin_trap();
      for (size_t j = want.size(); j < got.size(); ++j)
        if (got[j] != 0) __builtin_trap();
    } else {
      // PTX comes back without trailing NULs (the reader strips padding).
      std::string_view w(reinterpret_cast<const char*>(want.data()), want.size());
      while (!w.empty() && w.back() == '\0') w.remove_suffix(1);
      if (std::string_view(reinterpret_cast<const char*>(got.data()), got.size()) != w) __builtin_trap();
    }
  }
  return 0;
}
