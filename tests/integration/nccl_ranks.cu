// One rank of an NCCL job under phos (docs/interposer.md "NCCL"):
//   nccl_ranks collectives RANK NRANKS IDFILE   every collective, operator
//       and type against a CPU reference, a Send/Recv ring in a group,
//       AlltoAll, Gather and Scatter, CommSplit, CommShrink, InitRankScalable with
//       registered buffers and a window, and a
//       small data-parallel training loop (gradient kernel, all-reduce,
//       optimizer kernel), then a step and a group captured into a CUDA
//       graph launched 4 times; prints "rank R: OK"
//   nccl_ranks dies RANK NRANKS IDFILE          rank 1 exits after the
//       communicator formed; rank 0's all-reduce then fails with NCCL's
//       ncclRemoteError (prints "rank 0: remote error"), it does not hang
//   nccl_ranks hold RANK NRANKS IDFILE          forms the communicator,
//       prints "rank R: holding", waits for IDFILE.go, then ends cleanly
//   nccl_ranks train RANK NRANKS IDFILE         a longer data-parallel run
//       (1500 steps of: an input kernel, a cuBLAS GEMM, a gradient kernel
//       using it, an all-reduce, an optimizer kernel; rank 1 slower than
//       rank 0, so their collective counts differ at any moment) for job
//       checkpoints; every 10 steps an all-reduce on a split communicator
//       (even / odd ranks) checked, and "rank R: step N" printed;
//       "rank R: trained checksum C OK" when its
//       parameters match the CPU reference
//   nccl_ranks pipeline RANK NRANKS IDFILE      a pipeline of NRANKS stages
//       over Send/Recv (600 steps: stage 0 makes the input, each stage
//       receives from the one before, computes, sends to the next; the last
//       accumulates); prints "rank R: step N" every 10 steps and, on the last
//       stage, "rank R: pipeline checksum C OK" when it matches the CPU
//   nccl_ranks devices                          what the process sees of the
//       GPUs: "devices: COUNT busid BUS ..." of each visible one
// Rank 0 writes the unique id to IDFILE (through a rename), the others read
// it, as torchrun's store passes it. Rank r runs on GPU r % count.
#define PHOS_PROGRAM_NAME "nccl_ranks"
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "program_checks.h"

#define NCHECK(x)                                                                           \
  do {                                                                                      \
    ncclResult_t nccl_r_ = (x);                                                             \
    if (nccl_r_ != ncclSuccess) PHOS_CHECK_FAIL(2, "%s failed: %s (%s)", #x, ncclGetErrorString(nccl_r_), \
                                                ncclGetLastError(nullptr));                \
  } while (0)

namespace {

int g_rank = 0, g_nranks = 1;
ncclUniqueId g_id;  // the job's (main)

__global__ void Gradient(const float* params, float* grad, int n, int rank, int step) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  // Small integers: sums are exact in float, so every run gives these bits.
  if (i < n) grad[i] = static_cast<float>((i + rank * 3 + step) % 7) - 3.0f + 0.0f * params[i];
}

__global__ void Sgd(float* params, const float* grad, int n, float lr) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) params[i] -= lr * grad[i];
}

// The value rank r contributes at element i (exact in every type used).
double Input(int r, size_t i) { return static_cast<double>((i * 7 + r * 5) % 11) - 4.0; }

template <typename T>
T From(double v) {
  // Integers wrap as in the type (a negative input in an unsigned type).
  if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<int64_t>(v));
  return static_cast<T>(v);
}
template <>
__half From<__half>(double v) { return __float2half(static_cast<float>(v)); }
template <>
__nv_bfloat16 From<__nv_bfloat16>(double v) { return __float2bfloat16(static_cast<float>(v)); }
template <typename T>
double To(T v) { return static_cast<double>(v); }
template <>
double To<__half>(__half v) { return __half2float(v); }
template <>
double To<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// The reduction over ranks of element i, in T's arithmetic for integers.
template <typename T>
double ExpectedIn(ncclRedOp_t op, size_t i) {
  if constexpr (std::is_integral_v<T>) {
    T acc = From<T>(Input(0, i));
    for (int r = 1; r < g_nranks; ++r) {
      const T v = From<T>(Input(r, i));
      switch (op) {
        case ncclProd: acc = static_cast<T>(acc * v); break;
        case ncclMax: acc = std::max(acc, v); break;
        case ncclMin: acc = std::min(acc, v); break;
        default: acc = static_cast<T>(acc + v); break;
      }
    }
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(g_nranks));
    return static_cast<double>(acc);
  }
  return 0;
}

