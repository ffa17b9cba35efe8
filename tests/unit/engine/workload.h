// A randomized, deterministic GPU workload for the C/R engine's
// consistency tests (engine_consistency_test.cc).
//
// Generate(options) turns a seed into a list of Steps; a WorkloadRunner
// issues them through a FakeApp (the wire protocol into a real Session on
// the sim backend). Every step is exactly ONE call the session's executor
// admits (Executor::admitted() grows by one per step), so "the device state
// after N admitted calls" is "the state after steps [0, N)" — which is how
// a test replays a run up to a checkpoint's admitted_at_capture.
//
// Determinism: the final device contents depend only on the seed, never on
// how the backend's streams interleave. The generator keeps the workload
// race-free: every buffer is OWNED by one stream and touched only by calls
// on that stream; a call touching a buffer owned elsewhere first moves it
// (event record on the old owner + stream wait event on the new one, two
// steps), unless nothing is pending on it (after a sync of its owner, a
// device sync or a cudaFree, which synchronises the device). The default
// stream (0) is never used: blocking-stream semantics of the legacy stream
// would add orderings the tests do not need.
//
// Addresses: the backend chooses them (and a fresh session of the same
// backend gets different ones), so the workload names buffers by
// ALLOCATION INDEX (the order of Malloc steps); the runner maps indices to
// the addresses its run got. Buffers hold data only, never pointers.
//
// Sizes are parameters (WorkloadOptions): the ThreadSanitizer build runs
// the same tests with small buffers and few steps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/wire.h"

namespace phos::session::testing {
class FakeApp;
}

namespace phos::engine::testing {

struct WorkloadOptions {
  std::uint64_t seed = 1;
  int buffers = 6;                          // live buffers at any time
  std::uint64_t min_bytes = 4u << 10;       // buffer sizes, log-uniform in [min, max]
  std::uint64_t max_bytes = 1u << 20;
  int streams = 3;                          // created streams (ids 1..streams), 2..4
  int events = 3;                           // created events (ids 1..events)
  int steps = 150;                          // random steps after the setup
  std::uint64_t max_copy_bytes = 128u << 10;  // largest H2D / memset / D2D of one step
  std::uint32_t max_kernel_elements = 8192;   // largest n of one launch
  /// Kernels of the nvcc-built tests/apps fatbins (vector_add, saxpy_loop,
  /// multi_stream's transform). The hand-written PTX module (saxpy + the
  /// global-bumping `bump`) is always used: it needs no nvcc.
  bool app_kernels = true;
  /// Launch `bump` (a kernel that updates a module global, __device__
  /// state outside every buffer) among the random steps.
  bool global_kernel = true;
  /// cuBLAS GEMMs (kBlasGemm, float, small sizes) among the launches: a
  /// library call whose access set comes from its specification.
  bool gemm = true;
  /// Percent of the kernel-launch share that are GEMMs (when `gemm`).
  int gemm_percent = 20;
};

enum class Op : std::uint8_t {
  kModuleLoad,       // id = module id, module = which
  kGetFunction,      // id = function id, module id in `module_id`, kernel = which
  kGetGlobal,        // the PTX module's phos_counter
  kStreamCreate,     // id
  kEventCreate,      // id
  kMalloc,           // alloc = the allocation it creates, bytes
  kFree,             // alloc
  kFreeAsync,        // alloc, stream (its owner): cudaFreeAsync, posted
  kH2D,              // alloc, offset, bytes, data_seed, sync, stream
  kMemset,           // alloc, offset, bytes (multiple of element_size), value, element_size, sync, stream
  kD2D,              // alloc (dst) + offset, src_alloc + src_offset, bytes, sync, stream
  kLaunch,           // kernel, args, stream
  kStreamSync,       // stream
  kDeviceSync,
  kEventRecord,      // id = event, stream
  kStreamWaitEvent,  // id = event, stream (the waiting one)
  kShareSegment,     // the shared pinned segment host functions' gates live in (setup, first step)
  kHostFunc,         // stream: a host function (kLaunchHostFunc), answered by the runner's thread
  kGemm,             // dst (C) = scalar * op(src: A) op(src2: B) + beta * C, float; m, n, k, trans; stream
};
const char* OpName(Op op);

/// The modules a workload loads (ModuleLoad's `module`).
enum class Module : std::uint8_t { kPtx, kVectorAdd, kSaxpyLoop, kMultiStream };
/// Kernels. Signatures:
///   kPtxSaxpy   saxpy(u64 x, u64 y, f32 a, u32 n)            y = a*x + y   (extern "C" PTX)
///   kPtxBump    bump()                                      ++phos_counter (one thread)
///   kVectorAdd  vector_add(const float* a, const float* b, float* c, int n)
///   kSaxpy      saxpy(float a, const float* x, float* y, int n)
///   kTransform  transform(const u32* in, u32* out, int n, u32 salt)
enum class Kernel : std::uint8_t { kPtxSaxpy, kPtxBump, kVectorAdd, kSaxpy, kTransform };
const char* KernelName(Kernel k);  // the (mangled) name GetFunction resolves

/// A buffer operand: allocation index + byte offset into it.
struct Operand {
  int alloc = -1;
  std::uint64_t offset = 0;
};

struct Step {
  Op op = Op::kDeviceSync;
  std::uint32_t stream = 0;  // virtual stream of the call (0 = default)
  std::uint32_t id = 0;      // module / function / stream / event id
  std::uint32_t module_id = 0;
  Module module = Module::kPtx;
  Kernel kernel = Kernel::kPtxSaxpy;
  Operand dst, src, src2;    // dst: written; src, src2: read
  std::uint64_t bytes = 0;
  std::uint32_t value = 0, element_size = 1;
  std::uint64_t data_seed = 0;
  bool sync = false;         // cudaMemcpy / cudaMemset (the app waits) vs *Async (posted)
  // Launches.
  std::uint32_t n = 0, salt = 0, grid = 1, block = 1;
  float scalar = 0.0f;
  // GEMMs (and n above): C is m x n, op(A) m x k, op(B) k x n, packed
  // (leading dimension = rows); trans bit 0: A transposed, bit 1: B.
  std::uint32_t m = 0, k = 0, trans = 0;
  float beta = 0.0f;

