#include "fatbin/fatbin_writer.h"

#include <cstring>
#include <string>
#include <string_view>

#include "fatbin/fatbin_format.h"

namespace phos::fatbin {
namespace {

// Values `fatbinary` (CUDA 13.0) writes into fields whose meaning is not
// documented (fatbin_format.h): copied so the driver sees what it expects.
constexpr uint16_t kEntryUnknown02 = 0x0101;
constexpr uint32_t kPtxHeaderSize = 80;
constexpr uint32_t kPtxUnknown14 = 0x40;
constexpr uint32_t kPtxHeaderTail0 = 0x48;
constexpr uint16_t kCubinVersionMajor = 1, kCubinVersionMinor = 8;

void Put16(std::vector<uint8_t>* out, size_t at, uint16_t v) { std::memcpy(out->data() + at, &v, sizeof v); }
void Put32(std::vector<uint8_t>* out, size_t at, uint32_t v) { std::memcpy(out->data() + at, &v, sizeof v); }
void Put64(std::vector<uint8_t>* out, size_t at, uint64_t v) { std::memcpy(out->data() + at, &v, sizeof v); }

// "9.0" from the text's `.version 9.0`; false when there is none.
bool PtxVersion(std::string_view text, uint16_t* major, uint16_t* minor) {
  const size_t at = text.find(".version");
  if (at == std::string_view::npos) return false;
  size_t i = at + 8;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  unsigned ma = 0, mi = 0;
  size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) ma = ma * 10 + (text[i] - '0');
  if (digits == 0 || digits > 3 || i >= text.size() || text[i] != '.') return false;
  digits = 0;
  for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) mi = mi * 10 + (text[i] - '0');
  if (digits == 0 || digits > 3) return false;
  *major = static_cast<uint16_t>(ma);
  *minor = static_cast<uint16_t>(mi);
  return true;
}

}  // namespace

Status WriteFatbin(std::span<const FatbinImage> images, std::vector<uint8_t>* out) {
  if (images.empty()) return Status::InvalidArgument("fatbin writer: no images");
  out->assign(kContainerHeaderSize, 0);
  for (size_t n = 0; n < images.size(); ++n) {
    const FatbinImage& image = images[n];
    const std::string which = "fatbin writer: image " + std::to_string(n);
    if (image.bytes.empty()) return Status::InvalidArgument(which + " is empty");
    std::span<const uint8_t> payload = image.bytes;
    uint32_t header_size = kEntryHeaderMinSize;
    uint16_t major = kCubinVersionMajor, minor = kCubinVersionMinor;
    if (image.kind == EntryKind::kPtx) {
      while (!payload.empty() && payload.back() == 0) payload = payload.first(payload.size() - 1);
      const std::string_view text(reinterpret_cast<const char*>(payload.data()), payload.size());
      if (!PtxVersion(text, &major, &minor)) return Status::InvalidArgument(which + ": PTX without a .version directive");
      header_size = kPtxHeaderSize;
    } else if (image.kind == EntryKind::kElf) {
      if (payload.size() < 4 || std::memcmp(payload.data(), "\x7f" "ELF", 4) != 0)
        return Status::InvalidArgument(which + ": a cubin must be an ELF file");
    } else {
      return Status::InvalidArgument(which + ": unknown entry kind " + std::to_string(static_cast<int>(image.kind)));
    }
    // PTX is stored NUL-terminated; every payload is padded to 8 bytes.
    const size_t stored = image.kind == EntryKind::kPtx ? payload.size() + 1 : payload.size();
    const size_t padded = (stored + 7) & ~size_t{7};
    const size_t at = out->size();
    out->resize(at + header_size + padded, 0);
    Put16(out, at + 0x00, static_cast<uint16_t>(image.kind));
    Put16(out, at + 0x02, kEntryUnknown02);
    Put32(out, at + 0x04, header_size);
    Put64(out, at + 0x08, padded);
    if (image.kind == EntryKind::kPtx) Put32(out, at + 0x14, kPtxUnknown14);
    Put16(out, at + 0x18, minor);
    Put16(out, at + 0x1a, major);
    Put32(out, at + 0x1c, image.sm_arch);
    Put64(out, at + 0x28, kFlag64Bit | kFlagLinux);
    if (image.kind == EntryKind::kPtx) Put32(out, at + 0x40, kPtxHeaderTail0);
    std::memcpy(out->data() + at + header_size, payload.data(), payload.size());
  }
  Put32(out, 0x00, kContainerMagic);
  Put16(out, 0x04, kContainerVersion);
  Put16(out, 0x06, static_cast<uint16_t>(kContainerHeaderSize));
  Put64(out, 0x08, out->size() - kContainerHeaderSize);
  return Status::Ok();
}

}  // namespace phos::fatbin
