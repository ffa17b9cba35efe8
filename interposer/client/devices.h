// The GPUs an app sees and the one its session runs on (docs/interposer.md
// "Devices").
//
// The app's ordinals are CUDA's: phosd's GPUs, filtered and ordered by the
// app's CUDA_VISIBLE_DEVICES (integer ordinals or GPU uuids, "GPU-" and a
// prefix naming one GPU; the list ends at the first entry that is neither,
// names a GPU phosd does not have, or repeats one, as CUDA's does; MIG
// devices are not offered). Every call that names a device is translated here to phosd's
// ordinal. Each thread has a current GPU (cudaSetDevice, or the device of
// its current driver context), app ordinal 0 until it chooses; every call
// carries phosd's ordinal of it (ring::FrameHeader::device), and phosd runs
// the call in its session's context on that GPU (docs/interposer.md
// "Several GPUs in one process").
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
/// The app's ordinal of the calling thread's current GPU (cudaGetDevice).
int CurrentDevice();
/// Whether `device` (an app ordinal) is the calling thread's current GPU.
bool IsCurrentDevice(int device);
/// cudaSetDevice: the calling thread's calls run on the app's GPU `device`
/// from now on. Not sticky; sets no last error (the caller does).
cudaError_t SelectDevice(int device);
/// phosd's ordinal of the calling thread's current GPU: the device byte of
/// every frame the thread writes (Connection).
uint8_t CurrentPhysicalDevice();
/// phosd's description of its GPU `physical` (name, uuid, attributes),
/// through a staging chunk (it is larger than a completion slot).
wire::WireStatus FetchDeviceProps(int physical, wire::WireDeviceProps* props);

}  // namespace phos::client