double Expected(ncclRedOp_t op, size_t i, bool integral) {
  double acc = Input(0, i);
  for (int r = 1; r < g_nranks; ++r) {
    const double v = Input(r, i);
    switch (op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  if (op == ncclAvg) acc = integral ? std::trunc(acc / g_nranks) : acc / g_nranks;
  return acc;
}

template <typename T>
int AllReduceCase(ncclComm_t comm, cudaStream_t s, ncclDataType_t type, ncclRedOp_t op, bool integral) {
  const size_t n = 1000;
  std::vector<T> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = From<T>(Input(g_rank, i));
  T *send = nullptr, *recv = nullptr;
  CHECK(cudaMalloc(&send, n * sizeof(T)));
  CHECK(cudaMalloc(&recv, n * sizeof(T)));
  CHECK(cudaMemcpy(send, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  NCHECK(ncclAllReduce(send, recv, n, type, op, comm, s));
  // In place as well.
  NCHECK(ncclAllReduce(send, send, n, type, op, comm, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<T> out(n), in_place(n);
  CHECK(cudaMemcpy(out.data(), recv, n * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(in_place.data(), send, n * sizeof(T), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    const double want = integral ? ExpectedIn<T>(op, i) : To<T>(From<T>(Expected(op, i, integral)));
    if (To<T>(out[i]) != want || To<T>(in_place[i]) != want) {
      PHOS_CHECK_FAIL(1, "AllReduce type %d op %d: element %zu is %g (in place %g), want %g", type, op, i,
                      To<T>(out[i]), To<T>(in_place[i]), want);
    }
  }
  CHECK(cudaFree(send));
  CHECK(cudaFree(recv));
  return 0;
}

int Collectives(ncclComm_t comm, cudaStream_t s) {
  // Every operator on int32 and float, sum on every other type.
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    if (int rc = AllReduceCase<int32_t>(comm, s, ncclInt32, op, true)) return rc;
    if (int rc = AllReduceCase<float>(comm, s, ncclFloat32, op, false)) return rc;
  }
  if (int rc = AllReduceCase<int8_t>(comm, s, ncclInt8, ncclSum, true)) return rc;
  if (int rc = AllReduceCase<uint8_t>(comm, s, ncclUint8, ncclMax, true)) return rc;
  if (int rc = AllReduceCase<uint32_t>(comm, s, ncclUint32, ncclMax, true)) return rc;
  if (int rc = AllReduceCase<int64_t>(comm, s, ncclInt64, ncclSum, true)) return rc;
  if (int rc = AllReduceCase<uint64_t>(comm, s, ncclUint64, ncclMin, true)) return rc;
  if (int rc = AllReduceCase<double>(comm, s, ncclFloat64, ncclSum, false)) return rc;
  if (int rc = AllReduceCase<__half>(comm, s, ncclFloat16, ncclSum, false)) return rc;
  if (int rc = AllReduceCase<__nv_bfloat16>(comm, s, ncclBfloat16, ncclMax, false)) return rc;

  const size_t n = 256;
  const size_t all = n * static_cast<size_t>(g_nranks);
  float *a = nullptr, *b = nullptr, *scalar = nullptr;
  CHECK(cudaMalloc(&a, all * sizeof(float)));
  CHECK(cudaMalloc(&b, all * sizeof(float)));
  CHECK(cudaMalloc(&scalar, sizeof(float)));
  std::vector<float> mine(all), out(all);
  for (size_t i = 0; i < all; ++i) mine[i] = static_cast<float>(Input(g_rank, i));
  CHECK(cudaMemcpy(a, mine.data(), all * sizeof(float), cudaMemcpyHostToDevice));

  // Broadcast from the last rank.
  const int root = g_nranks - 1;
  NCHECK(ncclBroadcast(a, b, n, ncclFloat32, root, comm, s));
  CHECK(cudaMemcpy(out.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i)
    if (out[i] != static_cast<float>(Input(root, i))) PHOS_CHECK_FAIL(1, "Broadcast: element %zu is %g", i, out[i]);

  // Reduce (max) to rank 0.
  CHECK(cudaMemset(b, 0, n * sizeof(float)));
  NCHECK(ncclReduce(a, b, n, ncclFloat32, ncclMax, 0, comm, s));
  CHECK(cudaMemcpy(out.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    const float want = g_rank == 0 ? static_cast<float>(Expected(ncclMax, i, false)) : 0.0f;
    if (out[i] != want) PHOS_CHECK_FAIL(1, "Reduce: element %zu is %g, want %g", i, out[i], want);
  }

  // AllGather: block r of the result is rank r's first n elements.
  NCHECK(ncclAllGather(a, b, n, ncclFloat32, comm, s));
  CHECK(cudaMemcpy(out.data(), b, all * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < g_nranks; ++r)
    for (size_t i = 0; i < n; ++i)
      if (out[r * n + i] != static_cast<float>(Input(r, i))) PHOS_CHECK_FAIL(1, "AllGather: block %d element %zu", r, i);

  // ReduceScatter (sum): this rank gets block `rank` of the sums.
  NCHECK(ncclReduceScatter(a, b, n, ncclFloat32, ncclSum, comm, s));
  CHECK(cudaMemcpy(out.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(Expected(ncclSum, g_rank * n + i, false));
    if (out[i] != want) PHOS_CHECK_FAIL(1, "ReduceScatter: element %zu is %g, want %g", i, out[i], want);
  }

  // PreMulSum: each rank scales by (rank + 1), from the host and from device memory.
  const float factor = static_cast<float>(g_rank + 1);
  CHECK(cudaMemcpy(scalar, &factor, sizeof factor, cudaMemcpyHostToDevice));
  for (ncclScalarResidence_t where : {ncclScalarHostImmediate, ncclScalarDevice}) {
    ncclRedOp_t premul;
    NCHECK(ncclRedOpCreatePreMulSum(&premul, where == ncclScalarDevice ? static_cast<void*>(scalar)
                                                                       : const_cast<float*>(&factor),
                                    ncclFloat32, where, comm));
    NCHECK(ncclAllReduce(a, b, n, ncclFloat32, premul, comm, s));
    CHECK(cudaMemcpy(out.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < g_nranks; ++r) want += (r + 1) * Input(r, i);
      if (out[i] != static_cast<float>(want)) PHOS_CHECK_FAIL(1, "PreMulSum (%d): element %zu is %g", where, i, out[i]);
    }
    NCHECK(ncclRedOpDestroy(premul, comm));
  }

  // A ring in one group: send to the next rank, receive from the previous.
  const int next = (g_rank + 1) % g_nranks, prev = (g_rank + g_nranks - 1) % g_nranks;
  NCHECK(ncclGroupStart());
  NCHECK(ncclSend(a, n, ncclFloat32, next, comm, s));
  NCHECK(ncclRecv(b, n, ncclFloat32, prev, comm, s));
  NCHECK(ncclGroupEnd());
  CHECK(cudaMemcpy(out.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i)
    if (out[i] != static_cast<float>(Input(prev, i))) PHOS_CHECK_FAIL(1, "ring: element %zu is %g", i, out[i]);

  // AlltoAll: block r of the result is block `rank` of rank r's input.
  NCHECK(ncclAlltoAll(a, b, n, ncclFloat32, comm, s));
  CHECK(cudaMemcpy(out.data(), b, all * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < g_nranks; ++r)
    for (size_t i = 0; i < n; ++i)
      if (out[r * n + i] != static_cast<float>(Input(r, g_rank * n + i))) {
        PHOS_CHECK_FAIL(1, "AlltoAll: block %d element %zu is %g", r, i, out[r * n + i]);
      }
  // Gather to the last rank: block r is rank r's first n elements; the
  // others' buffers stay as they were.
  CHECK(cudaMemset(b, 0, all * sizeof(float)));
  NCHECK(ncclGather(a, b, n, ncclFloat32, root, comm, s));
  CHECK(cudaMemcpy(out.data(), b, all * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < g_nranks; ++r)
    for (size_t i = 0; i < n; ++i) {
      const float want = g_rank == root ? static_cast<float>(Input(r, i)) : 0.0f;
      if (out[r * n + i] != want) PHOS_CHECK_FAIL(1, "Gather: block %d element %zu is %g", r, i, out[r * n + i]);
    }
  // Scatter from rank 0: this rank gets block `rank` of rank 0's input.
  NCHECK(ncclScatter(a, b, n, ncclFloat32, 0, comm, s));
  CHECK(cudaMemcpy(out.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i)
    if (out[i] != static_cast<float>(Input(0, g_rank * n + i))) PHOS_CHECK_FAIL(1, "Scatter: element %zu is %g", i, out[i]);

  // CommSplit: even and odd ranks, each ordered by descending parent rank.
  {
    ncclComm_t half = nullptr;
    NCHECK(ncclCommSplit(comm, g_rank % 2, -g_rank, &half, nullptr));
    int hn = 0, hr = -1;
    NCHECK(ncclCommCount(half, &hn));
    NCHECK(ncclCommUserRank(half, &hr));
    int want_n = 0, want_r = 0;
    for (int r = 0; r < g_nranks; ++r) {
      if (r % 2 != g_rank % 2) continue;
      ++want_n;
      if (r > g_rank) ++want_r;
    }
    if (hn != want_n || hr != want_r) PHOS_CHECK_FAIL(1, "CommSplit: rank %d of %d, want %d of %d", hr, hn, want_r, want_n);
    const float me = static_cast<float>(g_rank);
    CHECK(cudaMemcpy(b, &me, sizeof me, cudaMemcpyHostToDevice));
    NCHECK(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, half, s));
    float sum = 0;
    CHECK(cudaMemcpy(&sum, b, sizeof sum, cudaMemcpyDeviceToHost));
    float want = 0;
    for (int r = g_rank % 2; r < g_nranks; r += 2) want += static_cast<float>(r);
    if (sum != want) PHOS_CHECK_FAIL(1, "CommSplit: the half's sum is %g, want %g", sum, want);
    NCHECK(ncclCommDestroy(half));
    ncclComm_t none = reinterpret_cast<ncclComm_t>(&sum);
    NCHECK(ncclCommSplit(comm, g_rank == 0 ? NCCL_SPLIT_NOCOLOR : 0, 0, &none, nullptr));
    if ((g_rank == 0) != (none == nullptr)) PHOS_CHECK_FAIL(1, "CommSplit: NOCOLOR gave %p", static_cast<void*>(none));
    if (none != nullptr) NCHECK(ncclCommDestroy(none));
  }

  // Scalable init: two unique ids (derived from the job's, the same on
  // every rank) make one more communicator of every rank.
  {
    ncclUniqueId ids[2] = {g_id, g_id};
    ids[0].internal[100] ^= 0x5a;  // past the magic and the random bytes
    ids[1].internal[101] ^= 0x5a;
    ncclComm_t wide = nullptr;
    NCHECK(ncclCommInitRankScalable(&wide, g_nranks, g_rank, 2, ids, nullptr));
    int wn = 0, wr = -1;
    NCHECK(ncclCommCount(wide, &wn));
    NCHECK(ncclCommUserRank(wide, &wr));
    if (wn != g_nranks || wr != g_rank) PHOS_CHECK_FAIL(1, "InitRankScalable: rank %d of %d", wr, wn);
    // Registered buffers (and a window) compute what unregistered ones do.
    void* reg = nullptr;
    ncclWindow_t win = nullptr;
    NCHECK(ncclCommRegister(wide, b, n * sizeof(float), &reg));
    NCHECK(ncclCommWindowRegister(wide, a, n * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC));
    const float me = static_cast<float>(g_rank + 1);
    CHECK(cudaMemcpy(b, &me, sizeof me, cudaMemcpyHostToDevice));
    NCHECK(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, wide, s));
    float sum = 0;
    CHECK(cudaMemcpy(&sum, b, sizeof sum, cudaMemcpyDeviceToHost));
    if (sum != static_cast<float>(g_nranks * (g_nranks + 1) / 2)) PHOS_CHECK_FAIL(1, "InitRankScalable: sum %g", sum);
    NCHECK(ncclCommWindowDeregister(wide, win));
    NCHECK(ncclCommDeregister(wide, reg));
    if (ncclCommDeregister(wide, reg) != ncclInvalidArgument) PHOS_CHECK_FAIL(1, "a handle was given back twice");
    if (ncclCommWindowRegister(wide, a, 64, &win, 0x40) != ncclInvalidArgument) {
      PHOS_CHECK_FAIL(1, "unknown window flags were accepted");
    }
    if (ncclCommInitRankScalable(&wide, g_nranks, g_rank, 0, ids, nullptr) != ncclInvalidArgument) {
      PHOS_CHECK_FAIL(1, "InitRankScalable without ids was accepted");
    }
    NCHECK(ncclCommDestroy(wide));
  }

  // Shrink: the last rank is excluded (and does not call it); the others
  // form a communicator in their order.
  if (g_rank != g_nranks - 1) {
    int last = g_nranks - 1;
    ncclComm_t small = nullptr;
    NCHECK(ncclCommShrink(comm, &last, 1, &small, nullptr, NCCL_SHRINK_DEFAULT));
    int sn = 0, sr = -1;
    NCHECK(ncclCommCount(small, &sn));
    NCHECK(ncclCommUserRank(small, &sr));
    if (sn != g_nranks - 1 || sr != g_rank) PHOS_CHECK_FAIL(1, "CommShrink: rank %d of %d", sr, sn);
    const float me = static_cast<float>(g_rank + 1);
    CHECK(cudaMemcpy(b, &me, sizeof me, cudaMemcpyHostToDevice));
    NCHECK(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, small, s));
    float sum = 0;
    CHECK(cudaMemcpy(&sum, b, sizeof sum, cudaMemcpyDeviceToHost));
    if (sum != static_cast<float>((g_nranks - 1) * g_nranks / 2)) PHOS_CHECK_FAIL(1, "CommShrink: sum %g", sum);
    NCHECK(ncclCommDestroy(small));
    ncclComm_t bad = nullptr;
    if (ncclCommShrink(comm, &g_rank, 1, &bad, nullptr, NCCL_SHRINK_DEFAULT) != ncclInvalidArgument) {
      PHOS_CHECK_FAIL(1, "CommShrink by an excluded rank was accepted");
    }
  }

  // Bad arguments come back at once, as NCCL's do.
  if (ncclAllReduce(a, b, n, static_cast<ncclDataType_t>(99), ncclSum, comm, s) != ncclInvalidArgument) {
    PHOS_CHECK_FAIL(1, "an unknown datatype was accepted");
  }
  if (ncclSend(a, n, ncclFloat32, g_nranks + 3, comm, s) != ncclInvalidArgument) {
    PHOS_CHECK_FAIL(1, "a peer outside the communicator was accepted");
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(scalar));

  // Data-parallel training: params identical on every rank after each step.
  const int p = 4096, steps = 20;
  float *params = nullptr, *grad = nullptr;
  CHECK(cudaMalloc(&params, p * sizeof(float)));
  CHECK(cudaMalloc(&grad, p * sizeof(float)));
  CHECK(cudaMemsetAsync(params, 0, p * sizeof(float), s));
  for (int step = 0; step < steps; ++step) {
    Gradient<<<(p + 255) / 256, 256, 0, s>>>(params, grad, p, g_rank, step);
    NCHECK(ncclAllReduce(grad, grad, p, ncclFloat32, ncclSum, comm, s));
    Sgd<<<(p + 255) / 256, 256, 0, s>>>(params, grad, p, 0.25f);
  }
  std::vector<float> trained(p);
  CHECK(cudaMemcpyAsync(trained.data(), params, p * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> ref(p, 0.0f);
  for (int step = 0; step < steps; ++step)
    for (int i = 0; i < p; ++i) {
      float g = 0;
      for (int r = 0; r < g_nranks; ++r) g += static_cast<float>((i + r * 3 + step) % 7) - 3.0f;
      ref[i] -= 0.25f * g;
    }
  double checksum = 0;
  for (int i = 0; i < p; ++i) {
    if (trained[i] != ref[i]) PHOS_CHECK_FAIL(1, "training: param %d is %g, want %g", i, trained[i], ref[i]);
    checksum += trained[i];
  }
  std::printf("rank %d: training checksum %.3f\n", g_rank, checksum);
  CHECK(cudaFree(params));
  CHECK(cudaFree(grad));
  return 0;
}

// NCCL inside a CUDA graph, as PyTorch's CUDA graphs capture collectives: a
// step (Gradient kernel, AllReduce, Sgd kernel) and a group (Broadcast from
// rank 0, AllReduce of a second buffer) captured once, the graph launched
// `launches` times with new inputs copied in before each launch: every
// launch runs the collectives again, checked against the CPU.
int CapturedCollectives(ncclComm_t comm, cudaStream_t s) {
  const int p = 512, launches = 4;
  float *params = nullptr, *grad = nullptr, *bc = nullptr, *sum = nullptr;
  CHECK(cudaMalloc(&params, p * sizeof(float)));
  CHECK(cudaMalloc(&grad, p * sizeof(float)));
  CHECK(cudaMalloc(&bc, p * sizeof(float)));
  CHECK(cudaMalloc(&sum, p * sizeof(float)));
  CHECK(cudaMemsetAsync(params, 0, p * sizeof(float), s));
  CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  Gradient<<<(p + 255) / 256, 256, 0, s>>>(params, grad, p, g_rank, 0);
  NCHECK(ncclAllReduce(grad, grad, p, ncclFloat32, ncclSum, comm, s));
  Sgd<<<(p + 255) / 256, 256, 0, s>>>(params, grad, p, 0.25f);
  NCHECK(ncclGroupStart());
  NCHECK(ncclBroadcast(bc, bc, p, ncclFloat32, 0, comm, s));
  NCHECK(ncclAllReduce(sum, sum, p, ncclFloat32, ncclSum, comm, s));
  NCHECK(ncclGroupEnd());
  CHECK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes == 4);  // two kernels, the all-reduce, the group
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<float> bc_in(p), sum_in(p), bc_out(p), sum_out(p);
  for (int l = 0; l < launches; ++l) {
    for (int i = 0; i < p; ++i) {
      bc_in[i] = g_rank == 0 ? static_cast<float>(i * 3 + l) : -1.0f - g_rank;
      sum_in[i] = static_cast<float>(g_rank + 1 + l + i % 5);
    }
    CHECK(cudaMemcpyAsync(bc, bc_in.data(), p * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(sum, sum_in.data(), p * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(bc_out.data(), bc, p * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(sum_out.data(), sum, p * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < p; ++i) {
      if (bc_out[i] != static_cast<float>(i * 3 + l)) {
        PHOS_CHECK_FAIL(1, "captured broadcast, launch %d: element %d is %g", l, i, bc_out[i]);
      }
      float want = 0;
      for (int r = 0; r < g_nranks; ++r) want += static_cast<float>(r + 1 + l + i % 5);
      if (sum_out[i] != want) {
        PHOS_CHECK_FAIL(1, "captured all-reduce, launch %d: element %d is %g, want %g", l, i, sum_out[i], want);
      }
    }
  }
  std::vector<float> trained(p), ref(p, 0.0f);
  CHECK(cudaMemcpy(trained.data(), params, p * sizeof(float), cudaMemcpyDeviceToHost));
  for (int l = 0; l < launches; ++l) {
    for (int i = 0; i < p; ++i) {
      float g = 0;
      for (int r = 0; r < g_nranks; ++r) g += static_cast<float>((i + r * 3) % 7) - 3.0f;
      ref[i] -= 0.25f * g;
    }
  }
  for (int i = 0; i < p; ++i) {
    if (trained[i] != ref[i]) PHOS_CHECK_FAIL(1, "captured step: param %d is %g, want %g", i, trained[i], ref[i]);
  }
  std::printf("rank %d: %d launches of a captured graph with NCCL calls OK\n", g_rank, launches);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  for (float* q : {params, grad, bc, sum}) CHECK(cudaFree(q));
  return 0;
}

// params -= lr * sum over ranks of the gradient, `steps` times; the CPU
// reference of the same arithmetic must match bit for bit.
// The GEMM of a training step: Y (8x8) = A (8x16, from the step) B (16x8,
// the rank's), small integers, so every sum is exact in float.
constexpr int kM = 8, kN = 8, kK = 16;
float AValue(int i, int step, int rank) { return static_cast<float>((i + step + rank) % 5) - 2.0f; }
float BValue(int i, int rank) { return static_cast<float>((i * 3 + rank) % 4) - 1.0f; }

__global__ void MakeA(float* a, int step, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kM * kK) a[i] = static_cast<float>((i + step + rank) % 5) - 2.0f;
}

__global__ void GradientFromGemm(float* grad, const float* y, int n, int rank, int step) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) grad[i] = static_cast<float>((i + rank * 3 + step) % 7) - 3.0f + y[i % (kM * kN)];
}

// "; NCCL: <async error>" of the first of `comms` that has one, else "":
// a peer that died shows up in the training loop as a failed stream (the
// sim fails a collective that could not complete), a failed cuBLAS call
// after it, or an NCCL error — each failure names the NCCL cause too.
std::string NcclWhy(std::initializer_list<ncclComm_t> comms) {
  for (ncclComm_t c : comms) {
    ncclResult_t a = ncclSuccess;
    if (c != nullptr && ncclCommGetAsyncError(c, &a) == ncclSuccess && a != ncclSuccess) {
      return std::string("; NCCL: ") + ncclGetErrorString(a);
    }
  }
  return "";
}

#define TCHECK(x)                                                                                        \
  do {                                                                                                   \
    cudaError_t t_e_ = (x);                                                                              \
    if (t_e_ != cudaSuccess) {                                                                           \
      PHOS_CHECK_FAIL(2, "%s failed: %s%s", #x, cudaGetErrorString(t_e_), NcclWhy({comm, half}).c_str()); \
    }                                                                                                    \
  } while (0)
#define TNCHECK(x)                                                                                     \
  do {                                                                                                 \
    ncclResult_t t_r_ = (x);                                                                           \
    if (t_r_ != ncclSuccess) {                                                                         \
      PHOS_CHECK_FAIL(2, "%s failed: %s%s", #x, ncclGetErrorString(t_r_), NcclWhy({comm, half}).c_str()); \
    }                                                                                                  \
  } while (0)

int Train(ncclComm_t comm, cudaStream_t s, int steps) {
  const int p = 4096;
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) PHOS_CHECK_FAIL(2, "cublasCreate failed");
  if (cublasSetStream(blas, s) != CUBLAS_STATUS_SUCCESS) PHOS_CHECK_FAIL(2, "cublasSetStream failed");
  float *a = nullptr, *b = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&a, kM * kK * sizeof(float)));
  CHECK(cudaMalloc(&b, kK * kN * sizeof(float)));
  CHECK(cudaMalloc(&y, kM * kN * sizeof(float)));
  std::vector<float> hb(kK * kN);
  for (int i = 0; i < kK * kN; ++i) hb[i] = BValue(i, g_rank);
  CHECK(cudaMemcpy(b, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice));
  const float one = 1.0f, zero = 0.0f;
  // NCCL_RANKS_BALLAST_MB=N: N MiB more of device state per rank (the job
  // checkpoint benchmark's image size).
  void* ballast = nullptr;
  if (const char* mb = std::getenv("NCCL_RANKS_BALLAST_MB")) {
    const size_t bytes = std::strtoull(mb, nullptr, 10) << 20;
    if (bytes > 0) {
      CHECK(cudaMalloc(&ballast, bytes));
      CHECK(cudaMemsetAsync(ballast, g_rank + 1, bytes, s));
    }
  }
  float *params = nullptr, *grad = nullptr;
  CHECK(cudaMalloc(&params, p * sizeof(float)));
  CHECK(cudaMalloc(&grad, p * sizeof(float)));
  CHECK(cudaMemsetAsync(params, 0, p * sizeof(float), s));
  // A split communicator (even and odd ranks) the job also holds, so its
  // checkpoints and restores cover one: every 10 steps each half sums
  // step + rank over its ranks.
  ncclComm_t half = nullptr;
  NCHECK(ncclCommSplit(comm, g_rank % 2, g_rank, &half, nullptr));
  float* half_sum = nullptr;
  CHECK(cudaMalloc(&half_sum, sizeof(float)));
  for (int step = 0; step < steps; ++step) {
    MakeA<<<1, kM * kK, 0, s>>>(a, step, g_rank);
    if (cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kM, kN, kK, &one, a, kM, b, kK, &zero, y, kM) !=
        CUBLAS_STATUS_SUCCESS) {
      PHOS_CHECK_FAIL(2, "cublasSgemm failed at step %d%s", step, NcclWhy({comm, half}).c_str());
    }
    GradientFromGemm<<<(p + 255) / 256, 256, 0, s>>>(grad, y, p, g_rank, step);
    TNCHECK(ncclAllReduce(grad, grad, p, ncclFloat32, ncclSum, comm, s));
    Sgd<<<(p + 255) / 256, 256, 0, s>>>(params, grad, p, 0.25f);
    if (step % 10 == 9) {
      const float mine = static_cast<float>(step + g_rank);
      TCHECK(cudaMemcpyAsync(half_sum, &mine, sizeof mine, cudaMemcpyHostToDevice, s));
      TNCHECK(ncclAllReduce(half_sum, half_sum, 1, ncclFloat32, ncclSum, half, s));
      float got = 0, want = 0;
      TCHECK(cudaMemcpyAsync(&got, half_sum, sizeof got, cudaMemcpyDeviceToHost, s));
      TCHECK(cudaStreamSynchronize(s));
      for (int r = g_rank % 2; r < g_nranks; r += 2) want += static_cast<float>(step + r);
      if (got != want) PHOS_CHECK_FAIL(1, "step %d: the half's sum is %g, want %g", step + 1, got, want);
      std::printf("rank %d: step %d\n", g_rank, step + 1);
    }
    usleep(g_rank == 0 ? 2000 : 6000);
  }
  std::vector<float> trained(p);
  TCHECK(cudaMemcpyAsync(trained.data(), params, p * sizeof(float), cudaMemcpyDeviceToHost, s));
  TCHECK(cudaStreamSynchronize(s));
  std::vector<float> ref(p, 0.0f);
  std::vector<float> yref(static_cast<size_t>(g_nranks) * kM * kN);
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < g_nranks; ++r)
      for (int col = 0; col < kN; ++col)
        for (int row = 0; row < kM; ++row) {
          float acc = 0;
          for (int k = 0; k < kK; ++k) acc += AValue(row + k * kM, step, r) * BValue(k + col * kK, r);
          yref[r * kM * kN + row + col * kM] = acc;
        }
    for (int i = 0; i < p; ++i) {
      float g = 0;
      for (int r = 0; r < g_nranks; ++r) {
        g += static_cast<float>((i + r * 3 + step) % 7) - 3.0f + yref[r * kM * kN + i % (kM * kN)];
      }
      ref[i] -= 0.25f * g;
    }
  }
  double checksum = 0;
  for (int i = 0; i < p; ++i) {
    if (trained[i] != ref[i]) PHOS_CHECK_FAIL(1, "training: param %d is %g, want %g", i, trained[i], ref[i]);
    checksum += static_cast<double>(trained[i]) * ((i % 13) + 1);
  }
  std::printf("rank %d: trained checksum %.3f OK\n", g_rank, checksum);
  NCHECK(ncclCommDestroy(half));
  CHECK(cudaFree(half_sum));
  cublasDestroy(blas);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(y));
  if (ballast != nullptr) CHECK(cudaFree(ballast));
  CHECK(cudaFree(params));
  CHECK(cudaFree(grad));
  return 0;
}

__global__ void MakeInput(float* x, int n, int step) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>((i + step) % 5);
}

__global__ void Stage(const float* x, float* y, int n, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 2.0f + static_cast<float>(rank);
}

__global__ void Accumulate(float* acc, const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += y[i];
}

int Pipeline(ncclComm_t comm, cudaStream_t s, int steps) {
  const int n = 1024, last = g_nranks - 1;
  float *x = nullptr, *y = nullptr, *acc = nullptr;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  CHECK(cudaMalloc(&acc, n * sizeof(float)));
  CHECK(cudaMemsetAsync(acc, 0, n * sizeof(float), s));
  for (int step = 0; step < steps; ++step) {
    if (g_rank == 0) {
      MakeInput<<<(n + 255) / 256, 256, 0, s>>>(x, n, step);
    } else {
      NCHECK(ncclRecv(x, n, ncclFloat32, g_rank - 1, comm, s));
    }
    Stage<<<(n + 255) / 256, 256, 0, s>>>(x, y, n, g_rank);
    if (g_rank < last) {
      NCHECK(ncclSend(y, n, ncclFloat32, g_rank + 1, comm, s));
    } else {
      Accumulate<<<(n + 255) / 256, 256, 0, s>>>(acc, y, n);
    }
    if (step % 10 == 9) {
      CHECK(cudaStreamSynchronize(s));
      std::printf("rank %d: step %d\n", g_rank, step + 1);
    }
    usleep(g_rank == 1 ? 5000 : 1000);
  }
  CHECK(cudaStreamSynchronize(s));
  if (g_rank == last) {
    std::vector<float> got(n);
    CHECK(cudaMemcpy(got.data(), acc, n * sizeof(float), cudaMemcpyDeviceToHost));
    double checksum = 0;
    for (int i = 0; i < n; ++i) {
      float want = 0;
      for (int step = 0; step < steps; ++step) {
        float v = static_cast<float>((i + step) % 5);
        for (int r = 0; r < g_nranks; ++r) v = v * 2.0f + static_cast<float>(r);
        want += v;
      }
      if (got[i] != want) PHOS_CHECK_FAIL(1, "pipeline: element %d is %g, want %g", i, got[i], want);
      checksum += got[i];
    }
    std::printf("rank %d: pipeline checksum %.1f OK\n", g_rank, checksum);
  } else {
    std::printf("rank %d: pipeline done OK\n", g_rank);
  }
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(acc));
  return 0;
}

int GetId(const std::string& file, ncclUniqueId* id) {
  if (g_rank == 0) {
    NCHECK(ncclGetUniqueId(id));
    const std::string tmp = file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr || std::fwrite(id, sizeof *id, 1, f) != 1) PHOS_CHECK_FAIL(2, "cannot write %s", tmp.c_str());
    std::fclose(f);
    if (std::rename(tmp.c_str(), file.c_str()) != 0) PHOS_CHECK_FAIL(2, "cannot rename to %s", file.c_str());
    return 0;
  }
  for (int i = 0; i < 1200; ++i) {
    if (FILE* f = std::fopen(file.c_str(), "rb")) {
      const size_t got = std::fread(id, sizeof *id, 1, f);
      std::fclose(f);
      if (got == 1) return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  PHOS_CHECK_FAIL(2, "no unique id in %s after 60 s", file.c_str());
}

int Devices() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  std::printf("devices: %d", count);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, d));
    std::printf(" busid %d", prop.pciBusID);
  }
  std::printf("\n");
  if (count > 0) {
    // The thread's GPU is the last one it named.
    CHECK(cudaSetDevice(count - 1));
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 1 << 20));
    int current = -1;
    CHECK(cudaGetDevice(&current));
    EXPECT(current == count - 1);
    // A peer copy within one GPU is a device-to-device copy.
    char* c = static_cast<char*>(p);
    CHECK(cudaMemset(c, 7, 256));
    CHECK(cudaMemcpyPeer(c + 512, count - 1, c, count - 1, 256));
    char back[256];
    CHECK(cudaMemcpy(back, c + 512, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back[0] == 7 && back[255] == 7);
    if (count > 1) {
      // Kernels reaching another GPU's memory are not offered.
      EXPECT_ERR(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported);
      int can = -1;
      CHECK(cudaDeviceCanAccessPeer(&can, count - 1, 0));
      EXPECT(can == 0);
    }
    (void)cudaGetLastError();
    CHECK(cudaFree(p));
  }
  std::printf("devices: OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "devices") == 0) return Devices();
  if (argc != 5) {
    std::fprintf(stderr, "usage: nccl_ranks collectives|dies|hold|train|pipeline RANK NRANKS IDFILE | nccl_ranks devices\n");
    return 2;
  }
  const std::string mode = argv[1];
  g_rank = std::atoi(argv[2]);
  g_nranks = std::atoi(argv[3]);
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  CHECK(cudaSetDevice(g_rank % count));
  ncclUniqueId id;
  if (int rc = GetId(argv[4], &id)) return rc;
  g_id = id;
  ncclComm_t comm = nullptr;
  NCHECK(ncclCommInitRank(&comm, g_nranks, id, g_rank));
  int n = 0, r = -1, dev = -1;
  NCHECK(ncclCommCount(comm, &n));
  NCHECK(ncclCommUserRank(comm, &r));
  NCHECK(ncclCommCuDevice(comm, &dev));
  EXPECT(n == g_nranks && r == g_rank && dev == g_rank % count);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  if (mode == "train") {
    if (int rc = Train(comm, s, 1500)) return rc;
    NCHECK(ncclCommDestroy(comm));
    return 0;
  }
  if (mode == "pipeline") {
    if (int rc = Pipeline(comm, s, 600)) return rc;
    NCHECK(ncclCommDestroy(comm));
    return 0;
  }
  if (mode == "hold") {
    std::printf("rank %d: holding\n", g_rank);
    const std::string go = std::string(argv[4]) + ".go";
    for (int i = 0; i < 2400 && access(go.c_str(), F_OK) != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    NCHECK(ncclCommDestroy(comm));
    std::printf("rank %d: released\n", g_rank);
    return 0;
  }
  if (mode == "dies") {
    if (g_rank == 1) {
      std::printf("rank 1: exiting without a word\n");
      std::fflush(stdout);
      _exit(3);
    }
    float* x = nullptr;
    CHECK(cudaMalloc(&x, 1024 * sizeof(float)));
    // Refused at once when rank 1's end was already seen, else failed as it runs.
    ncclResult_t async = ncclAllReduce(x, x, 1024, ncclFloat32, ncclSum, comm, s);
    if (async != ncclRemoteError) NCHECK(async);
    // Enqueued, it can never complete (rank 1 is gone): the sim fails it on
    // the stream instead of handing back x as "the sum".
    const cudaError_t synced = cudaStreamSynchronize(s);
    EXPECT(async == ncclSuccess ? synced == cudaErrorLaunchFailure : synced == cudaSuccess);
    for (int i = 0; i < 600 && async == ncclSuccess; ++i) {
      NCHECK(ncclCommGetAsyncError(comm, &async));
      if (async == ncclSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT(async == ncclRemoteError);
    std::printf("rank 0: remote error (%s)\n", ncclGetErrorString(async));
    NCHECK(ncclCommAbort(comm));
    return 0;
  }
  if (int rc = Collectives(comm, s)) return rc;
  if (int rc = CapturedCollectives(comm, s)) return rc;
  NCHECK(ncclCommFinalize(comm));
  NCHECK(ncclCommDestroy(comm));
  CHECK(cudaStreamDestroy(s));
  std::printf("rank %d: OK\n", g_rank);
  return 0;
}
