// Pinned host memory, truly asynchronous copies, cudaHostRegister,
// cudaPointerGetAttributes and 2D copies under phos (docs/interposer.md
// "Pinned host memory and copies"). Every result is checked against a CPU
// reference on random data; phos's own copy statistics
// (phosGetHostCopyStats, looked up with dlsym) prove that copies from and
// to cudaMallocHost memory took the zero-copy path and others the staged
// one. Prints "host_memory: OK" and exits 0, or says what failed.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#define PHOS_PROGRAM_NAME "host_memory"
#include "program_checks.h"

namespace {

std::mt19937_64 rng(12345);

void Randomize(void* p, size_t n) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(rng());
}

using StatsFn = int (*)(uint64_t*);
StatsFn g_stats = nullptr;

struct Stats {
  uint64_t pinned_copies = 0, pinned_bytes = 0, staged_copies = 0, staged_bytes = 0, segments = 0,
           segment_bytes = 0;
};

Stats GetStats() {
  uint64_t v[6] = {};
  if (g_stats(v) != 0) std::printf("host_memory: phosGetHostCopyStats failed\n");
  return Stats{v[0], v[1], v[2], v[3], v[4], v[5]};
}

// Pinned H2D on stream a, event, D2H into pinned memory on stream b.
int PinnedRoundTrip(size_t n, cudaStream_t a, cudaStream_t b) {
  unsigned char *src = nullptr, *dst = nullptr, *dev = nullptr;
  CHECK(cudaMallocHost(&src, n));
  CHECK(cudaHostAlloc(&dst, n, cudaHostAllocPortable));
  CHECK(cudaMalloc(&dev, n));
  Randomize(src, n);
  std::memset(dst, 0, n);
  std::vector<unsigned char> ref(src, src + n);
  cudaEvent_t uploaded;
  CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
  const Stats before = GetStats();
  CHECK(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, a));
  CHECK(cudaEventRecord(uploaded, a));
  CHECK(cudaStreamWaitEvent(b, uploaded, 0));
  CHECK(cudaMemcpyAsync(dst, dev, n, cudaMemcpyDeviceToHost, b));
  CHECK(cudaStreamSynchronize(b));
  EXPECT(std::memcmp(dst, ref.data(), n) == 0);
  const Stats after = GetStats();
  if (after.pinned_copies != before.pinned_copies + 2 || after.pinned_bytes != before.pinned_bytes + 2 * n ||
      after.staged_copies != before.staged_copies) {
    std::printf("host_memory: %zu-byte pinned round trip: pinned copies %llu -> %llu, staged %llu -> %llu\n", n,
                (unsigned long long)before.pinned_copies, (unsigned long long)after.pinned_copies,
                (unsigned long long)before.staged_copies, (unsigned long long)after.staged_copies);
    return 1;
  }
  // Synchronous cudaMemcpy with pinned memory: the same path.
  Randomize(src, n);
  CHECK(cudaMemcpy(dev, src, n, cudaMemcpyHostToDevice));
  std::memset(dst, 0, n);
  CHECK(cudaMemcpy(dst, dev, n, cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(dst, src, n) == 0);
  EXPECT(GetStats().pinned_copies == after.pinned_copies + 2);
  CHECK(cudaEventDestroy(uploaded));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(src));
  CHECK(cudaFreeHost(dst));
  return 0;
}

// A posted D2H into pinned memory: poll the stream, then sync.
int PostedD2HWithQuery(cudaStream_t s) {
  const size_t n = 8 << 20;
  unsigned char *host = nullptr, *dev = nullptr;
  std::vector<unsigned char> ref(n);
  Randomize(ref.data(), n);
  CHECK(cudaMallocHost(&host, n));
  CHECK(cudaMalloc(&dev, n));
  CHECK(cudaMemcpy(dev, ref.data(), n, cudaMemcpyHostToDevice));  // pageable: staged
  std::memset(host, 0, n);
  CHECK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s));
  cudaError_t q;
  int polls = 0;
  while ((q = cudaStreamQuery(s)) == cudaErrorNotReady) ++polls;
  EXPECT(q == cudaSuccess);
  CHECK(cudaStreamSynchronize(s));
  EXPECT(std::memcmp(host, ref.data(), n) == 0);
  std::printf("host_memory: posted 8 MiB D2H completed after %d stream queries\n", polls);
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  return 0;
}

