// What a phos session answers when an app asks about its device: the
// backend's value (the real GPU's, or the sim's model), except for the
// attributes that advertise a feature phos does not offer yet, which answer
// 0 whatever the device can do. A program that believed the device would
// take a path phos refuses (managed memory, memory pools, cooperative or
// cluster launches, ...); told 0, it takes the path every CUDA program keeps
// for devices without the feature. docs/interposer.md "Device attributes"
// lists them; each goes when the issue that adds its feature lands.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "common/status.h"

namespace phos::session {

/// The value phos reports for `attribute` (a CUdevice_attribute number) of
/// backend device `device`. InvalidArgument for a number the backend does
/// not know (the app gets cudaErrorInvalidValue, as from CUDA).
Status SessionDeviceAttribute(const backend::Backend& backend, int device, int attribute, std::int64_t* out);

/// Why phos answers 0 for `attribute` whatever the device says, or nullptr
/// when it passes the device's answer through.
const char* FeatureNotOffered(int attribute);

}  // namespace phos::session
