// The manifest sections that describe a session (besides the buffer
// extents), written by every checkpoint path from ONE place so an image of
// any mode holds the same: docs/image-format.md "Session sections".
//
//   handles   text, buffer/global ranges and ids (session_snapshot.h);
//             what an in-place restore reads.
//   streams   a serialized image.v1.SessionHandles: streams and events
//             with their creation flags, functions with module id, kernel
//             name and attributes the app set, globals with their module
//             and symbol name, texture and surface objects with their
//             handles and descriptors.
//   modules   a serialized image.v1.SessionModules: every module image as
//             the app loaded it. Left empty (SessionHandles.modules_saved
//             = false, a warning logged) when the images would make the
//             manifest too large; the image still restores in place.
// The last two are what a restore into a fresh session needs
// (fresh_restore.h); images written before they existed lack them.
//
// Threading: pure functions on immutable inputs; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "common/status.h"
#include "engine/session_snapshot.h"
#include "image.pb.h"

namespace phos::engine {

/// Module images above this many bytes in total are not stored in the
/// manifest (its payload is limited to image::kMaxManifestBytes).
inline constexpr std::uint64_t kMaxStoredModuleBytes = 128ull << 20;

/// Sets the manifest's handles, streams and modules sections from `snap`
/// (CaptureSnapshot at the instant the image describes).
void SetSessionSections(const SessionSnapshot& snap, image::v1::Manifest* manifest);

/// A texture or surface object as its record holds it, and back (the
/// decoded descriptor is checked again when the session recreates it).
void EncodeTextureObject(std::uint64_t handle, const session::SessionState::TextureObject& obj,
                         image::v1::TextureObjectRecord* r);
Status DecodeTextureObject(const image::v1::TextureObjectRecord& r, wire::TextureDesc* d);

/// The streams and modules sections, parsed and checked against `snap`
/// (the decoded `handles` section): every module has an image, every
/// function's and global's module is among them, the globals are exactly
/// the snapshot's. FailedPrecondition for an image without them (older
/// phosd, or module images left out); Corruption when they are malformed
/// or disagree with the handles.
Status ReadSessionSections(const image::v1::Manifest& manifest, const SessionSnapshot& snap,
                           image::v1::SessionHandles* handles, image::v1::SessionModules* modules);

/// Which GPU each range of an image is on, as an in-place restore reads it
/// (phosd's ordinals of the process it was taken from).
struct ImageDevices {
  int home = -1;                         // -1: the image records none (one GPU)
  std::set<int> others;                  // the other GPUs its process used
  std::map<std::uint64_t, int> ranges;   // extent start -> GPU, for ranges off the home GPU
};
/// The streams section's GPU records (an image without one: a single
/// GPU), checked against `snap` (the decoded `handles` section) as
/// ReadSessionSections checks them; Corruption when they do not parse or
/// a check fails, also for a module variable recorded off the home GPU
/// that is none of the snapshot's.
Status ReadImageDevices(const image::v1::Manifest& manifest, const SessionSnapshot& snap, ImageDevices* out);

}  // namespace phos::engine