int Registered() {
  const size_t n = 1 << 20;
  void* buf = std::malloc(n);
  std::vector<unsigned char> ref(n), back(n);
  Randomize(ref.data(), n);
  std::memcpy(buf, ref.data(), n);
  CHECK(cudaHostRegister(buf, n, cudaHostRegisterPortable));
  EXPECT(cudaHostRegister(static_cast<char*>(buf) + 100, 10, 0) == cudaErrorHostMemoryAlreadyRegistered);
  EXPECT(cudaGetLastError() == cudaErrorHostMemoryAlreadyRegistered);
  unsigned flags = 99;
  CHECK(cudaHostGetFlags(&flags, static_cast<char*>(buf) + 10));
  EXPECT(flags == cudaHostRegisterPortable);
  cudaPointerAttributes at{};
  CHECK(cudaPointerGetAttributes(&at, buf));
  EXPECT(at.type == cudaMemoryTypeHost && at.hostPointer == buf);
  void* dev = nullptr;
  CHECK(cudaMalloc(&dev, n));
  const Stats before = GetStats();
  CHECK(cudaMemcpy(dev, buf, n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost));
  EXPECT(back == ref);
  const Stats after = GetStats();
  // Registered memory is copied correctly but staged (phosd cannot map it).
  EXPECT(after.pinned_copies == before.pinned_copies);
  EXPECT(after.staged_copies > before.staged_copies);
  CHECK(cudaHostUnregister(buf));
  EXPECT(cudaHostUnregister(buf) == cudaErrorHostMemoryNotRegistered);
  EXPECT(cudaHostRegister(buf, n, 0x80) == cudaErrorInvalidValue);
  EXPECT(cudaHostRegister(nullptr, n, 0) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaPointerGetAttributes(&at, buf));
  EXPECT(at.type == cudaMemoryTypeUnregistered);
  CHECK(cudaFree(dev));
  std::free(buf);
  return 0;
}

int PointerAttributes() {
  void *dev = nullptr, *pinned = nullptr;
  CHECK(cudaMalloc(&dev, 4096));
  CHECK(cudaMallocHost(&pinned, 4096));
  cudaPointerAttributes at{};
  CHECK(cudaPointerGetAttributes(&at, static_cast<char*>(dev) + 100));
  EXPECT(at.type == cudaMemoryTypeDevice && at.device == 0);
  EXPECT(at.devicePointer == static_cast<char*>(dev) + 100 && at.hostPointer == nullptr);
  CHECK(cudaPointerGetAttributes(&at, pinned));
  EXPECT(at.type == cudaMemoryTypeHost && at.hostPointer == pinned && at.device == 0);
  int local = 0;
  CHECK(cudaPointerGetAttributes(&at, &local));
  EXPECT(at.type == cudaMemoryTypeUnregistered && at.devicePointer == nullptr);
  unsigned flags = 99;
  void* mapped = nullptr;
  CHECK(cudaHostAlloc(&mapped, 100, cudaHostAllocMapped | cudaHostAllocWriteCombined));
  CHECK(cudaHostGetFlags(&flags, mapped));
  EXPECT(flags == (cudaHostAllocMapped | cudaHostAllocWriteCombined));
  EXPECT(cudaHostAlloc(&mapped, 100, 0x100) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaFreeHost(mapped));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(dev));
  return 0;
}

__global__ void ScaleMapped(const float* in, float* out, int n, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * in[i];
}

