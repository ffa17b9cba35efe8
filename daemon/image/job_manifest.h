// The image of an NCCL job (docs/protocols.md "Job checkpoints"): a
// directory holding one ordinary image per rank (rank-<R>/) and the job
// manifest `job`, written last. The manifest file is the magic "phosjob\0",
// a little-endian u32 format version, then a serialized
// image::v1::JobManifest; a reader meeting another major version refuses.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "image.pb.h"

namespace phos::image {

inline constexpr char kJobManifestFile[] = "job";
inline constexpr std::uint32_t kJobFormatVersion = 1;

/// Whether `dir` holds a job manifest (a job image, not a rank's).
bool IsJobImage(const std::string& dir);
/// Writes `m` to `dir`/job durably (a staged file, fsync, rename, fsync of
/// `dir`).
Status WriteJobManifest(const std::string& dir, const image::v1::JobManifest& m);
/// Reads and checks `dir`/job: Corruption naming what is wrong.
Status ReadJobManifest(const std::string& dir, image::v1::JobManifest* m);
/// The file's bytes <-> the manifest (magic, version, protobuf, and every
/// rank directory inside the job directory). Decode reads untrusted bytes:
/// Corruption naming what is wrong, never a crash (fuzzed).
std::string EncodeJobManifest(const image::v1::JobManifest& m);
Status DecodeJobManifest(std::string_view bytes, const std::string& what, image::v1::JobManifest* m);

}  // namespace phos::image
