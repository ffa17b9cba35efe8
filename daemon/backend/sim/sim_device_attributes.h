// The sim's answer to cuDeviceGetAttribute: every CUdevice_attribute of
// CUDA 13's cuda.h, modelled on an H100 SXM5 80 GB (docs/backends.md
// "Device attributes").
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace phos::backend::sim {

/// The modelled value of `attribute` (a CUdevice_attribute number) for a
/// device whose properties are `props` (ModelDeviceProperties: the values
/// both report come from there, so they agree). InvalidArgument for a number
/// cuda.h does not define.
Status ModelDeviceAttribute(const DeviceProperties& props, int attribute, std::int64_t* out);

}  // namespace phos::backend::sim
