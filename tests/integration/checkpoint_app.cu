// A CUDA program whose device state the checkpoint/restore integration test
// (checkpoint_restore_test.cc) controls step by step.
//
// State: `state` (256 Ki uint32, advanced by a kernel each step), `big`
// (6 MiB: more than one 4 MiB image chunk, rewritten from the host each
// step), `scratch` (64 KiB, constant pattern; the test frees it after a
// checkpoint so the restore must re-create it at its old address), and
// the __device__ variable `g_steps` (module global, counts kernel steps),
// and `g_kernel_steps`, which counts them too but which the host never
// names: only a kernel reads it (into `kernel_steps_out`), so a
// checkpoint must save module variables without being told their names.
//
// Commands come as files CTL/cmd-N (N = 0, 1, ...; the content is the
// command), so the test drives it without a terminal:
//   step         one step; prints "step K checksum 0x.. steps G"
//   graphstep    the same step as one launch of a CUDA graph (captured at
//                first use); prints what `step` prints
//   condstep     the same step inside a conditional graph node: a graph
//                (made at first use) whose first kernel sets an if node's
//                value from a device flag (cudaGraphSetConditional) and
//                whose if body is the step's kernel; prints what `step`
//                prints
//   texstep      the same step, the kernel reading `state` through a
//                texture object and also storing through a surface object
//                of a CUDA array (both made at first use, kept: a restore
//                must bring their handles back); prints what `step` prints
//   vmmstep      the same step, and the same again on `vstate`, an array
//                in memory the app maps itself with the driver's
//                virtual-memory API (cuMemAddressReserve, cuMemCreate,
//                cuMemMap, cuMemSetAccess, taken through
//                cudaGetDriverEntryPointByVersion as PyTorch's expandable
//                segments take them; made at first use): three 2 MiB
//                mappings back to back; `vstate` straddles the first
//                boundary (the kernel gets a pointer into the first mapping
//                and writes the second), and `vbig` (1 MiB, rewritten from
//                the host each step) the second. From then on the
//                checksums cover them too
//   print        prints "state checksum 0x.. steps G verify-step S
//                verify-big B verify-vmm V": S / B are the steps whose CPU
//                references match `state` / `big` on the device (or -1);
//                V / W the vmmsteps whose references match vstate / vbig
//                ("verify-vmm V verify-vbig W"; -1: none, or no vmmstep
//                yet)
//   freescratch  cudaFree(scratch)
//   checkscratch prints "scratch OK" / "scratch BAD" (reads the old pointer)
//   alloc        allocates one more 1 MiB buffer (kept)
//   lock         takes an exclusive flock on CTL/lock and holds it; prints
//                "locked" (CRIU dumps it only with --file-locks)
//   fault        a kernel writes to an invalid address (sticky error)
//   quit
// Every command ends with "ack N".
#include <cuda.h>  // the virtual-memory API's types (its entry points come through the runtime)
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define PHOS_PROGRAM_NAME "checkpoint_app"
#include "host_pid.h"
#include "program_checks.h"

constexpr int kN = 256 * 1024;
constexpr size_t kBigBytes = 6u << 20;
constexpr size_t kScratchBytes = 64u << 10;

__device__ unsigned int g_steps;
__device__ unsigned int g_kernel_steps;  // never named by the host (see above)

__global__ void ReadKernelSteps(unsigned int* out) { *out = g_kernel_steps; }

__global__ void Step(uint32_t* s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) s[i] = s[i] * 1664525u + 1013904223u + static_cast<uint32_t>(i);
  if (i == 0) {
    g_steps += 1;
    g_kernel_steps += 1;
  }
}

// Step's update without the step count (the vmmstep's second array).
__global__ void VStep(uint32_t* s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) s[i] = s[i] * 1664525u + 1013904223u + static_cast<uint32_t>(i);
}

// Step, reading the old value through a texture of `s` and leaving a mark
// in a surface (a dead handle would fail the kernel: a sticky error).
__global__ void TexStep(cudaTextureObject_t t, cudaSurfaceObject_t marks, uint32_t* s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) s[i] = tex1Dfetch<unsigned int>(t, i) * 1664525u + 1013904223u + static_cast<uint32_t>(i);
  if (i < 64) surf1Dwrite(static_cast<unsigned int>(i), marks, i * 4);
  if (i == 0) {
    g_steps += 1;
    g_kernel_steps += 1;
  }
}

