// Byte layout of a checkpoint directory (docs/image-format.md):
//
//   DIR/manifest  ManifestHeader (32 bytes) + serialized image.v1.Manifest
//   DIR/gpu.img   GpuImgHeader in a 4 KiB block, then buffer extents, each
//                 4 KiB aligned and a multiple of 4 KiB long.
//
// Integers are little-endian. The headers are encoded byte by byte (no
// struct casts), so the layout does not depend on the compiler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace phos::image {

// 2: the session index, the process record and the template record are
// proto messages in the manifest (1 had them as text: `handles`,
// process.txt, template.txt). A reader refuses any other version by name.
inline constexpr std::uint32_t kImageFormatVersion = 2;
/// O_DIRECT alignment and extent granularity.
inline constexpr std::uint64_t kAlign = 4096;
inline constexpr std::uint64_t kDefaultChunkBytes = 4ull << 20;
/// Largest chunk a reader accepts (it allocates staging buffers of this size).
inline constexpr std::uint64_t kMaxChunkBytes = 256ull << 20;
/// A manifest larger than this is refused as corrupt (real ones are KiB..MiB).
inline constexpr std::uint64_t kMaxManifestBytes = 256ull << 20;

inline constexpr std::string_view kManifestName = "manifest";
inline constexpr std::string_view kGpuImgName = "gpu.img";

inline constexpr std::uint64_t RoundUp(std::uint64_t v, std::uint64_t a) {
  return (v + a - 1) / a * a;
}
/// Number of chunks of a buffer: ceil(bytes / chunk_bytes) (0 for 0 bytes).
inline constexpr std::uint64_t ChunkCount(std::uint64_t bytes, std::uint64_t chunk_bytes) {
  return chunk_bytes == 0 ? 0 : (bytes + chunk_bytes - 1) / chunk_bytes;
}

/// XXH3-64 of a byte range (the checksum of chunks, headers and the manifest).
std::uint64_t Xxh3(const void* data, std::size_t len);

// --- manifest header ------------------------------------------------------
//   0  8  magic "PHOSMAN1"
//   8  4  format version
//  12  4  header bytes (32)
//  16  8  payload bytes (serialized Manifest)
//  24  8  XXH3-64 of the payload
inline constexpr std::size_t kManifestHeaderBytes = 32;

struct ManifestHeader {
  std::uint32_t format_version = kImageFormatVersion;
  std::uint64_t payload_bytes = 0;
  std::uint64_t payload_xxh3 = 0;
};

void EncodeManifestHeader(const ManifestHeader& h, std::uint8_t out[kManifestHeaderBytes]);
/// Corruption when the magic, version or header size is wrong.
Status DecodeManifestHeader(std::span<const std::uint8_t> in, ManifestHeader* h);

// --- gpu.img header (first 4 KiB block; the rest of the block is zero) -----
//   0  8  magic "PHOSGPU1"
//   8  4  format version
//  12  4  header block bytes (4096)
//  16  8  image id (same as Manifest.image_id)
//  24  8  file bytes (same as Manifest.gpu_img_bytes)
//  32  8  XXH3-64 of bytes 0..31
inline constexpr std::size_t kGpuImgHeaderBytes = 40;
inline constexpr std::uint64_t kGpuImgHeaderBlock = kAlign;

struct GpuImgHeader {
  std::uint32_t format_version = kImageFormatVersion;
  std::uint64_t image_id = 0;
  std::uint64_t file_bytes = 0;
};

void EncodeGpuImgHeader(const GpuImgHeader& h, std::uint8_t out[kGpuImgHeaderBytes]);
Status DecodeGpuImgHeader(std::span<const std::uint8_t> in, GpuImgHeader* h);

}  // namespace phos::image
