// ImageWriter: writes one checkpoint directory (docs/image-format.md).
//
//   Open(DIR)            creates DIR.tmp/ and DIR.tmp/gpu.img
//   AddBuffer(addr, n)   reserves a 4 KiB-aligned extent in gpu.img
//   Write(buf, off, ..)  one chunk, any order, from any thread: checksummed
//                        (xxh3), copied into a staging buffer, queued
//   WriteElsewhere(buf, first, sums)  chunks of a buffer whose bytes
//                        someone else supplies (live migration's pre-copy:
//                        the receiver fills them); only the checksums are
//                        recorded and gpu.img keeps a hole there
//   Commit()             waits for all I/O, writes the gpu.img header,
//                        fsyncs gpu.img, writes `manifest` (last), fsyncs it
//                        and DIR.tmp, renames DIR.tmp -> DIR, fsyncs the parent
//   Abort()              removes DIR.tmp (earlier images are never touched)
//
// A crash at any point leaves either no DIR or a complete one: DIR appears
// only by the final rename, and only with a manifest. RecoverDirectory
// (recovery.h) removes leftover DIR.tmp directories at phosd start.
//
// Optionally the image is also kept in a HostTier (memory); with
// write_files = false it lives only there.
//
// Threading: AddBuffer, Write and WriteBuffer may be called concurrently.
// mu_ guards the buffer table (extents, checksums, chunk states) and the
// writer state; it is NOT held during checksumming, copying or I/O, so
// writer threads overlap. Commit/Abort must not race with Write calls.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "image.pb.h"
#include "image/host_tier.h"
#include "image/io_backend.h"

namespace phos::image {

struct ImageWriterOptions {
  /// Chunk size: a non-zero multiple of 4 KiB; the unit of Write and of checksums.
  std::uint64_t chunk_bytes = kDefaultChunkBytes;
  /// I/O backend options (queue depth, force_pwrite, pin hooks). buffer_bytes
  /// is set to chunk_bytes; write_life_hint, if 0, from the manifest's class.
  IoOptions io;
  /// Also keep the image in this tier under host_tier_name (default: DIR's
  /// last path component).
  HostTier* host_tier = nullptr;
  std::string host_tier_name;
  /// false: host tier only, no files (host_tier must be set).
  bool write_files = true;
  /// Tests inject failing backends; default OpenIoBackend.
  IoBackendFactory backend_factory;
  /// false: Commit skips every fsync (the rename still makes the image
  /// appear whole or not at all, but a power loss may lose it). For images
  /// that live only until they are sent on (a migration's staging).
  bool durable = true;
};

class ImageWriter {
 public:
  /// `metadata` carries the session fields (session_id, pid, cmdline, mode,
  /// keep, metric, device_name, opaque sections); the writer fills the
  /// format/phos version, created time, image id, buffers and gpu.img size.
  /// AlreadyExists if DIR exists; a stale DIR.tmp is removed first.
  static Status Open(const std::string& dir, const v1::Manifest& metadata,
                     const ImageWriterOptions& options, std::unique_ptr<ImageWriter>* out);
  /// Aborts unless committed.
  ~ImageWriter();
  ImageWriter(const ImageWriter&) = delete;
  ImageWriter& operator=(const ImageWriter&) = delete;

  /// Reserves buffer `*index` of `bytes` bytes at device address `addr`.
  Status AddBuffer(std::uint64_t addr, std::uint64_t bytes, std::size_t* index);
  /// Writes one chunk of buffer `buffer`: `offset` is a multiple of the
  /// chunk size and `len` is that chunk's length (chunk size, or the rest
  /// for the last chunk). Each chunk exactly once.
  Status Write(std::size_t buffer, std::uint64_t offset, const void* data, std::size_t len);
  /// Writes all chunks of a buffer from `data` (bytes long).
  Status WriteBuffer(std::size_t buffer, const void* data);
  /// Marks chunks [first_chunk, first_chunk + chunk_xxh3.size()) of
  /// `buffer` written without writing their bytes: `chunk_xxh3` (one per
  /// chunk, computed by whoever holds the bytes) goes into the manifest,
  /// and gpu.img keeps a hole the image's receiver must fill before anyone
  /// reads it. Refused with a host tier (it would hold no bytes), for
  /// chunks outside the buffer and for chunks already written.
  Status WriteElsewhere(std::size_t buffer, std::size_t first_chunk, const std::vector<std::uint64_t>& chunk_xxh3);
  /// Engine sections filled late (handles, streams, modules, first-use
  /// order). Not synchronized: set them before Commit, from one thread.
  v1::Manifest* mutable_metadata() { return &manifest_; }

  /// Makes the image durable and visible. On failure the tmp directory is
  /// removed (as by Abort) and the error returned (DiskFull: IsDiskFull).
  Status Commit();
  void Abort();

  const std::string& dir() const { return dir_; }
  const std::string& tmp_dir() const { return tmp_dir_; }
  std::string_view io_backend_name() const;

 private:
  enum class ChunkState : std::uint8_t { kEmpty, kWriting, kDone };
  struct BufferState {
    std::uint64_t addr = 0, bytes = 0, extent_offset = 0;
    std::vector<std::uint64_t> xxh3;
    std::vector<ChunkState> chunks;
    std::vector<std::uint8_t> host_copy;  // when a host tier is used
  };
  enum class State { kOpen, kCommitted, kAborted };

  ImageWriter() = default;
  Status FailChunk(BufferState* b, std::uint64_t chunk, Status s);

  std::string dir_, tmp_dir_;
  ImageWriterOptions options_;
  std::unique_ptr<IoBackend> io_;  // null when write_files is false
  v1::Manifest manifest_;

  std::mutex mu_;  // guards buffers_ (the vector and each state's chunks/xxh3), next_offset_, state_
  std::vector<std::unique_ptr<BufferState>> buffers_;  // stable addresses
  std::uint64_t next_offset_ = kGpuImgHeaderBlock;
  State state_ = State::kOpen;
};

}  // namespace phos::image
