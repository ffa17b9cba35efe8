#include "fatbin/fatbin_reader.h"

#include <lz4.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_decompressBound (exported by libzstd.so)
#include <zstd.h>

#include <cstring>
#include <limits>

#include "fatbin/byte_reader.h"
#include "fatbin/fatbin_format.h"

namespace phos::fatbin {

using internal::CorruptAt;
using internal::Hex;
using internal::Load16;
using internal::Load32;
using internal::Load64;
using internal::Need;

namespace {
constexpr std::string_view kWho = "fatbin";
}  // namespace

std::string_view EntryKindName(uint16_t kind) {
  switch (kind) {
    case kEntryKindPtx: return "ptx";
    case kEntryKindElf: return "elf";
    default: return "unknown";
  }
}

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kZstd: return "zstd";
    case Compression::kLz4: return "lz4";
  }
  return "?";
}

Status DecompressEntry(const FatbinEntry& entry, const ParseOptions& options, std::vector<uint8_t>* out) {
  out->clear();
  const std::string where = "entry at offset " + Hex(entry.header_offset) + ", " +
                            std::string(EntryKindName(entry.kind)) + " sm_" + std::to_string(entry.sm_arch);
  switch (entry.compression) {
    case Compression::kNone:
      out->assign(entry.stored.begin(), entry.stored.end());
      break;
    case Compression::kZstd: {
      if (entry.uncompressed_size > options.max_uncompressed_size)
        return CorruptAt(kWho, entry.header_offset + 0x38,
                         "expected an uncompressed size of at most " + std::to_string(options.max_uncompressed_size) +
                             ", found " + std::to_string(entry.uncompressed_size) + " (" + where + ")");
      const unsigned long long bound = ZSTD_decompressBound(entry.stored.data(), entry.stored.size());
      if (bound == ZSTD_CONTENTSIZE_ERROR)
        return CorruptAt(kWho, entry.payload_offset, "expected zstd frames (28 b5 2f fd) for " + where);
      if (entry.uncompressed_size > bound)
        return CorruptAt(kWho, entry.header_offset + 0x38,
                         "expected an uncompressed size the zstd data can hold (at most " + std::to_string(bound) +
                             "), found " + std::to_string(entry.uncompressed_size) + " (" + where + ")");
      // The frame may also declare its content size; it must agree.
      const unsigned long long frame_size = ZSTD_getFrameContentSize(entry.stored.data(), entry.stored.size());
      if (frame_size == ZSTD_CONTENTSIZE_ERROR)
        return CorruptAt(kWho, entry.payload_offset, "expected a zstd frame (28 b5 2f fd) for " + where);
      if (frame_size != ZSTD_CONTENTSIZE_UNKNOWN && frame_size != entry.uncompressed_size)
        return CorruptAt(kWho, entry.payload_offset,
                         "expected a zstd frame of " + std::to_string(entry.uncompressed_size) +
                             " bytes (entry header), frame declares " + std::to_string(frame_size) + " (" + where + ")");
      out->resize(entry.uncompressed_size);
      const size_t n = ZSTD_decompress(out->data(), out->size(), entry.stored.data(), entry.stored.size());
      if (ZSTD_isError(n)) {
        out->clear();
        return CorruptAt(kWho, entry.payload_offset,
                         std::string("expected valid zstd data: ") + ZSTD_getErrorName(n) + " (" + where + ")");
      }
      if (n != entry.uncompressed_size) {
        out->clear();
        return CorruptAt(kWho, entry.payload_offset,
                         "expected " + std::to_string(entry.uncompressed_size) + " decompressed bytes, got " +
                             std::to_string(n) + " (" + where + ")");
      }
      break;
    }
    case Compression::kLz4: {
      if (entry.uncompressed_size > options.max_uncompressed_size)
        return CorruptAt(kWho, entry.header_offset + 0x38,
                         "expected an uncompressed size of at most " + std::to_string(options.max_uncompressed_size) +
                             ", found " + std::to_string(entry.uncompressed_size) + " (" + where + ")");
      if (entry.uncompressed_size > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
          entry.stored.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
        return CorruptAt(kWho, entry.header_offset + 0x10, "expected an LZ4 block below 2 GiB (" + where + ")");
      // LZ4 expands at most ~255x (one token byte + 255-length runs).
      if (entry.uncompressed_size > entry.stored.size() * 255 + 16)
        return CorruptAt(kWho, entry.header_offset + 0x38,
                         "expected an uncompressed size " + std::to_string(entry.stored.size()) +
                             " LZ4 bytes can hold, found " + std::to_string(entry.uncompressed_size) + " (" + where + ")");
      out->resize(entry.uncompressed_size);
      // LZ4_decompress_safe never writes or reads outside the given buffers.
      const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(entry.stored.data()),
                                        reinterpret_cast<char*>(out->data()), static_cast<int>(entry.stored.size()),
                                        static_cast<int>(out->size()));
      if (n < 0 || static_cast<uint64_t>(n) != entry.uncompressed_size) {
        out->clear();
        return CorruptAt(kWho, entry.payload_offset,
                         n < 0 ? "expected a well-formed LZ4 block (" + where + ")"
                               : "expected " + std::to_string(entry.uncompressed_size) +
                                     " decompressed bytes, LZ4 gave " + std::to_string(n) + " (" + where + ")");
      }
      break;
    }
  }
  if (entry.is_ptx()) {
    while (!out->empty() && out->back() == 0) out->pop_back();
  }
  return Status::Ok();
}

