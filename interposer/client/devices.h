// The GPUs an app sees and the one its session runs on (docs/interposer.md
// "Devices").
//
// The app's ordinals are CUDA's: phosd's GPUs, filtered and ordered by the
// app's CUDA_VISIBLE_DEVICES (integer ordinals or GPU uuids, "GPU-" and a
// prefix naming one GPU; the list ends at the first entry that is neither,
// names a GPU phosd does not have, or repeats one, as CUDA's does; MIG
// devices are not offered). Every call that names a device is translated here to phosd's
// ordinal. A process runs on ONE GPU: the one its first cudaSetDevice (or
// cuCtxCreate / cuDevicePrimaryCtxRetain) names before it holds anything on
// the GPU, app ordinal 0 otherwise. Switching once it holds device state is
// refused by phosd, by name.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include "interposer/protocol/wire.h"

namespace phos::client {

/// The number of GPUs the app sees (connects to phosd).
cudaError_t VisibleDeviceCount(int* count);
/// phosd's ordinal of the app's GPU `device`; cudaErrorInvalidDevice when
/// the app sees no such GPU.
cudaError_t PhysicalDevice(int device, int* physical);
/// The app's ordinal of the GPU its session runs on (cudaGetDevice).
int SessionDevice();
/// Whether `device` (an app ordinal) is the session's GPU.
bool IsSessionDevice(int device);
/// cudaSetDevice: the session runs on the app's GPU `device` from now on.
/// Not sticky; sets no last error (the caller does).
cudaError_t SelectDevice(int device);
/// phosd's description of its GPU `physical` (name, uuid, attributes),
/// through a staging chunk (it is larger than a completion slot).
wire::WireStatus FetchDeviceProps(int physical, wire::WireDeviceProps* props);
/// Called once the connection is up: a session starts on phosd's GPU 0, so
/// an app whose GPU 0 is another of phosd's GPUs moves there at once.
wire::WireStatus MoveToStartDevice();

}  // namespace phos::client
