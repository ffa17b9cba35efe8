// Choosing and creating a backend (`phos daemon --backend cuda|sim|auto`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace phos::backend {

enum class BackendKind { kAuto, kCuda, kSim };

/// Parses "auto" / "cuda" / "sim".
Status ParseBackendKind(const std::string& text, BackendKind* out);

/// The sim device model (docs/backends.md). Defaults model one H100.
struct SimOptions {
  int device_count = 1;
  /// Modelled device memory per device; allocations beyond it fail with
  /// OutOfMemory as on a real GPU. Host memory is only used when touched.
  std::uint64_t memory_bytes = 80ull << 30;
  /// Device virtual addresses live in [va_base, va_base + va_size). The range
  /// is fixed (not randomised) so a restore in another phosd can map buffers
  /// at the same addresses. The default lies in a region that is free in
  /// plain, AddressSanitizer and ThreadSanitizer processes on x86-64 Linux.
  std::uint64_t va_base = 0x7c0000000000ull;
  std::uint64_t va_size = 1ull << 40;
  /// Modelled host<->device link bandwidth in GB/s (10^9 bytes/s) per copy
  /// engine; 0 = unthrottled. H2D and D2H copies are throttled, D2D not.
  double link_gbps = 0.0;
  /// Kernels run each GPU thread alone (interp::LaunchOptions::
  /// thread_at_a_time: the interpreter's scheduler before lockstep warps,
  /// about ten times slower) instead of a warp's lanes together. A baseline
  /// for benchmarks (tests/bench/framework_kernel_bench.py) and a
  /// cross-check; results are the same.
  bool interp_thread_at_a_time = false;
  /// Copy engines: at most this many H2D/D2H copies run at once.
  int copy_engines = 2;
  /// Ops a stream holds queued before enqueueing more waits (0 = no bound).
  /// A GPU's launch queue is bounded too (the driver blocks cuLaunchKernel
  /// when its push buffer is full); the sim's kernels run 10^3 times slower,
  /// so its queue is short: a quiesce (which waits for queued work) then
  /// stalls an app that launches ahead of the GPU for a few kernels, not
  /// for everything it managed to queue.
  int stream_depth = 8;
  /// Whether a restore may ask where a module's variables go
  /// (Context::GetModuleGlobalsBase / LoadModuleWithGlobalsAt). false models
  /// the cuda backend, whose driver places them itself: tests of a restore
  /// that must cope with variables elsewhere run on the sim with it.
  bool places_module_variables = true;
  /// Where communicators reach their ranks on other phosds (phosd's
  /// --etcd; daemon/cluster/). Not owned; must outlive the backend. Null:
  /// every rank of a communicator is a session of this phosd.
  CollectiveFabric* fabric = nullptr;
};

struct CudaOptions {
  /// The driver library to dlopen.
  std::string driver_library = "libcuda.so.1";
  /// cuBLAS, for the handle prepared with every context (docs/backends.md "Context pool"). Empty =
  /// the soname of the toolkit phos was built with (libcublas.so.13 for CUDA
  /// 13); "none" = do not load it. If it cannot be loaded the backend logs
  /// that once and contexts have no cuBLAS handle.
  std::string cublas_library;
  /// NCCL, for the collectives of the apps' communicators (docs/backends.md
  /// "Collectives on the cuda backend"). Empty = libnccl.so.2; "none" = do
  /// not load it (ncclCommInitRank is then refused, naming why).
  std::string nccl_library;
  /// CUDA_MODULE_LOADING for phosd's driver: "eager" (default) loads every
  /// kernel of a module when the module is loaded; "lazy" on first use;
  /// "" leaves the environment alone. Eager because phosd runs the kernels
  /// of apps that may spin waiting for another kernel: with lazy loading the
  /// driver may synchronise the context to load a kernel on its first
  /// launch, which deadlocks behind a spinning one (CUDA programming guide,
  /// "Lazy Loading": possible issues). A CUDA_MODULE_LOADING already in
  /// phosd's environment wins. docs/backends.md "Module loading".
  std::string module_loading = "eager";
};

struct BackendOptions {
  BackendKind kind = BackendKind::kAuto;
  SimOptions sim;
  CudaOptions cuda;
};

Status CreateSimBackend(const SimOptions& options, std::unique_ptr<Backend>* out);
/// Unavailable (with the reason: no libcuda, cuInit failed, no GPU) when
/// there is no usable driver or GPU.
Status CreateCudaBackend(const CudaOptions& options, std::unique_ptr<Backend>* out);

/// Creates the backend `options.kind` asks for. For kAuto: cuda when a driver
/// and a GPU are present, else sim; `*why` says which was chosen and why.
Status CreateBackend(const BackendOptions& options, std::unique_ptr<Backend>* out,
                     std::string* why);

}  // namespace phos::backend
