#include "image/image_layout.h"

#include <cstring>
#include <string>

#include "common/xxh3.h"

namespace phos::image {
namespace {

constexpr char kManifestMagic[8] = {'P', 'H', 'O', 'S', 'M', 'A', 'N', '1'};
constexpr char kGpuImgMagic[8] = {'P', 'H', 'O', 'S', 'G', 'P', 'U', '1'};

void Put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void Put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t Get32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}
std::uint64_t Get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

std::uint64_t Xxh3(const void* data, std::size_t len) { return XXH3_64bits(data, len); }

void EncodeManifestHeader(const ManifestHeader& h, std::uint8_t out[kManifestHeaderBytes]) {
  std::memcpy(out, kManifestMagic, 8);
  Put32(out + 8, h.format_version);
  Put32(out + 12, kManifestHeaderBytes);
  Put64(out + 16, h.payload_bytes);
  Put64(out + 24, h.payload_xxh3);
}

Status DecodeManifestHeader(std::span<const std::uint8_t> in, ManifestHeader* h) {
  if (in.size() < kManifestHeaderBytes) {
    return Status::Corruption("manifest is truncated: " + std::to_string(in.size()) +
                              " bytes, the header alone is " +
                              std::to_string(kManifestHeaderBytes));
  }
  if (std::memcmp(in.data(), kManifestMagic, 8) != 0) {
    return Status::Corruption("manifest has a bad magic (not a phos image manifest)");
  }
  h->format_version = Get32(in.data() + 8);
  if (h->format_version != kImageFormatVersion) {
    return Status::Corruption("manifest format version " + std::to_string(h->format_version) +
                              " is not supported (this phos reads version " +
                              std::to_string(kImageFormatVersion) +
                              "): the image was written by another phos version; restore it with that one");
  }
  if (Get32(in.data() + 12) != kManifestHeaderBytes) {
    return Status::Corruption("manifest header size field is " +
                              std::to_string(Get32(in.data() + 12)) + ", expected " +
                              std::to_string(kManifestHeaderBytes));
  }
  h->payload_bytes = Get64(in.data() + 16);
  h->payload_xxh3 = Get64(in.data() + 24);
  return Status::Ok();
}

void EncodeGpuImgHeader(const GpuImgHeader& h, std::uint8_t out[kGpuImgHeaderBytes]) {
  std::memcpy(out, kGpuImgMagic, 8);
  Put32(out + 8, h.format_version);
  Put32(out + 12, static_cast<std::uint32_t>(kGpuImgHeaderBlock));
  Put64(out + 16, h.image_id);
  Put64(out + 24, h.file_bytes);
  Put64(out + 32, Xxh3(out, 32));
}

Status DecodeGpuImgHeader(std::span<const std::uint8_t> in, GpuImgHeader* h) {
  if (in.size() < kGpuImgHeaderBytes) {
    return Status::Corruption("gpu.img is truncated: shorter than its " +
                              std::to_string(kGpuImgHeaderBytes) + "-byte header");
  }
  if (std::memcmp(in.data(), kGpuImgMagic, 8) != 0) {
    return Status::Corruption("gpu.img has a bad magic at file offset 0");
  }
  if (Get64(in.data() + 32) != Xxh3(in.data(), 32)) {
    return Status::Corruption("gpu.img header checksum mismatch at file offset 0");
  }
  h->format_version = Get32(in.data() + 8);
  if (h->format_version != kImageFormatVersion) {
    return Status::Corruption("gpu.img format version " + std::to_string(h->format_version) +
                              " is not supported");
  }
  if (Get32(in.data() + 12) != kGpuImgHeaderBlock) {
    return Status::Corruption("gpu.img header block size is not 4096");
  }
  h->image_id = Get64(in.data() + 16);
  h->file_bytes = Get64(in.data() + 24);
  return Status::Ok();
}

}  // namespace phos::image
