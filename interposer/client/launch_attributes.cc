#include "interposer/client/launch_attributes.h"

#include <atomic>
#include <cstdint>
#include <cstdio>

#include "interposer/client/client_internal.h"

namespace phos::client {
namespace {

const char* Name(unsigned id) {
  switch (id) {
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: return "CU_LAUNCH_ATTRIBUTE_COOPERATIVE (cooperative launch)";
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: return "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (a cluster of more than one block)";
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT: return "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT";
    case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: return "CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT";
    case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE: return "CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE";
    default: return "an unknown launch attribute";
  }
}

// The attribute ids already reported.
std::atomic<uint64_t> g_reported{0};

const char* Refuse(unsigned id) {
  if (FirstTimeFor(g_reported, id)) {
    std::fprintf(stderr, "phos: launch attribute %s (id %u) is not supported by phos yet\n", Name(id), id);
  }
  return Name(id);
}

}  // namespace

const char* UnhonouredLaunchAttribute(const CUlaunchAttribute* attrs, unsigned count) {
  for (unsigned i = 0; i < count; ++i) {
    const CUlaunchAttribute& a = attrs[i];
    switch (a.id) {
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
      case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        break;
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:  // honoured: a cooperative launch (CooperativeLaunch)
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        if (a.value.clusterDim.x > 1 || a.value.clusterDim.y > 1 || a.value.clusterDim.z > 1) return Refuse(a.id);
        break;
      default:
        return Refuse(static_cast<unsigned>(a.id));
    }
  }
  return nullptr;
}

bool CooperativeLaunch(const CUlaunchAttribute* attrs, unsigned count) {
  bool cooperative = false;
  for (unsigned i = 0; i < count; ++i) {
    if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) cooperative = attrs[i].value.cooperative != 0;
  }
  return cooperative;
}

}  // namespace phos::client