// Mapped (zero-copy) pinned memory: kernels read and write the app's pinned
// pages through the device pointer, which is the host pointer itself
// (docs/interposer.md "Mapped pinned memory"). `label` names the pass.
int MappedMemory(const char* label) {
  int can_map = 0;
  CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
  const int n = 5000;
  float *in = nullptr, *out = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&in), n * sizeof(float), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&out), n * sizeof(float), cudaHostAllocMapped));
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(rng() % 100000) / 7.0f, out[i] = -1.0f;
  void *din = nullptr, *dout = nullptr;
  const cudaError_t e = cudaHostGetDevicePointer(&din, in, 0);
  if (!can_map) {
    EXPECT(e == cudaErrorNotSupported);
    cudaGetLastError();
    std::printf("host_memory: %s: mapped pinned memory is not offered by this phosd (canMapHostMemory 0)\n", label);
  } else {
    CHECK(e);
    CHECK(cudaHostGetDevicePointer(&dout, out, 0));
    EXPECT(din == in && dout == out);  // unified addressing: one pointer for both sides
    ScaleMapped<<<(n + 127) / 128, 128>>>(static_cast<const float*>(din), static_cast<float*>(dout), n, 2.5f);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; ++i) EXPECT(out[i] == 2.5f * in[i]);
    // The host pointer passed as is, read and written in place.
    ScaleMapped<<<(n + 127) / 128, 128>>>(out, out, n, 0.5f);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; ++i) EXPECT(out[i] == 1.25f * in[i]);
    cudaPointerAttributes at{};
    CHECK(cudaPointerGetAttributes(&at, in + 10));
    EXPECT(at.type == cudaMemoryTypeHost && at.devicePointer == in + 10 && at.hostPointer == in + 10);
  }
  // cudaHostRegister'ed memory: a GPU maps it; phos cannot (the app's
  // private pages) and says so by name.
  std::vector<float> own(n, 1.0f);
  CHECK(cudaHostRegister(own.data(), n * sizeof(float), cudaHostRegisterMapped));
  void* downs = nullptr;
  const cudaError_t r = cudaHostGetDevicePointer(&downs, own.data(), 0);
  EXPECT(r == cudaSuccess || r == cudaErrorNotSupported);
  cudaGetLastError();
  CHECK(cudaHostUnregister(own.data()));
  int local = 0;
  EXPECT(cudaHostGetDevicePointer(&downs, &local, 0) == cudaErrorInvalidValue);  // not pinned at all
  cudaGetLastError();
  CHECK(cudaFreeHost(in));
  CHECK(cudaFreeHost(out));
  if (can_map) std::printf("host_memory: %s: kernels read and wrote %d mapped pinned floats\n", label, n);
  return 0;
}

// Where one side of a 2D copy lives.
enum class Where { kPageable, kPinned, kDevice };
const char* Name(Where w) { return w == Where::kPageable ? "pageable" : w == Where::kPinned ? "pinned" : "device"; }

struct Region {
  Where where;
  unsigned char* p = nullptr;
  size_t pitch = 0, bytes = 0;
  std::vector<unsigned char> mirror;  // the CPU reference of its contents
};

int MakeRegion(Where w, size_t width, size_t height, Region* r) {
  r->where = w;
  if (w == Where::kDevice && rng() % 2 == 0) {
    CHECK(cudaMallocPitch(reinterpret_cast<void**>(&r->p), &r->pitch, width, height));
    EXPECT(r->pitch >= width && r->pitch % 32 == 0);
  } else {
    r->pitch = width + rng() % 300;
  }
  if (r->p == nullptr) {
    r->bytes = r->pitch * height;
    if (w == Where::kDevice) CHECK(cudaMalloc(reinterpret_cast<void**>(&r->p), r->bytes));
    if (w == Where::kPinned) CHECK(cudaMallocHost(reinterpret_cast<void**>(&r->p), r->bytes));
    if (w == Where::kPageable) r->p = static_cast<unsigned char*>(std::malloc(r->bytes));
  } else {
    r->bytes = r->pitch * height;
  }
  r->mirror.resize(r->bytes);
  Randomize(r->mirror.data(), r->bytes);
  if (w == Where::kDevice) {
    CHECK(cudaMemcpy(r->p, r->mirror.data(), r->bytes, cudaMemcpyHostToDevice));
  } else {
    std::memcpy(r->p, r->mirror.data(), r->bytes);
  }
  return 0;
}

