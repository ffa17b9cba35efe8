// multi_stream: a copy -> kernel -> copy pipeline over several streams with
// pinned host memory, events between streams (cudaStreamWaitEvent) and a
// final combining kernel that depends on all of them.
#include <vector>

#include "common.h"

__global__ void transform(const unsigned int* in, unsigned int* out, int n, unsigned int salt) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned int v = in[i] ^ salt;
    v = v * 2654435761u + (v >> 13);
    out[i] = v;
  }
}

// sums[c] = sum of chunk c of data (one block per chunk).
__global__ void chunk_sums(const unsigned int* data, int chunk, unsigned long long* sums) {
  __shared__ unsigned long long acc[128];
  unsigned long long v = 0;
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) v += data[blockIdx.x * chunk + i];
  acc[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) acc[threadIdx.x] += acc[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = acc[0];
}

static unsigned int TransformRef(unsigned int x, unsigned int salt) {
  unsigned int v = x ^ salt;
  return v * 2654435761u + (v >> 13);
}

int main() {
  const int streams = 4;
  const int chunks = 16;  // chunks are dealt round-robin to the streams
  const int chunk = 4096;
  const int n = chunks * chunk;
  AppRng rng(0x5eed0006);
  unsigned int *hin, *hout;
  APP_CHECK(cudaMallocHost(&hin, n * sizeof(unsigned int)));
  APP_CHECK(cudaMallocHost(&hout, n * sizeof(unsigned int)));
  for (int i = 0; i < n; ++i) hin[i] = rng.NextU32();
  unsigned int *din, *dout;
  unsigned long long* dsums;
  APP_CHECK(cudaMalloc(&din, n * sizeof(unsigned int)));
  APP_CHECK(cudaMalloc(&dout, n * sizeof(unsigned int)));
  APP_CHECK(cudaMalloc(&dsums, chunks * sizeof(unsigned long long)));
  std::vector<cudaStream_t> s(streams);
  std::vector<cudaEvent_t> done(chunks);
  for (auto& st : s) APP_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (auto& ev : done) APP_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaStream_t final_stream;
  APP_CHECK(cudaStreamCreateWithFlags(&final_stream, cudaStreamNonBlocking));

  for (int c = 0; c < chunks; ++c) {
    cudaStream_t st = s[c % streams];
    const size_t off = static_cast<size_t>(c) * chunk;
    APP_CHECK(cudaMemcpyAsync(din + off, hin + off, chunk * sizeof(unsigned int), cudaMemcpyHostToDevice, st));
    transform<<<(chunk + 255) / 256, 256, 0, st>>>(din + off, dout + off, chunk, 0x9e3779b9u + c);
    APP_CHECK(cudaGetLastError());
    APP_CHECK(cudaMemcpyAsync(hout + off, dout + off, chunk * sizeof(unsigned int), cudaMemcpyDeviceToHost, st));
    APP_CHECK(cudaEventRecord(done[c], st));
  }
  AppMidpoint("multi_stream");  // chunks transformed (or queued), sums not yet
  for (int c = 0; c < chunks; ++c) APP_CHECK(cudaStreamWaitEvent(final_stream, done[c], 0));
  chunk_sums<<<chunks, 128, 0, final_stream>>>(dout, chunk, dsums);
  APP_CHECK(cudaGetLastError());
  std::vector<unsigned long long> sums(chunks);
  APP_CHECK(cudaMemcpyAsync(sums.data(), dsums, chunks * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                            final_stream));
  APP_CHECK(cudaStreamSynchronize(final_stream));
  APP_CHECK(cudaDeviceSynchronize());

  size_t bad = 0;
  for (int c = 0; c < chunks; ++c) {
    unsigned long long ref_sum = 0;
    for (int i = 0; i < chunk; ++i) {
      const size_t k = static_cast<size_t>(c) * chunk + i;
      const unsigned int r = TransformRef(hin[k], 0x9e3779b9u + c);
      ref_sum += r;
      if (hout[k] != r) ++bad;
    }
    if (sums[c] != ref_sum) ++bad;
  }
  uint64_t h = AppFnv1a(hout, n * sizeof(unsigned int));
  h = AppFnv1a(sums.data(), chunks * sizeof(unsigned long long), h);
  for (auto& ev : done) APP_CHECK(cudaEventDestroy(ev));
  for (auto& st : s) APP_CHECK(cudaStreamDestroy(st));
  APP_CHECK(cudaStreamDestroy(final_stream));
  APP_CHECK(cudaFree(din));
  APP_CHECK(cudaFree(dout));
  APP_CHECK(cudaFree(dsums));
  APP_CHECK(cudaFreeHost(hin));
  APP_CHECK(cudaFreeHost(hout));
  return AppReport("multi_stream", h, bad);
}
