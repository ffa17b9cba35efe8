// ImageReceiver: the destination side of PhosPeer.ReceiveImage — turns one
// stream of ImageChunk messages into a committed image directory
// (proto/peer.proto, docs/migration.md).
//
//   Begin(ImageBegin)  checks the name and the size limit, creates
//                      <incoming>/<name>.tmp/ (a stale one is replaced)
//   Data(FileData)     appends to the file being received (created, with its
//                      parent directories, by its first chunk); xxh3 is
//                      computed as bytes arrive; no fsync per chunk
//   End(ImageEnd)      (with a pre-copy: lays gpu.img out first, below)
//   FileEnd(FileEnd)   checks size and xxh3, applies the mode, fsyncs, closes
//   End(ImageEnd)      checks counts, fsyncs the directories, renames .tmp to
//                      <incoming>/<name> (never over an existing one) and
//                      fsyncs <incoming>
//   Discard()          removes the .tmp (the destination refused the data)
//
// With a pre-copy (options.precopy, live migration; docs/migration.md
// "Pre-copy streaming") gpu.img is not written from offset 0 up: the
// pre-copy's file, which already holds the copies, becomes gpu.img; a
// FileData with a PrecopyRef only records where its bytes already are, and
// streamed bytes are appended (each run keeping its offset modulo 4 KiB, so
// aligned extents stay aligned). End then reads the manifest, moves every
// extent's offset to where its bytes are, writes the gpu.img header and the
// new manifest. An extent whose bytes arrived in several places (the
// source's dirtiness is per chunk: a buffer's clean chunks in its first
// copy, the chunks written since in later copies or streamed after the
// freeze) is assembled in place: the pieces that are not where the
// buffer's whole copy holds them are copied there within the file (only
// the chunks written since that copy), or, with no whole copy, the extent
// is assembled at the end of the file. Nothing else pre-copied is copied
// again after the freeze.
//
// A receiver dropped without End or Discard (the source vanished) leaves the
// .tmp: image::RecoverDirectory removes it at the next phosd start, and the
// next transfer of the same name replaces it.
//
// Threading: one receiver belongs to one RPC thread; not shared. The caller
// makes sure two receivers never hold the same name at once (PeerService's
// in-flight set).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "image.pb.h"
#include "peer.pb.h"
#include "image/precopy_store.h"

struct XXH3_state_s;

namespace phos::image {

struct ImageReceiverOptions {
  /// <checkpoint root>/incoming; created (0700) if missing.
  std::string incoming_dir;
  /// Largest image accepted (announced and actual bytes).
  std::uint64_t max_bytes = 1ull << 40;
  /// The sealed pre-copy of this image's name, if the source sent one
  /// (PrecopyRefs are refused without one).
  std::shared_ptr<PrecopyStore> precopy;
};

/// One path component usable as an image name: [A-Za-z0-9._-], 1-200
/// characters, not "."/"..", not ending in ".tmp". Empty = valid, else why not.
std::string CheckImageName(std::string_view name);
/// A relative file path inside an image: '/'-separated non-empty components,
/// none "." or "..", no leading '/', no NUL, at most 4096 bytes.
std::string CheckRelativePath(std::string_view path);

class ImageReceiver {
 public:
  static Status Begin(const ImageReceiverOptions& options, const peer::v1::ImageBegin& begin,
                      std::unique_ptr<ImageReceiver>* out);
  ~ImageReceiver();  // closes an open file; leaves the .tmp
  ImageReceiver(const ImageReceiver&) = delete;
  ImageReceiver& operator=(const ImageReceiver&) = delete;

  Status Data(const peer::v1::FileData& data);
  Status FileEnd(const peer::v1::FileEnd& end);
  Status End(const peer::v1::ImageEnd& end, peer::v1::ReceiveImageReply* reply);
  void Discard();

  const std::string& tmp_dir() const { return tmp_dir_; }
  std::uint64_t bytes() const { return total_bytes_; }

 private:
  ImageReceiver() = default;
  Status OpenFile(const std::string& rel);
  /// Writes bytes at `offset` of the open file (no checksum).
  Status WriteAt(const char* bytes, std::size_t n, std::uint64_t offset);
  /// gpu.img with a pre-copy: where this chunk's bytes go (or already are).
  Status PlaceGpuImgChunk(const peer::v1::FileData& data, const char* bytes, std::size_t size);
  /// End with a pre-copy: extents moved to where their bytes are, header, manifest.
  Status LayOutGpuImg();
  /// LayOutGpuImg, one buffer: points its extent at its bytes in our file
  /// (`fd`), assembling them first when they arrived in several places;
  /// *file_end grows when it is assembled at the end.
  Status PlaceExtent(int fd, image::v1::BufferExtent* b, std::uint64_t* file_end);
  void CloseFile();

  ImageReceiverOptions options_;
  std::string name_, tmp_dir_, final_dir_;
  std::uint64_t announced_bytes_ = 0;
  std::uint64_t total_bytes_ = 0;
  std::uint32_t files_ = 0;
  bool skip_fsync_ = false;  // ImageBegin.skip_fsync
  // Pre-copy layout of gpu.img: source file offset ranges -> offsets in
  // our gpu.img (sorted by source offset: the stream is in order).
  struct Span {
    std::uint64_t src = 0, len = 0, dst = 0;
    // A span of a pre-copy: the whole copy's device range and where the
    // copy starts in our file (copy_bytes 0: streamed bytes).
    std::uint64_t copy_address = 0, copy_bytes = 0, copy_file_offset = 0;
  };
  bool relayout_ = false;   // gpu.img came from the pre-copy
  std::vector<Span> spans_;
  bool inline_run_ = false; // the last span holds streamed bytes and may grow
  std::uint64_t gpu_end_ = 0;  // end of what our gpu.img holds
  std::uint64_t assembled_bytes_ = 0;  // LayOutGpuImg: extents assembled at the end of the file
  // The file being received (fd_ < 0: none).
  int fd_ = -1;
  std::string file_rel_;
  std::uint64_t file_bytes_ = 0;
  XXH3_state_s* xxh_ = nullptr;
  bool finished_ = false;  // committed or discarded
};

}  // namespace phos::image
