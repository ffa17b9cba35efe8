#include "image/manifest_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/hex.h"
#include "image/file_util.h"
#include "image/image_reader.h"
#include "image/image_layout.h"

namespace phos::image {

Status EncodeManifestFile(const v1::Manifest& m, std::string* out) {
  std::string payload;
  if (!m.SerializeToString(&payload)) {
    return Status::Internal("could not serialize the image manifest");
  }
  ManifestHeader h;
  h.format_version = m.format_version();
  h.payload_bytes = payload.size();
  h.payload_xxh3 = Xxh3(payload.data(), payload.size());
  out->resize(kManifestHeaderBytes);
  EncodeManifestHeader(h, reinterpret_cast<std::uint8_t*>(out->data()));
  out->append(payload);
  return Status::Ok();
}

Status DecodeManifestFile(std::span<const std::uint8_t> bytes, v1::Manifest* m) {
  ManifestHeader h;
  PHOS_RETURN_IF_ERROR(DecodeManifestHeader(bytes, &h));
  const std::uint64_t have = bytes.size() - kManifestHeaderBytes;
  if (h.payload_bytes > kMaxManifestBytes) {
    return Status::Corruption("manifest claims " + std::to_string(h.payload_bytes) +
                              " payload bytes (limit " + std::to_string(kMaxManifestBytes) + ")");
  }
  if (have != h.payload_bytes) {
    return Status::Corruption("manifest is " + std::string(have < h.payload_bytes ? "truncated" : "too long") +
                              ": header says " + std::to_string(h.payload_bytes) +
                              " payload bytes, file has " + std::to_string(have));
  }
  const std::uint8_t* payload = bytes.data() + kManifestHeaderBytes;
  if (Xxh3(payload, have) != h.payload_xxh3) {
    return Status::Corruption("manifest checksum mismatch (payload at file offset " +
                              std::to_string(kManifestHeaderBytes) + ", " + std::to_string(have) +
                              " bytes)");
  }
  if (!m->ParseFromArray(payload, static_cast<int>(have))) {
    return Status::Corruption("manifest payload is not a valid image.v1.Manifest");
  }
  if (m->format_version() != h.format_version) {
    return Status::Corruption("manifest format version differs between header and payload");
  }
  return ValidateManifest(*m);
}

Status ValidateManifest(const v1::Manifest& m) {
  if (m.format_version() != kImageFormatVersion) {
    return Status::Corruption("manifest format version " + std::to_string(m.format_version()) +
                              " is not supported (this phos reads version " + std::to_string(kImageFormatVersion) +
                              "): the image was written by another phos version; restore it with that one");
  }
  if (m.gpu_img_bytes() < kGpuImgHeaderBlock) {
    return Status::Corruption("manifest says gpu.img is " + std::to_string(m.gpu_img_bytes()) +
                              " bytes, less than its header block");
  }
  struct Span {
    std::uint64_t begin, end;
    int index;
  };
  std::vector<Span> spans;
  for (int i = 0; i < m.buffers_size(); ++i) {
    const v1::BufferExtent& b = m.buffers(i);
    const std::string who = "buffer " + std::to_string(i) + " (" + Hex(b.device_address()) + ")";
    if (b.chunk_bytes() == 0 || b.chunk_bytes() % kAlign != 0 ||
        b.chunk_bytes() > kMaxChunkBytes) {
      return Status::Corruption(who + " has chunk size " + std::to_string(b.chunk_bytes()) +
                                " (must be a non-zero multiple of 4096, at most " +
                                std::to_string(kMaxChunkBytes) + ")");
    }
    if (b.bytes() > std::numeric_limits<std::uint64_t>::max() - kAlign) {
      return Status::Corruption(who + " has an impossible size " + std::to_string(b.bytes()));
    }
    const std::uint64_t chunks = ChunkCount(b.bytes(), b.chunk_bytes());
    if (chunks != static_cast<std::uint64_t>(b.chunk_xxh3_size())) {
      return Status::Corruption(who + " has " + std::to_string(b.chunk_xxh3_size()) +
                                " chunk checksums, expected " + std::to_string(chunks));
    }
    if (b.extent_offset() % kAlign != 0) {
      return Status::Corruption(who + " extent at file offset " + std::to_string(b.extent_offset()) +
                                " is not 4 KiB aligned");
    }
    const std::uint64_t len = RoundUp(b.bytes(), kAlign);
    if (b.extent_offset() < kGpuImgHeaderBlock ||
        b.extent_offset() > m.gpu_img_bytes() || len > m.gpu_img_bytes() - b.extent_offset()) {
      return Status::Corruption(who + " extent [" + std::to_string(b.extent_offset()) + ", +" +
                                std::to_string(len) + ") lies outside gpu.img (" +
                                std::to_string(m.gpu_img_bytes()) + " bytes)");
    }
    if (len > 0) spans.push_back({b.extent_offset(), b.extent_offset() + len, i});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return Status::Corruption("buffers " + std::to_string(spans[i - 1].index) + " and " +
                                std::to_string(spans[i].index) + " overlap in gpu.img at offset " +
                                std::to_string(spans[i].begin));
    }
  }
  return Status::Ok();
}

Status AmendManifest(const std::string& dir, const std::function<void(v1::Manifest*)>& amend, bool durable) {
  v1::Manifest m;
  PHOS_RETURN_IF_ERROR(ReadManifest(dir, &m));
  amend(&m);
  std::string bytes;
  PHOS_RETURN_IF_ERROR(EncodeManifestFile(m, &bytes));
  const std::string path = dir + "/" + std::string(kManifestName);
  const std::string tmp = path + ".tmp";
  if (durable) {
    PHOS_RETURN_IF_ERROR(WriteFileDurable(tmp, bytes, 0));
  } else {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) return ErrnoError("create", tmp, errno);
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    const int err = errno;
    if (std::fclose(f) != 0 || !ok) return ErrnoError("write", tmp, ok ? errno : err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename " + tmp + " to", path, errno);
  return Status::Ok();
}

}  // namespace phos::image
