// libFuzzer target for what an image says about its session besides the
// buffer bytes (engine/session_sections.h, session_snapshot.h) and where a
// restore would put its GPUs (engine/restore_devices.h): a restore into a
// fresh session reads them from an image anyone may have written, so no
// bytes may crash phosd, and what ReadSessionSections accepts must be
// consistent (every object's GPU one the session used, every listed buffer
// one of the image's).
//
// The input is a serialized image.v1.Manifest (the protobuf, without the
// manifest file's header and checksum, so mutations reach the checks):
// DecodeSnapshot of its session index, ReadSessionSections, and for an
// accepted one PlanRestoreDevices against a 4-GPU sim backend (with no map
// and with GPU 0 moved to 3) and RestoredAliases; and, on every decoded
// snapshot, ReadImageDevices (what an in-place restore reads). Seeds are made by
// make_session_sections_seeds.py.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include "backend/backend_factory.h"
#include "engine/restore_devices.h"
#include "engine/session_sections.h"
#include "engine/session_snapshot.h"
#include "image.pb.h"

namespace {

phos::backend::Backend& FourGpus() {
  static phos::backend::Backend* b = [] {
    phos::backend::SimOptions so;
    so.device_count = 4;
    so.memory_bytes = 1ull << 30;
    std::unique_ptr<phos::backend::Backend> made;
    if (!phos::backend::CreateSimBackend(so, &made).ok()) std::abort();
    return made.release();  // leaked: lives as long as the fuzzer
  }();
  return *b;
}

void CheckAccepted(const phos::image::v1::SessionHandles& h, const phos::engine::SessionSnapshot& snap) {
  std::set<int> used{h.device()};
  used.insert(h.other_devices().begin(), h.other_devices().end());
  for (const auto& s : h.streams()) {
    if (s.has_device() && !used.count(s.device())) std::abort();
  }
  std::set<std::uint64_t> buffers;
  for (const auto& b : snap.buffers) buffers.insert(b.address);
  for (const auto& b : h.buffer_devices()) {
    if (!buffers.count(b.address()) || !used.count(b.device()) || b.device() == h.device()) std::abort();
  }
  for (const std::map<int, int>& map : {std::map<int, int>{}, std::map<int, int>{{0, 3}}}) {
    phos::engine::RestoreDevices plan;
    if (!phos::engine::PlanRestoreDevices(FourGpus(), h, map, &plan).ok()) continue;
    std::set<int> targets;
    for (const auto& [from, to] : plan.to) {
      if (to < 0 || to >= 4 || !targets.insert(to).second) std::abort();  // a GPU, no two onto one
    }
    for (const auto& [app, phosd] : phos::engine::RestoredAliases(h, plan)) {
      if (app == phosd) std::abort();  // only aliases that differ
    }
  }
}

// What an in-place restore reads (ReadImageDevices), checked when accepted:
// every range off the home GPU is one of the snapshot's, on one of the
// other GPUs.
void CheckImageDevices(const phos::image::v1::Manifest& manifest, const phos::engine::SessionSnapshot& snap) {
  phos::engine::ImageDevices d;
  if (!phos::engine::ReadImageDevices(manifest, snap, &d).ok()) return;
  std::set<std::uint64_t> ranges;
  for (const auto& b : snap.buffers) ranges.insert(b.address);
  for (const auto& g : snap.globals) ranges.insert(g.address);
  if (d.others.count(d.home)) std::abort();
  for (const auto& [address, device] : d.ranges) {
    if (!ranges.count(address) || !d.others.count(device) || device < 0 || device > 255) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  phos::image::v1::Manifest manifest;
  if (!manifest.ParseFromArray(data, static_cast<int>(size))) return 0;
  phos::engine::SessionSnapshot snap;
  if (!phos::engine::DecodeSnapshot(manifest.session(), &snap).ok()) return 0;
  CheckImageDevices(manifest, snap);
  phos::image::v1::SessionHandles handles;
  phos::image::v1::SessionModules modules;
  if (!phos::engine::ReadSessionSections(manifest, snap, &handles, &modules).ok()) return 0;
  CheckAccepted(handles, snap);
  return 0;
}
