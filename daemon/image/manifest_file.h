// The `manifest` file: ManifestHeader + serialized image.v1.Manifest, and
// the structural checks every reader applies before trusting a manifest.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "common/status.h"
#include "image.pb.h"

namespace phos::image {

/// Serializes `m` behind a ManifestHeader (magic, version, length, xxh3).
Status EncodeManifestFile(const v1::Manifest& m, std::string* out);

/// Parses manifest file bytes: header, exact length, payload checksum,
/// protobuf, then ValidateManifest. Corruption says which check failed.
/// Safe on arbitrary input (fuzzed by tests/fuzz/image_manifest_fuzz.cc).
Status DecodeManifestFile(std::span<const std::uint8_t> bytes, v1::Manifest* m);

/// Structural checks: chunk sizes are non-zero multiples of 4 KiB, one
/// checksum per chunk, extents 4 KiB aligned, past the gpu.img header,
/// inside gpu_img_bytes, not overlapping, and no arithmetic overflow.
Status ValidateManifest(const v1::Manifest& m);

/// Reads DIR's manifest (ReadManifest's checks), lets `amend` change it and
/// writes it back (tmp + rename inside DIR; fsynced when `durable`). For a
/// staged image, before its directory is committed: a whole-process
/// checkpoint adds its ProcessRecord, a template save its TemplateRecord, so
/// everything an image directory says is in this one format.
Status AmendManifest(const std::string& dir, const std::function<void(v1::Manifest*)>& amend, bool durable);

}  // namespace phos::image