__global__ void SetIfPositive(cudaGraphConditionalHandle h, const int* flag) {
  if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(h, *flag > 0 ? 1u : 0u);
}

__global__ void Fault(uint32_t* bad) { *bad = 1; }

static uint32_t StepValue(uint32_t v, int i) { return v * 1664525u + 1013904223u + static_cast<uint32_t>(i); }

static uint64_t Fnv(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void FillBig(std::vector<unsigned char>& big, int step) {
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<unsigned char>((i * 31 + step * 7) & 0xFF);
}

// ---- "vmmstep": memory the app maps itself
constexpr int kV = 64 * 1024;              // vstate: 256 KiB of uint32
constexpr size_t kVBigBytes = 1u << 20;    // vbig

static void FillVBig(std::vector<unsigned char>& v, int step) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>((i * 17 + step * 11 + 3) & 0xFF);
}

#define CU_CHECK(call)                                                                       \
  do {                                                                                       \
    CUresult _r = (call);                                                                    \
    if (_r != CUDA_SUCCESS) {                                                                \
      std::printf("checkpoint_app: %s failed: CUresult %d (line %d)\n", #call, (int)_r, __LINE__); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

template <typename F>
static F DriverEntry(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
    std::printf("checkpoint_app: no driver entry point %s (%s)\n", name, cudaGetErrorName(e));
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

struct AppMapped {
  uint32_t* vstate = nullptr;     // straddles mappings 0 and 1
  unsigned char* vbig = nullptr;  // straddles mappings 1 and 2
};

// Reserves 8 granules, maps three 2 MiB allocations back to back (the
// middle one's handle released at once: the mapping keeps its memory), and
// lets the GPU read and write them.
static AppMapped MapAppMemory() {
  auto reserve = DriverEntry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  auto granularity = DriverEntry<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  auto create = DriverEntry<decltype(&cuMemCreate)>("cuMemCreate");
  auto map = DriverEntry<decltype(&cuMemMap)>("cuMemMap");
  auto release = DriverEntry<decltype(&cuMemRelease)>("cuMemRelease");
  auto set_access = DriverEntry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  CU_CHECK(granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CUdeviceptr base = 0;
  CU_CHECK(reserve(&base, 8 * g, 0, 0, 0));
  for (int i = 0; i < 3; ++i) {
    CUmemGenericAllocationHandle h = 0;
    CU_CHECK(create(&h, g, &prop, 0));
    CU_CHECK(map(base + i * g, g, 0, h, 0));
    if (i == 1) CU_CHECK(release(h));
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(set_access(base, 3 * g, &access, 1));
  AppMapped m;
  m.vstate = reinterpret_cast<uint32_t*>(base + g - kV * sizeof(uint32_t) / 2);
  m.vbig = reinterpret_cast<unsigned char*>(base + 2 * g - kVBigBytes / 2);
  return m;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf("usage: checkpoint_app CTL_DIR\n");
    return 2;
  }
  const std::string ctl = argv[1];
  // Load the module (its __device__ variable) before any cudaMalloc: a
  // restore into a fresh context (whole-process restore) reloads modules
  // first, and the sim places module variables first-fit, so g_steps gets
  // its old address back only if it was placed first here too
  // (docs/criu.md "Limits").
  unsigned int zero = 0;
  CHECK(cudaMemcpyToSymbol(g_steps, &zero, sizeof zero));
  uint32_t* state = nullptr;
  unsigned char* big = nullptr;
  unsigned char* scratch = nullptr;
  unsigned int* kernel_steps_out = nullptr;  // where ReadKernelSteps puts g_kernel_steps
  CHECK(cudaMalloc(&state, kN * sizeof(uint32_t)));
  CHECK(cudaMalloc(&big, kBigBytes));
  CHECK(cudaMalloc(&scratch, kScratchBytes));
  CHECK(cudaMalloc(&kernel_steps_out, sizeof(unsigned int)));
  std::vector<uint32_t> init(kN);
  for (int i = 0; i < kN; ++i) init[i] = static_cast<uint32_t>(i * 2654435761u);
  CHECK(cudaMemcpy(state, init.data(), kN * sizeof(uint32_t), cudaMemcpyHostToDevice));
  std::vector<unsigned char> host_big(kBigBytes);
  FillBig(host_big, 0);
  CHECK(cudaMemcpy(big, host_big.data(), kBigBytes, cudaMemcpyHostToDevice));
  std::vector<unsigned char> pattern(kScratchBytes);
  for (size_t i = 0; i < kScratchBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 13 + 5);
  CHECK(cudaMemcpy(scratch, pattern.data(), kScratchBytes, cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  std::printf("checkpoint_app: ready pid %d\n", static_cast<int>(HostPid()));
  std::fflush(stdout);

  int step = 0;
  cudaGraphExec_t graph_exec = nullptr;  // "graphstep": captured at first use
  cudaGraphExec_t cond_exec = nullptr;   // "condstep": built at first use
  int* cond_flag = nullptr;
  cudaTextureObject_t state_tex = 0;      // "texstep": made at first use
  cudaSurfaceObject_t marks_surf = 0;
  cudaStream_t graph_stream = nullptr;
  unsigned char* pinned_big = nullptr;
  std::vector<uint32_t> host_state(kN);
  std::vector<void*> extra;
  AppMapped vmm;  // "vmmstep": mapped at first use
  std::vector<uint32_t> vinit(kV);
  for (int i = 0; i < kV; ++i) vinit[i] = static_cast<uint32_t>(i * 40503u + 7u);
  std::vector<uint32_t> host_vstate(kV);
  std::vector<unsigned char> host_vbig(kVBigBytes);
  int vsteps = 0;
  for (int n = 0;; ++n) {
    const std::string path = ctl + "/cmd-" + std::to_string(n);
    std::string cmd;
    for (int waited = 0;; ++waited) {
      FILE* f = std::fopen(path.c_str(), "r");
      if (f != nullptr) {
        char buf[64] = {0};
        size_t got = std::fread(buf, 1, sizeof buf - 1, f);
        std::fclose(f);
        cmd.assign(buf, got);
        while (!cmd.empty() && (cmd.back() == '\n' || cmd.back() == ' ')) cmd.pop_back();
        if (!cmd.empty()) break;
      }
      if (waited > 60 * 200) {
        std::printf("checkpoint_app: no command %d for 60 s, exiting\n", n);
        return 3;
      }
      usleep(5000);
    }
    if (cmd == "quit") {
      std::printf("ack %d\n", n);
      std::fflush(stdout);
      break;
    }
    if (cmd == "step") {
      ++step;
      Step<<<(kN + 255) / 256, 256>>>(state, kN);
      CHECK(cudaGetLastError());
      FillBig(host_big, step);
      CHECK(cudaMemcpy(big, host_big.data(), kBigBytes, cudaMemcpyHostToDevice));
      CHECK(cudaDeviceSynchronize());
    } else if (cmd == "graphstep") {
      // The same step as one launch of a graph captured at first use: the
      // kernel, then `big` from pinned memory the host fills before each
      // launch (the copy node reads it when the graph runs).
      ++step;
      if (graph_exec == nullptr) {
        CHECK(cudaStreamCreateWithFlags(&graph_stream, cudaStreamNonBlocking));
        CHECK(cudaMallocHost(&pinned_big, kBigBytes));
        cudaGraph_t graph = nullptr;
        CHECK(cudaStreamBeginCapture(graph_stream, cudaStreamCaptureModeGlobal));
        Step<<<(kN + 255) / 256, 256, 0, graph_stream>>>(state, kN);
        CHECK(cudaMemcpyAsync(big, pinned_big, kBigBytes, cudaMemcpyHostToDevice, graph_stream));
        CHECK(cudaStreamEndCapture(graph_stream, &graph));
        CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
        CHECK(cudaGraphDestroy(graph));
      }
      FillBig(host_big, step);
      std::memcpy(pinned_big, host_big.data(), kBigBytes);
      CHECK(cudaGraphLaunch(graph_exec, graph_stream));
      CHECK(cudaStreamSynchronize(graph_stream));
    }
    if (cmd == "condstep") {
      ++step;
      if (cond_exec == nullptr) {
        CHECK(cudaMalloc(&cond_flag, sizeof(int)));
        const int one = 1;
        CHECK(cudaMemcpy(cond_flag, &one, sizeof one, cudaMemcpyHostToDevice));
        cudaGraph_t g = nullptr;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle h = 0;
        CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
        cudaKernelNodeParams kp{};
        void* set_args[] = {&h, &cond_flag};
        kp.func = reinterpret_cast<void*>(SetIfPositive);
        kp.gridDim = dim3(1);
        kp.blockDim = dim3(32);
        kp.kernelParams = set_args;
        cudaGraphNode_t set = nullptr, cond = nullptr, body_step = nullptr;
        CHECK(cudaGraphAddKernelNode(&set, g, nullptr, 0, &kp));
        cudaGraphNodeParams cp{};
        cp.type = cudaGraphNodeTypeConditional;
        cp.conditional.handle = h;
        cp.conditional.type = cudaGraphCondTypeIf;
        cp.conditional.size = 1;
        CHECK(cudaGraphAddNode(&cond, g, &set, nullptr, 1, &cp));
        int n = kN;
        void* step_args[] = {&state, &n};
        kp.func = reinterpret_cast<void*>(Step);
        kp.gridDim = dim3((kN + 255) / 256);
        kp.blockDim = dim3(256);
        kp.kernelParams = step_args;
        CHECK(cudaGraphAddKernelNode(&body_step, cp.conditional.phGraph_out[0], nullptr, 0, &kp));
        CHECK(cudaGraphInstantiate(&cond_exec, g, 0));
        CHECK(cudaGraphDestroy(g));
      }
      CHECK(cudaGraphLaunch(cond_exec, 0));
      FillBig(host_big, step);
      CHECK(cudaMemcpy(big, host_big.data(), kBigBytes, cudaMemcpyHostToDevice));
      CHECK(cudaDeviceSynchronize());
    }
    if (cmd == "texstep") {
      ++step;
      if (state_tex == 0) {
        cudaResourceDesc res{};
        res.resType = cudaResourceTypeLinear;
        res.res.linear.devPtr = state;
        res.res.linear.desc = cudaCreateChannelDesc<unsigned int>();
        res.res.linear.sizeInBytes = kN * sizeof(uint32_t);
        cudaTextureDesc td{};
        td.readMode = cudaReadModeElementType;
        CHECK(cudaCreateTextureObject(&state_tex, &res, &td, nullptr));
        cudaChannelFormatDesc fmt = cudaCreateChannelDesc<unsigned int>();
        cudaArray_t marks = nullptr;
        CHECK(cudaMallocArray(&marks, &fmt, 64, 0, cudaArraySurfaceLoadStore));
        cudaResourceDesc sres{};
        sres.resType = cudaResourceTypeArray;
        sres.res.array.array = marks;
        CHECK(cudaCreateSurfaceObject(&marks_surf, &sres));
      }
      TexStep<<<(kN + 255) / 256, 256>>>(state_tex, marks_surf, state, kN);
      CHECK(cudaGetLastError());
      FillBig(host_big, step);
      CHECK(cudaMemcpy(big, host_big.data(), kBigBytes, cudaMemcpyHostToDevice));
      CHECK(cudaDeviceSynchronize());
    }
    if (cmd == "vmmstep") {
      ++step;
      ++vsteps;
      if (vmm.vstate == nullptr) {
        vmm = MapAppMemory();
        CHECK(cudaMemcpy(vmm.vstate, vinit.data(), kV * sizeof(uint32_t), cudaMemcpyHostToDevice));
      }
      Step<<<(kN + 255) / 256, 256>>>(state, kN);
      VStep<<<(kV + 255) / 256, 256>>>(vmm.vstate, kV);  // writes both mappings through a pointer into the first
      CHECK(cudaGetLastError());
      FillBig(host_big, step);
      CHECK(cudaMemcpy(big, host_big.data(), kBigBytes, cudaMemcpyHostToDevice));
      FillVBig(host_vbig, vsteps);
      CHECK(cudaMemcpy(vmm.vbig, host_vbig.data(), kVBigBytes, cudaMemcpyHostToDevice));  // one copy, two mappings
      CHECK(cudaDeviceSynchronize());
    }
    if (cmd == "step" || cmd == "graphstep" || cmd == "condstep" || cmd == "texstep" || cmd == "vmmstep" ||
        cmd == "print") {
      CHECK(cudaMemcpy(host_state.data(), state, kN * sizeof(uint32_t), cudaMemcpyDeviceToHost));
      std::vector<unsigned char> got_big(kBigBytes);
      CHECK(cudaMemcpy(got_big.data(), big, kBigBytes, cudaMemcpyDeviceToHost));
      unsigned int steps = 0;
      CHECK(cudaMemcpyFromSymbol(&steps, g_steps, sizeof steps));
      unsigned int kernel_steps = 0;
      ReadKernelSteps<<<1, 1>>>(kernel_steps_out);
      CHECK(cudaMemcpy(&kernel_steps, kernel_steps_out, sizeof kernel_steps, cudaMemcpyDeviceToHost));
      uint64_t sum = Fnv(got_big.data(), got_big.size(), Fnv(host_state.data(), kN * sizeof(uint32_t)));
      std::vector<unsigned char> got_vbig(kVBigBytes);
      if (vmm.vstate != nullptr) {
        CHECK(cudaMemcpy(host_vstate.data(), vmm.vstate, kV * sizeof(uint32_t), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(got_vbig.data(), vmm.vbig, kVBigBytes, cudaMemcpyDeviceToHost));
        sum = Fnv(got_vbig.data(), kVBigBytes, Fnv(host_vstate.data(), kV * sizeof(uint32_t), sum));
      }
      if (cmd != "print") {
        std::printf("step %d checksum 0x%016llx steps %u ksteps %u\n", step, static_cast<unsigned long long>(sum),
                    steps, kernel_steps);
      } else {
        // Which step's CPU reference equals the device state, and which
        // step's pattern `big` holds (-1: none). After an in-place GPU
        // restore the host's step counter is not rolled back (only CRIU
        // would do that), so the two are reported separately.
        int match = -1, match_big = -1;
        std::vector<uint32_t> ref = init;
        std::vector<unsigned char> ref_big(kBigBytes);
        for (int k = 0; k <= step + 1; ++k) {
          if (k > 0) {
            for (int i = 0; i < kN; ++i) ref[i] = StepValue(ref[i], i);
          }
          if (match < 0 && std::memcmp(ref.data(), host_state.data(), kN * sizeof(uint32_t)) == 0) match = k;
          FillBig(ref_big, k);
          if (match_big < 0 && std::memcmp(ref_big.data(), got_big.data(), kBigBytes) == 0) match_big = k;
        }
        int match_vmm = -1, match_vbig = -1;
        if (vmm.vstate != nullptr) {
          std::vector<uint32_t> vref = vinit;
          std::vector<unsigned char> vref_big(kVBigBytes);
          for (int k = 1; k <= vsteps + 1; ++k) {
            for (int i = 0; i < kV; ++i) vref[i] = StepValue(vref[i], i);
            FillVBig(vref_big, k);
            if (match_vmm < 0 && vref == host_vstate) match_vmm = k;
            if (match_vbig < 0 && vref_big == got_vbig) match_vbig = k;
          }
        }
        std::printf("state checksum 0x%016llx steps %u ksteps %u verify-step %d verify-big %d verify-vmm %d "
                    "verify-vbig %d\n",
                    static_cast<unsigned long long>(sum), steps, kernel_steps, match, match_big, match_vmm, match_vbig);
      }
    } else if (cmd == "freescratch") {
      CHECK(cudaFree(scratch));
    } else if (cmd == "checkscratch") {
      std::vector<unsigned char> got(kScratchBytes);
      cudaError_t e = cudaMemcpy(got.data(), scratch, kScratchBytes, cudaMemcpyDeviceToHost);
      std::printf("scratch %s\n", e == cudaSuccess && got == pattern ? "OK" : "BAD");
    } else if (cmd == "fault") {
      Fault<<<1, 1>>>(reinterpret_cast<uint32_t*>(16));
      cudaError_t e = cudaDeviceSynchronize();
      std::printf("fault: %s\n", cudaGetErrorString(e));
    } else if (cmd == "lock") {
      const int fd = open((ctl + "/lock").c_str(), O_RDWR | O_CREAT, 0600);  // held until exit
      std::printf("%s\n", fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 ? "locked" : "lock failed");
    } else if (cmd == "alloc") {
      void* p = nullptr;
      CHECK(cudaMalloc(&p, 1u << 20));
      extra.push_back(p);
    } else if (cmd != "step") {
      std::printf("checkpoint_app: unknown command '%s'\n", cmd.c_str());
    }
    std::printf("ack %d\n", n);
    std::fflush(stdout);
  }
  std::printf("checkpoint_app: OK\n");
  return 0;
}