int Contents(const Region& r, std::vector<unsigned char>* out) {
  out->resize(r.bytes);
  if (r.where == Where::kDevice) {
    CHECK(cudaMemcpy(out->data(), r.p, r.bytes, cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(out->data(), r.p, r.bytes);
  }
  return 0;
}

int FreeRegion(Region& r) {
  if (r.where == Where::kDevice) CHECK(cudaFree(r.p));
  if (r.where == Where::kPinned) CHECK(cudaFreeHost(r.p));
  if (r.where == Where::kPageable) std::free(r.p);
  return 0;
}

cudaMemcpyKind KindOf(Where dst, Where src) {
  const bool d = dst == Where::kDevice, s = src == Where::kDevice;
  return d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
           : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

int Copy2D(Where dw, Where sw, size_t width, size_t height, bool async, bool use_default, cudaStream_t s) {
  Region d, src;
  if (int e = MakeRegion(dw, width, height, &d); e) return e;
  if (int e = MakeRegion(sw, width, height, &src); e) return e;
  const cudaMemcpyKind kind = use_default ? cudaMemcpyDefault : KindOf(dw, sw);
  const Stats before = GetStats();
  if (async) {
    CHECK(cudaMemcpy2DAsync(d.p, d.pitch, src.p, src.pitch, width, height, kind, s));
    CHECK(cudaStreamSynchronize(s));
  } else {
    CHECK(cudaMemcpy2D(d.p, d.pitch, src.p, src.pitch, width, height, kind));
  }
  const Stats after = GetStats();
  for (size_t r = 0; r < height; ++r) std::memcpy(&d.mirror[r * d.pitch], &src.mirror[r * src.pitch], width);
  std::vector<unsigned char> got;
  if (int e = Contents(d, &got); e) return e;
  if (got != d.mirror) {
    std::printf("host_memory: 2D copy %s <- %s (%zu x %zu, pitches %zu/%zu, %s%s) differs from the reference\n",
                Name(dw), Name(sw), width, height, d.pitch, src.pitch, async ? "async" : "sync",
                use_default ? ", cudaMemcpyDefault" : "");
    return 1;
  }
  // A host side in pinned memory, the other on the device: one zero-copy record.
  const bool pinned_path = (dw == Where::kPinned && sw == Where::kDevice) || (dw == Where::kDevice && sw == Where::kPinned);
  if (pinned_path && (after.pinned_copies != before.pinned_copies + 1 || after.staged_copies != before.staged_copies)) {
    std::printf("host_memory: 2D copy %s <- %s did not take the pinned path\n", Name(dw), Name(sw));
    return 1;
  }
  if (int e = FreeRegion(d); e) return e;
  return FreeRegion(src);
}

int Copies2D(cudaStream_t s) {
  const Where all[] = {Where::kPageable, Where::kPinned, Where::kDevice};
  int n = 0;
  for (Where dw : all) {
    for (Where sw : all) {
      for (int variant = 0; variant < 3; ++variant) {
        size_t width = 1 + rng() % 700, height = 1 + rng() % 40;
        if (variant == 2) {  // many rows, more than a staging chunk: pieces split rows
          width = 300 + rng() % 200;
          height = 4096;
        }
        if (int e = Copy2D(dw, sw, width, height, variant == 1, rng() % 2 == 0, s); e) return e;
        ++n;
      }
    }
  }
  std::printf("host_memory: %d 2D copies match the reference\n", n);
  return 0;
}

int Memset2D(cudaStream_t s) {
  for (int i = 0; i < 6; ++i) {
    Region d;
    const size_t width = 1 + rng() % 500, height = 1 + rng() % 64;
    if (int e = MakeRegion(Where::kDevice, width, height, &d); e) return e;
    const int value = static_cast<int>(rng() % 256);
    if (i % 2) {
      CHECK(cudaMemset2DAsync(d.p, d.pitch, value, width, height, s));
      CHECK(cudaStreamSynchronize(s));
    } else {
      CHECK(cudaMemset2D(d.p, d.pitch, value, width, height));
    }
    for (size_t r = 0; r < height; ++r) std::memset(&d.mirror[r * d.pitch], value, width);
    std::vector<unsigned char> got;
    if (int e = Contents(d, &got); e) return e;
    EXPECT(got == d.mirror);
    if (int e = FreeRegion(d); e) return e;
  }
  return 0;
}

int Errors() {
  void* m = std::malloc(64);
  EXPECT(cudaFreeHost(m) == cudaErrorInvalidValue);
  std::free(m);
  void *dev = nullptr, *host = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(&dev, &pitch, 100, 10));
  CHECK(cudaMallocHost(&host, 1000));
  EXPECT(cudaMemcpy2D(dev, pitch, host, 50, 100, 10, cudaMemcpyHostToDevice) == cudaErrorInvalidPitchValue);
  EXPECT(cudaMemcpy2D(host, 50, dev, pitch, 100, 10, cudaMemcpyDeviceToHost) == cudaErrorInvalidPitchValue);
  EXPECT(cudaMemcpy2D(dev, pitch, host, 100, 100, 10, static_cast<cudaMemcpyKind>(42)) ==
         cudaErrorInvalidMemcpyDirection);
  EXPECT(cudaMemset2D(dev, 50, 0, 100, 10) == cudaErrorInvalidValue);
  EXPECT(cudaFreeHost(static_cast<char*>(host) + 16) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaFreeHost(host));
  CHECK(cudaFree(dev));
  EXPECT(cudaGetLastError() == cudaSuccess);
  return 0;
}

int ManyThreads() {
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      std::vector<std::pair<unsigned char*, size_t>> mine;
      for (int i = 0; i < 200; ++i) {
        const size_t n = 1 + (i * 7919 + t * 104729) % 50000;
        unsigned char* p = nullptr;
        if (cudaMallocHost(&p, n) != cudaSuccess) {
          bad++;
          continue;
        }
        std::memset(p, t, n);
        mine.emplace_back(p, n);
        if (i % 3 == 2) {
          auto [q, m] = mine.front();
          for (size_t j = 0; j < m; j += 101)
            if (q[j] != t) bad++;
          if (cudaFreeHost(q) != cudaSuccess) bad++;
          mine.erase(mine.begin());
        }
      }
      for (auto [q, m] : mine)
        if (cudaFreeHost(q) != cudaSuccess) bad++;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT(bad.load() == 0);
  return 0;
}

// cudaDeviceReset gives phosd a fresh context; the arena's segments stay
// shared and are registered with the new context on their next use.
int AfterDeviceReset() {
  CHECK(cudaDeviceReset());
  const size_t n = 3 << 20;
  unsigned char *host = nullptr, *dev = nullptr;
  CHECK(cudaMallocHost(&host, 2 * n));
  CHECK(cudaMalloc(&dev, n));
  Randomize(host, n);
  const Stats before = GetStats();
  CHECK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(host + n, dev, n, cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(host, host + n, n) == 0);
  EXPECT(GetStats().pinned_copies == before.pinned_copies + 2);
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  return 0;
}

}  // namespace

int main() {
  g_stats = reinterpret_cast<StatsFn>(dlsym(RTLD_DEFAULT, "phosGetHostCopyStats"));
  if (g_stats == nullptr) {
    std::printf("host_memory: phosGetHostCopyStats not found: run this under phos\n");
    return 3;
  }
  cudaStream_t a, b;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  for (size_t n : {size_t{1}, size_t{4096}, size_t{64} << 20}) {
    if (int e = PinnedRoundTrip(n, a, b); e) return e;
  }
  if (int e = PostedD2HWithQuery(b); e) return e;
  if (int e = Registered(); e) return e;
  if (int e = PointerAttributes(); e) return e;
  if (int e = MappedMemory("mapped"); e) return e;
  if (int e = Copies2D(a); e) return e;
  if (int e = Memset2D(b); e) return e;
  if (int e = Errors(); e) return e;
  if (int e = ManyThreads(); e) return e;
  const Stats st = GetStats();
  std::printf("host_memory: %llu pinned copies (%llu bytes), %llu staged (%llu bytes), %llu segments\n",
              (unsigned long long)st.pinned_copies, (unsigned long long)st.pinned_bytes,
              (unsigned long long)st.staged_copies, (unsigned long long)st.staged_bytes,
              (unsigned long long)st.segments);
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  if (int e = AfterDeviceReset(); e) return e;
  if (int e = MappedMemory("mapped after a device reset"); e) return e;
  std::printf("host_memory: OK\n");
  return 0;
}
