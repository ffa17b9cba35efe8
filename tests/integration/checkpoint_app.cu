// A CUDA program whose device state the checkpoint/restore integration test
// (checkpoint_restore_test.cc) controls step by step.
//
// State: `state` (256 Ki uint32, advanced by a kernel each step), `big`
// (6 MiB: more than one 4 MiB image chunk, rewritten from the host each
// step), `scratch` (64 KiB, constant pattern; the test frees it after a
// checkpoint so the restore must re-create it at its old address), and
// the __device__ variable `g_steps` (module global, counts kernel steps).
//
// Commands come as files CTL/cmd-N (N = 0, 1, ...; the content is the
// command), so the test drives it without a terminal:
//   step         one step; prints "step K checksum 0x.. steps G"
//   graphstep    the same step as one launch of a CUDA graph (captured at
//                first use); prints what `step` prints
//   texstep      the same step, the kernel reading `state` through a
//                texture object and also storing through a surface object
//                of a CUDA array (both made at first use, kept: a restore
//                must bring their handles back); prints what `step` prints
//   print        prints "state checksum 0x.. steps G verify-step S
//                verify-big B": S / B are the steps whose CPU references
//                match `state` / `big` on the device (or -1)
//   freescratch  cudaFree(scratch)
//   checkscratch prints "scratch OK" / "scratch BAD" (reads the old pointer)
//   alloc        allocates one more 1 MiB buffer (kept)
//   lock         takes an exclusive flock on CTL/lock and holds it; prints
//                "locked" (CRIU dumps it only with --file-locks)
//   fault        a kernel writes to an invalid address (sticky error)
//   quit
// Every command ends with "ack N".
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

__global__ void Step(uint32_t* s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) s[i] = s[i] * 1664525u + 1013904223u + static_cast<uint32_t>(i);
  if (i == 0) g_steps += 1;
}

// Step, reading the old value through a texture of `s` and leaving a mark
// in a surface (a dead handle would fail the kernel: a sticky error).
__global__ void TexStep(cudaTextureObject_t t, cudaSurfaceObject_t marks, uint32_t* s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) s[i] = tex1Dfetch<unsigned int>(t, i) * 1664525u + 1013904223u + static_cast<uint32_t>(i);
  if (i < 64) surf1Dwrite(static_cast<unsigned int>(i), marks, i * 4);
  if (i == 0) g_steps += 1;
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
  CHECK(cudaMalloc(&state, kN * sizeof(uint32_t)));
  CHECK(cudaMalloc(&big, kBigBytes));
  CHECK(cudaMalloc(&scratch, kScratchBytes));
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
  cudaTextureObject_t state_tex = 0;      // "texstep": made at first use
  cudaSurfaceObject_t marks_surf = 0;
  cudaStream_t graph_stream = nullptr;
  unsigned char* pinned_big = nullptr;
  std::vector<uint32_t> host_state(kN);
  std::vector<void*> extra;
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
    if (cmd == "step" || cmd == "graphstep" || cmd == "texstep" || cmd == "print") {
      CHECK(cudaMemcpy(host_state.data(), state, kN * sizeof(uint32_t), cudaMemcpyDeviceToHost));
      std::vector<unsigned char> got_big(kBigBytes);
      CHECK(cudaMemcpy(got_big.data(), big, kBigBytes, cudaMemcpyDeviceToHost));
      unsigned int steps = 0;
      CHECK(cudaMemcpyFromSymbol(&steps, g_steps, sizeof steps));
      const uint64_t sum = Fnv(got_big.data(), got_big.size(), Fnv(host_state.data(), kN * sizeof(uint32_t)));
      if (cmd != "print") {
        std::printf("step %d checksum 0x%016llx steps %u\n", step, static_cast<unsigned long long>(sum), steps);
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
        std::printf("state checksum 0x%016llx steps %u verify-step %d verify-big %d\n",
                    static_cast<unsigned long long>(sum), steps, match, match_big);
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