Status ParseContainer(std::span<const uint8_t> data, size_t start, const ParseOptions& options, Fatbin* out,
                      size_t* consumed) {
  *consumed = 0;
  PHOS_RETURN_IF_ERROR(Need(kWho, data, start, kContainerHeaderSize, "container header"));
  const uint8_t* p = data.data() + start;
  const uint32_t magic = Load32(p);
  if (magic != kContainerMagic)
    return CorruptAt(kWho, start, "expected container magic " + Hex(kContainerMagic) + ", found " + Hex(magic));
  const uint16_t version = Load16(p + 4);
  const uint16_t header_size = Load16(p + 6);
  const uint64_t payload_size = Load64(p + 8);
  if (version != kContainerVersion)
    return CorruptAt(kWho, start + 4, "expected container version 1, found " + std::to_string(version));
  if (header_size < kContainerHeaderSize)
    return CorruptAt(kWho, start + 6, "expected container header size >= 16, found " + std::to_string(header_size));
  PHOS_RETURN_IF_ERROR(Need(kWho, data, start + header_size, payload_size,
                            "container payload (declared at offset " + Hex(start + 8) + ")"));
  const size_t end = start + header_size + payload_size;
  // Entry headers and payloads must fit inside this container, not just the input.
  const std::span<const uint8_t> body = data.first(end);

  FatbinContainer container;
  container.offset = start;
  container.size = end - start;
  container.first_entry = out->entries.size();
  const size_t container_index = out->containers.size();

  size_t off = start + header_size;
  while (off < end) {
    PHOS_RETURN_IF_ERROR(Need(kWho, body, off, kEntryHeaderMinSize, "entry header"));
    const uint8_t* e = data.data() + off;
    FatbinEntry entry;
    entry.kind = Load16(e + 0x00);
    const uint32_t entry_header_size = Load32(e + 0x04);
    const uint64_t entry_payload_size = Load64(e + 0x08);
    const uint32_t compressed_size = Load32(e + 0x10);
    entry.version_minor = Load16(e + 0x18);
    entry.version_major = Load16(e + 0x1a);
    entry.sm_arch = Load32(e + 0x1c);
    entry.flags = Load64(e + 0x28);
    entry.uncompressed_size = Load64(e + 0x38);
    entry.container_index = container_index;
    entry.header_offset = off;
    if (entry_header_size < kEntryHeaderMinSize)
      return CorruptAt(kWho, off + 0x04,
                       "expected entry header size >= 64, found " + std::to_string(entry_header_size));
    PHOS_RETURN_IF_ERROR(Need(kWho, body, off, entry_header_size,
                              "entry header (declared size " + std::to_string(entry_header_size) + ")"));
    const size_t payload_off = off + entry_header_size;
    PHOS_RETURN_IF_ERROR(Need(kWho, body, payload_off, entry_payload_size,
                              "entry payload (declared at offset " + Hex(off + 0x08) + ")"));
    entry.payload_offset = payload_off;

    const bool zstd = (entry.flags & kFlagCompressedZstd) != 0;
    const bool lz4 = (entry.flags & kFlagCompressedLz4) != 0;
    if (zstd && lz4)
      return CorruptAt(kWho, off + 0x28, "entry flags " + Hex(entry.flags) + " claim both zstd and LZ4 compression");
    if (zstd || lz4) {
      entry.compression = zstd ? Compression::kZstd : Compression::kLz4;
      if (compressed_size > entry_payload_size)
        return CorruptAt(kWho, off + 0x10,
                         "expected compressed size <= payload size " + std::to_string(entry_payload_size) +
                             ", found " + std::to_string(compressed_size));
      entry.stored = data.subspan(payload_off, compressed_size);
    } else {
      entry.compression = Compression::kNone;
      entry.stored = data.subspan(payload_off, entry_payload_size);
    }
    // Only PTX and cubins are read; other kinds (CUDA 13's libraries carry
    // kind 8 — LTO IR — in flag combinations of their own, which libcusparse
    // and libcufft hold by the hundred) are kept as stored, so one of them
    // cannot make a fatbin with good PTX unreadable.
    if (options.decompress && (entry.is_ptx() || entry.is_elf())) {
      PHOS_RETURN_IF_ERROR(DecompressEntry(entry, options, &entry.contents));
    }
    out->entries.push_back(std::move(entry));
    off = payload_off + entry_payload_size;
  }
  container.entry_count = out->entries.size() - container.first_entry;
  out->containers.push_back(container);
  *consumed = end - start;
  return Status::Ok();
}