  std::string Describe() const;  // "step 17: kD2D stream 2 alloc 3+0x40 <- alloc 1+0x0, 4096 bytes"
};

struct Workload {
  WorkloadOptions options;
  std::vector<Step> steps;
  std::vector<std::uint64_t> alloc_bytes;  // by allocation index
  /// The allocation indices live after the first `k` steps, ascending.
  std::vector<int> LiveAfter(std::size_t k) const;
  /// Index of the first step after the setup (every buffer allocated and
  /// initialised, every module loaded).
  std::size_t setup_steps = 0;
  bool uses_global = false;  // the PTX module's phos_counter (kGetGlobal) is part of it
  /// "260 steps (setup 41): 12 H2D, 30 Launch, ..., 14 allocations".
  std::string Summary() const;
};

/// Seed -> steps. Deterministic: the same options give the same list.
Workload Generate(const WorkloadOptions& options);

/// The H2D source bytes of a step (a function of data_seed and bytes).
std::vector<std::byte> StepData(const Step& step);

/// Issues a workload's steps through one FakeApp. Not thread-safe: one
/// thread issues steps; others may read ptr() only after that thread was
/// joined.
class HostFunctionResponder;  // workload.cc

class WorkloadRunner {
 public:
  /// `apps_dir`: where the tests/apps fatbins are (needed when the
  /// workload's options.app_kernels).
  WorkloadRunner(const Workload& workload, session::testing::FakeApp* app, std::string apps_dir);
  ~WorkloadRunner();

  /// Issues step `i` (posted calls return once they are in the ring).
  /// False, with the reason in *why (the step and the wire error), if the
  /// call failed.
  bool Issue(std::size_t i, std::string* why);
  /// The device address allocation `alloc` got in this run (the latest
  /// Malloc step that created it), 0 before that.
  std::uint64_t ptr(int alloc) const { return alloc < static_cast<int>(ptrs_.size()) ? ptrs_[alloc] : 0; }
  /// Host functions whose gate phosd reached and the runner answered.
  std::uint64_t host_functions_answered() const;
  /// The PTX module's phos_counter address / bytes (0 before kGetGlobal).
  std::uint64_t global_ptr() const { return global_ptr_; }
  std::uint64_t global_bytes() const { return global_bytes_; }

  /// Waits for the device, then reads allocation `alloc` (its whole size)
  /// back with D2H calls. Not a workload step: call it only after the
  /// steps that matter (it adds admitted calls).
  bool ReadBack(int alloc, std::vector<std::byte>* out, std::string* why);
  bool ReadGlobal(std::vector<std::byte>* out, std::string* why);

 private:
  bool Check(wire::WireStatus w, std::size_t i, std::string* why);

  const Workload& w_;
  session::testing::FakeApp* app_;
  std::string apps_dir_;
  std::vector<std::uint64_t> ptrs_;
  std::uint64_t global_ptr_ = 0, global_bytes_ = 0;
  std::unique_ptr<HostFunctionResponder> host_functions_;  // from the kShareSegment step on
};

}  // namespace phos::engine::testing
