#include "session/device_attributes.h"

#include <cuda.h>

namespace phos::session {

namespace {

struct NotOffered {
  CUdevice_attribute attribute;
  const char* why;
};

// One row per attribute phos answers 0 for. Keep the reason short: it is
// what docs/interposer.md and the test print.
constexpr NotOffered kNotOffered[] = {
    {CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, "mapped (zero-copy) pinned memory is not offered"},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "managed memory (cudaMallocManaged) is not offered"},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, "managed memory (cudaMallocManaged) is not offered"},
    {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, "kernels cannot reach the app's pageable memory"},
    {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, "kernels cannot reach the app's pageable memory"},
    {CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, "managed memory (cudaMallocManaged) is not offered"},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, "stream memory operations (cuStreamWaitValue*) are not offered"},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, "stream memory operations (cuStreamWaitValue*) are not offered"},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, "stream memory operations (cuStreamWaitValue*) are not offered"},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, "stream memory operations (cuStreamWaitValue*) are not offered"},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, "stream memory operations (cuStreamWaitValue*) are not offered"},
    {CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, "multi-device cooperative launches are not offered"},
    {CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, "thread-block cluster launches are not offered"},
    {CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, "cuFlushGPUDirectRDMAWrites is not offered"},
    {CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED, "compressible memory (cuMemCreate with compression) is not offered"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, "exporting memory handles is not offered"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, "exporting memory handles is not offered"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, "exporting memory handles is not offered"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, "exporting memory handles is not offered"},
    {CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, "access-policy windows (stream attributes) are not offered"},
    {CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, "access-policy windows (stream attributes) are not offered"},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, "GPUDirect RDMA is not offered"},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, "GPUDirect RDMA is not offered"},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, "GPUDirect RDMA is not offered"},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING, "GPUDirect RDMA is not offered"},
    {CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, "CUDA arrays are not offered"},
    {CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, "CUDA arrays are not offered"},
    {CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, "external semaphores are not offered"},
    {CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, "exporting memory pools (cudaMemPoolExportToShareableHandle) is not offered"},
    {CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED, "memory pools in host memory are not offered"},
    {CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, "memory pools in host memory are not offered"},
    {CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "cuMemCreate of host memory is not offered"},
    {CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "cuMemCreate of host memory is not offered"},
    {CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED, "IPC of memory and events is not offered"},
    {CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, "IPC of memory and events is not offered"},
    {CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, "dma-buf export is not offered"},
    {CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED, "dma-buf export is not offered"},
    {CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED, "tensor maps (cuTensorMapEncode*) are not offered"},
    {CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, "multicast objects are not offered"},
    {CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED, "graphics interop is not offered"},
    {CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED, "graphics interop is not offered"},
    {CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK, "memory decompression (cuMemBatchDecompressAsync) is not offered"},
    {CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH, "memory decompression (cuMemBatchDecompressAsync) is not offered"},
};

}  // namespace

const char* FeatureNotOffered(int attribute) {
  for (const NotOffered& row : kNotOffered) {
    if (static_cast<int>(row.attribute) == attribute) return row.why;
  }
  return nullptr;
}

Status SessionDeviceAttribute(const backend::Backend& backend, int device, int attribute, std::int64_t* out) {
  // The device is asked first even for a feature phos does not offer: a
  // number it does not know stays InvalidValue, as CUDA answers.
  std::int64_t v = 0;
  PHOS_RETURN_IF_ERROR(backend.GetDeviceAttribute(device, attribute, &v));
  *out = FeatureNotOffered(attribute) != nullptr ? 0 : v;
  // Mapped pinned memory: offered where the backend maps host memory for
  // kernels (docs/interposer.md "Mapped pinned memory").
  if (attribute == CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY && !backend.MapsHostMemoryForKernels()) *out = 0;
  return Status::Ok();
}

}  // namespace phos::session
