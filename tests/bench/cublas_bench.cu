// cuBLAS forwarding cost (docs/benchmarks.md "cuBLAS through phosd"): a
// program linked with -lcublas, run under `phos run` by cublas_bench.sh.
//
// For each size n it times cublasSgemm (n x n x n, posted, then one
// cudaDeviceSynchronize per batch of calls) and, as the baseline in the
// same process, the same product by OpenBLAS's cblas_sgemm on the host,
// single-threaded as phosd's sim runs it. On the sim the difference is
// what forwarding costs (the ring record, phosd's checks and access set,
// stream order); on a GPU run natively and under phos for the ratio the
// issue asks (goal: >= 0.95x at 1024 and above).
//
//   cublas_bench [REPS=5] [MAX_N=1024] [--no-host]
//        sizes 64, 256, 512, 1024, 2048, 4096 up to MAX_N; --no-host skips
//        the OpenBLAS baseline (on a GPU machine it only costs time: 5 s per
//        4096 product on one core)
//
// Output: one line per size, "sgemm n=N phos_us=T blas_us=B ratio=R", and
// "posted_calls_per_s=X" for 8x8 GEMMs issued back to back. phos_us is the
// cuBLAS time whether or not the program runs under phos (run natively it
// is the GPU baseline). OpenBLAS is loaded at run time, not linked: the GPU
// bundle (scripts/gpu-bundle.sh) carries this program without OpenBLAS's
// 36 MB; where libopenblas.so.0 is missing the host baseline is left out
// (blas_us=-1 ratio=-1) and says so on stderr.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// cblas_sgemm's signature with CBLAS's enum values as ints (column major 102,
// no transpose 111), so that no cblas.h is needed to build.
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using SetThreads = void (*)(int);
constexpr int kCblasColMajor = 102;
constexpr int kCblasNoTrans = 111;

double Now() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define OK(x)                                                        \
  do {                                                               \
    if ((x) != 0) {                                                  \
      std::fprintf(stderr, "cublas_bench: %s failed\n", #x);         \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  const int max_n = argc > 2 ? std::atoi(argv[2]) : 1024;
  const bool host_baseline = !(argc > 3 && std::string(argv[3]) == "--no-host");
  CblasSgemm cblas_sgemm = nullptr;
  if (void* blas = host_baseline ? dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL) : nullptr) {
    cblas_sgemm = reinterpret_cast<CblasSgemm>(dlsym(blas, "cblas_sgemm"));
    if (auto set_threads = reinterpret_cast<SetThreads>(dlsym(blas, "openblas_set_num_threads"))) set_threads(1);
  }
  if (cblas_sgemm == nullptr && host_baseline) {
    std::fprintf(stderr, "cublas_bench: no libopenblas.so.0 here: no host baseline (blas_us=-1)\n");
  }
  cublasHandle_t h;
  OK(cublasCreate(&h));
  const float alpha = 1.0f, beta = 0.0f;
  for (int n : {64, 256, 512, 1024, 2048, 4096}) {
    if (n > max_n) break;
    const size_t elems = static_cast<size_t>(n) * n;
    std::vector<float> a(elems, 0.5f), b(elems, 0.25f), c(elems);
    float *da, *db, *dc;
    OK(cudaMalloc(&da, elems * 4));
    OK(cudaMalloc(&db, elems * 4));
    OK(cudaMalloc(&dc, elems * 4));
    OK(cudaMemcpy(da, a.data(), elems * 4, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(db, b.data(), elems * 4, cudaMemcpyHostToDevice));
    // cuBLAS calls per timed batch: enough that one synchronisation is a
    // small part of it. The host baseline gets fewer (one core).
    const int calls = n <= 256 ? 20 : 10;
    const int blas_calls = n <= 256 ? 20 : n <= 512 ? 4 : 1;
    double best_phos = 1e30, best_blas = 1e30;
    for (int r = 0; r < reps; ++r) {
      OK(cudaDeviceSynchronize());
      double t0 = Now();
      for (int i = 0; i < calls; ++i) OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, da, n, db, n, &beta, dc, n));
      OK(cudaDeviceSynchronize());
      best_phos = std::min(best_phos, (Now() - t0) / calls);
      if (cblas_sgemm == nullptr) continue;
      t0 = Now();
      for (int i = 0; i < blas_calls; ++i)
        cblas_sgemm(kCblasColMajor, kCblasNoTrans, kCblasNoTrans, n, n, n, alpha, a.data(), n, b.data(), n, beta, c.data(), n);
      best_blas = std::min(best_blas, (Now() - t0) / blas_calls);
    }
    if (cblas_sgemm == nullptr)
      std::printf("sgemm n=%d phos_us=%.1f blas_us=-1 ratio=-1\n", n, best_phos);
    else
      std::printf("sgemm n=%d phos_us=%.1f blas_us=%.1f ratio=%.3f\n", n, best_phos, best_blas, best_blas / best_phos);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  }
  // Per-call cost: tiny GEMMs posted back to back.
  float *d8;
  OK(cudaMalloc(&d8, 3 * 64 * 4));
  const int tiny = 20000;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    OK(cudaDeviceSynchronize());
    const double t0 = Now();
    for (int i = 0; i < tiny; ++i) OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &alpha, d8, 8, d8 + 64, 8, &beta, d8 + 128, 8));
    OK(cudaDeviceSynchronize());
    best = std::min(best, Now() - t0);
  }
  std::printf("posted_calls_per_s=%.0f (8x8x8 sgemm, issue to completion)\n", tiny / best * 1e6);
  OK(cublasDestroy(h));
  return 0;
}
