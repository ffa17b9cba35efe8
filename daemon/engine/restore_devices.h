// Where a restore into a fresh session puts each GPU of its image
// (docs/interposer.md "Several GPUs in one process", docs/criu.md): the
// image's home GPU and every other GPU its process used go to GPUs of this
// phosd — the same ordinals, or where `phos restore --device-map OLD=NEW`
// says — each a GPU of the same kind, no two onto one. The restored
// process keeps naming GPUs as it did when it started (libphos.so resolved
// its ordinals once), so the session translates them (device aliases).
//
// Threading: pure functions; any thread.
#pragma once

#include <map>

#include "backend/backend.h"
#include "common/status.h"
#include "image.pb.h"

namespace phos::engine {

struct RestoreDevices {
  int home = 0;            // where the image's home GPU goes
  std::map<int, int> to;   // every GPU the image used -> phosd's GPU
  // The map's entries for GPUs the image did not use (unchecked: a GPU the
  // process takes later is checked then): the app's whole numbering moves
  // as the user said (--device-map 0=1,1=0 swaps GPU 1 too for a process
  // that used only GPU 0).
  std::map<int, int> unused;

  /// Where the image's GPU `image_device` goes (itself when not listed).
  int Of(int image_device) const {
    if (auto it = to.find(image_device); it != to.end()) return it->second;
    auto it = unused.find(image_device);
    return it == unused.end() ? image_device : it->second;
  }
};

/// Resolves and checks the GPUs of `handles` against `backend` with
/// `device_map` (image GPU -> phosd GPU; a GPU not listed stays):
/// FailedPrecondition, naming the GPUs and what to pass, when one is not a
/// GPU of this phosd, is of another kind than this phosd's GPU of the image
/// ordinal, or two image GPUs land on one.
Status PlanRestoreDevices(const backend::Backend& backend, const image::v1::SessionHandles& handles,
                          const std::map<int, int>& device_map, RestoreDevices* out);

/// The restored session's device aliases (app ordinal -> phosd ordinal,
/// SessionState::device_aliases): the image's own, then through `plan`
/// (its used and unused GPUs); only those that differ.
std::map<int, int> RestoredAliases(const image::v1::SessionHandles& handles, const RestoreDevices& plan);

}  // namespace phos::engine