Status ParseFatbin(std::span<const uint8_t> data, Fatbin* out, const ParseOptions& options) {
  *out = Fatbin{};
  if (data.empty()) return Status::Corruption("fatbin: at offset 0x0: expected a container header, input is empty");
  size_t off = 0;
  while (off < data.size()) {
    // Zero padding between or after containers (sections are 8-aligned).
    if (data[off] == 0 && !out->containers.empty()) {
      size_t z = off;
      while (z < data.size() && data[z] == 0) ++z;
      off = z;
      continue;
    }
    size_t consumed = 0;
    PHOS_RETURN_IF_ERROR(ParseContainer(data, off, options, out, &consumed));
    off += consumed;
  }
  return Status::Ok();
}

Status ReadWrapper(const void* wrapper, WrapperInfo* out) {
  if (wrapper == nullptr) return Status::InvalidArgument("fatbin: wrapper pointer is null");
  FatbinWrapperLayout w;
  std::memcpy(&w, wrapper, sizeof(w));
  out->magic = w.magic;
  out->version = w.version;
  out->data = w.data;
  out->filename_or_fatbins = w.filename_or_fatbins;
  if (static_cast<uint32_t>(w.magic) != kWrapperMagic)
    return Status::Corruption("fatbin: wrapper: expected magic " + Hex(kWrapperMagic) + ", found " +
                              Hex(static_cast<uint32_t>(w.magic)));
  if (w.data == nullptr) return Status::Corruption("fatbin: wrapper: data pointer is null");
  return Status::Ok();
}

Status ContainerSizeInMemory(const void* container, size_t* size, size_t max_size) {
  uint8_t header[kContainerHeaderSize];
  std::memcpy(header, container, sizeof(header));
  const uint32_t magic = Load32(header);
  if (magic != kContainerMagic)
    return Status::Corruption("fatbin: in-memory container: expected magic " + Hex(kContainerMagic) + ", found " +
                              Hex(magic));
  const uint16_t header_size = Load16(header + 6);
  const uint64_t payload = Load64(header + 8);
  if (header_size < kContainerHeaderSize || payload > max_size || header_size + payload > max_size)
    return Status::Corruption("fatbin: in-memory container: implausible size (header " + std::to_string(header_size) +
                              ", payload " + std::to_string(payload) + ")");
  *size = header_size + payload;
  return Status::Ok();
}

Status ParseFatbinFromWrapper(const void* wrapper, Fatbin* out, const ParseOptions& options) {
  WrapperInfo info;
  PHOS_RETURN_IF_ERROR(ReadWrapper(wrapper, &info));
  size_t size = 0;
  PHOS_RETURN_IF_ERROR(ContainerSizeInMemory(info.data, &size));
  *out = Fatbin{};
  size_t consumed = 0;
  return ParseContainer({static_cast<const uint8_t*>(info.data), size}, 0, options, out, &consumed);
}

long FindPtx(const Fatbin& fatbin) {
  for (size_t i = 0; i < fatbin.entries.size(); ++i)
    if (fatbin.entries[i].is_ptx()) return static_cast<long>(i);
  return -1;
}

long FindCubin(const Fatbin& fatbin, uint32_t sm_arch) {
  for (size_t i = 0; i < fatbin.entries.size(); ++i)
    if (fatbin.entries[i].is_elf() && fatbin.entries[i].sm_arch == sm_arch) return static_cast<long>(i);
  return -1;
}

std::string Describe(const Fatbin& fatbin) {
  std::string s;
  for (size_t i = 0; i < fatbin.entries.size(); ++i) {
    const FatbinEntry& e = fatbin.entries[i];
    s += "container " + std::to_string(e.container_index) + " entry " + std::to_string(i) + ": " +
         std::string(EntryKindName(e.kind)) + (e.is_ptx() ? " compute_" : " sm_") + std::to_string(e.sm_arch) + " " +
         std::string(CompressionName(e.compression)) + " " + std::to_string(e.stored.size()) + " stored bytes";
    if (!e.contents.empty()) s += ", " + std::to_string(e.contents.size()) + " bytes";
    s += "\n";
  }
  return s;
}

}  // namespace phos::fatbin
