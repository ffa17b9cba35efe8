// Launch attributes (cuLaunchKernelEx, cudaLaunchKernelExC): which ones phos
// honours. The runtime's cudaLaunchAttribute and the driver's
// CUlaunchAttribute share ids and value layout.
#pragma once

#include <cuda.h>

namespace phos::client {

/// nullptr if phos can run a launch with these attributes as CUDA would;
/// otherwise the name of the first attribute it cannot honour (printed once
/// per attribute: "phos: launch attribute X is not supported by phos yet").
/// Accepted: hints whose absence changes no result (access-policy window,
/// synchronisation policy, cluster scheduling preference, priority, memory
/// sync domains, preferred cluster dimension, shared-memory carveout, NVLink
/// scheduling), programmatic stream serialisation (ignoring it keeps the
/// stricter stream order), a cluster of 1x1x1 and cooperative (see
/// CooperativeLaunch). Refused: clusters of more than one block,
/// programmatic and completion events, device-updatable graph nodes,
/// unknown ids.
const char* UnhonouredLaunchAttribute(const CUlaunchAttribute* attrs, unsigned count);

/// True if the attributes ask for a cooperative launch (the last
/// CU_LAUNCH_ATTRIBUTE_COOPERATIVE with a nonzero value wins, as in CUDA).
bool CooperativeLaunch(const CUlaunchAttribute* attrs, unsigned count);

}  // namespace phos::client
