// The phos wire protocol: the payloads that libphos.so (app side) and phosd
// (daemon side, daemon/session/) exchange over the data-plane ring
// (ring/ring.h). docs/interposer.md "Wire protocol and sessions".
//
// Framing is the ring's (ring/record.h): every call is one frame whose
// header carries the api id (the generated `interposer::ApiId`, see
// phos_api_ids.h), the virtual stream id, and — for synchronous calls — a
// completion slot. This header defines only the payloads.
//
// Conventions
//   * Every struct is a trivially copyable POD of fixed-width fields with
//     explicit padding (pad fields must be written as 0; phosd ignores
//     them), little-endian x86-64 natural layout, size static_asserted.
//   * A payload is the struct, optionally followed by trailing bytes (a
//     name, inline copy data, a parameter block) whose length the struct
//     names. phosd copies the payload out of shared memory once and checks
//     every length against the payload size (the app is not trusted).
//   * One wire op per operation, keyed by ONE canonical ApiId (op::k*
//     below, one per row of protocol/calls.def — the table of forwarded
//     calls, which also says each op's payload structs, staging, sync and
//     access rule; docs/interposer.md "Adding a call"): the runtime and
//     driver variants of an operation (cudaMalloc, cuMemAlloc_v2, ...) are
//     all sent with the canonical id. "Sync" ops are sent with
//     RingClient::Call and answer in the completion slot; "posted" ops are
//     sent with RingClient::Post (no round trip). Any op may be sent either
//     way: a posted op's error is deferred (see errors below), a called op's
//     error is returned at once.
//   * Handles: device pointers are real (phosd's backend allocates them).
//     Streams, events, modules and functions are small virtual ids minted by
//     the app (any nonzero uint32 the app has not used for a live object of
//     that kind); phosd maps them to backend handles per session. Stream id
//     0 is the legacy default stream. Ids of one session mean nothing in
//     another.
//   * Reply: Reply::status is a WireStatus (int32). On success the result
//     bytes are the op's reply struct. On error they are a UTF-8 message
//     (no NUL) saying what failed; a longer message is cut to its first 40
//     bytes + "..." + its last bytes (the root cause) to fit
//     kSlotResultBytes.
//
// Errors (WireStatus values ARE the cudaError_t and CUresult numbers, which
// coincide for every code phos uses, so the client casts; table below and
// in ToWire()). Errors of asynchronous work — a kernel fault, and the
// enqueue-time error of any op that was posted rather than called — are
// kept by the session and returned by the next synchronising op
// (StreamSynchronize, EventSynchronize, DeviceSynchronize, a called
// memcpy/memset, GetLastError), as in CUDA; the deferred error is then
// cleared (GetLastError / PeekAtLastError return it without syncing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"
#include "phos_api_ids.h"
#include "protocol/texture_desc.h"
#include "protocol/nccl_wire.h"
#include "ring/ring_layout.h"
#include "ring/waiter.h"

namespace phos::wire {

using interposer::ApiId;

inline constexpr uint32_t kWireVersion = 1;
/// "no staging chunk": the reply comes inline (small D2H) or not at all.
inline constexpr uint32_t kNoChunk = 0xFFFFFFFFu;
/// Largest module image phosd accepts (staged pieces are bounded by it).
inline constexpr uint64_t kMaxModuleImageBytes = 512ull << 20;
/// Largest kernel name / global name.
inline constexpr uint32_t kMaxNameBytes = 4096;
/// Largest kernel parameter block (CUDA 12.1+: 32764 bytes).
inline constexpr uint32_t kMaxParamBytes = 32768;

// ---------------------------------------------------------------- status

/// Status of a wire call. Values equal cudaError_t AND CUresult numbers.
enum class WireStatus : int32_t {
  kSuccess = 0,                 // cudaSuccess                / CUDA_SUCCESS
  kInvalidValue = 1,            // cudaErrorInvalidValue      / CUDA_ERROR_INVALID_VALUE
  kMemoryAllocation = 2,        // cudaErrorMemoryAllocation  / CUDA_ERROR_OUT_OF_MEMORY
  kNotInitialized = 3,          // cudaErrorInitializationError / CUDA_ERROR_NOT_INITIALIZED (app side only: a forked child)
  kDaemonUnavailable = 46,      // cudaErrorDevicesUnavailable/ CUDA_ERROR_DEVICE_UNAVAILABLE
  kInvalidDevice = 101,         // cudaErrorInvalidDevice     / CUDA_ERROR_INVALID_DEVICE
  kInvalidImage = 200,          // cudaErrorInvalidKernelImage/ CUDA_ERROR_INVALID_IMAGE
  kNoBinaryForGpu = 209,        // cudaErrorNoKernelImageForDevice / CUDA_ERROR_NO_BINARY_FOR_GPU
  kInvalidResourceHandle = 400, // cudaErrorInvalidResourceHandle / CUDA_ERROR_INVALID_HANDLE
  kNotFound = 500,              // cudaErrorSymbolNotFound    / CUDA_ERROR_NOT_FOUND
  kNotReady = 600,              // cudaErrorNotReady          / CUDA_ERROR_NOT_READY
  kIllegalAddress = 700,        // cudaErrorIllegalAddress    / CUDA_ERROR_ILLEGAL_ADDRESS
  kAssert = 710,                // cudaErrorAssert            / CUDA_ERROR_ASSERT
  kHardwareStackError = 714,    // cudaErrorHardwareStackError/ CUDA_ERROR_HARDWARE_STACK_ERROR
  kIllegalInstruction = 715,    // cudaErrorIllegalInstruction/ CUDA_ERROR_ILLEGAL_INSTRUCTION
  kMisalignedAddress = 716,     // cudaErrorMisalignedAddress / CUDA_ERROR_MISALIGNED_ADDRESS
  kInvalidAddressSpace = 717,   // cudaErrorInvalidAddressSpace / CUDA_ERROR_INVALID_ADDRESS_SPACE
  kInvalidPc = 718,             // cudaErrorInvalidPc         / CUDA_ERROR_INVALID_PC
  kLaunchFailure = 719,         // cudaErrorLaunchFailure     / CUDA_ERROR_LAUNCH_FAILED
  kCooperativeLaunchTooLarge = 720,  // cudaErrorCooperativeLaunchTooLarge / CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
  kNotSupported = 801,          // cudaErrorNotSupported      / CUDA_ERROR_NOT_SUPPORTED
  kUnknown = 999,               // cudaErrorUnknown           / CUDA_ERROR_UNKNOWN
};

/// phos::Status -> WireStatus (the table in docs/interposer.md):
///   kOk -> kSuccess; kInvalidArgument and kFailedPrecondition ->
///   kInvalidValue, except a message naming an "illegal address" (a kernel's
///   faulting access, a bad device range found by the backend) ->
///   kIllegalAddress; kAlreadyExists -> kInvalidValue;
///   kNotFound -> kInvalidResourceHandle (unknown virtual id);
///   kOutOfMemory -> kMemoryAllocation; kNotSupported -> kNotSupported;
///   kNotReady -> kNotReady; kUnavailable -> kDaemonUnavailable;
///   kCorruption -> kInvalidImage; kIoError, kInternal -> kUnknown.
/// Except: a Status carrying an api_error() that is one of the values
/// above (a kernel fault on a GPU, no kernel image for this device) is
/// that value, whatever its code.
WireStatus ToWire(const Status& s);
/// A kernel fault: sticky for the app's whole process, as in CUDA (700,
/// 710, 714..719; the client records it, later calls return it).
bool IsKernelFault(WireStatus s);
/// The client side: what a failed ring operation (Post/Call returning a
/// non-OK phos::Status, e.g. Unavailable because phosd died) becomes.
inline WireStatus TransportToWire(const Status& s) {
  return s.ok() ? WireStatus::kSuccess : WireStatus::kDaemonUnavailable;
}
/// "cudaErrorIllegalAddress" etc. (the runtime name of the code).
std::string_view WireStatusName(WireStatus s);

// ---------------------------------------------------------------- ops

/// Ids of phos-private ops (above every generated id), beside the generated
/// ones: a row of calls.def names its id as call_ids::k_<Api>.
namespace call_ids {
using enum interposer::ApiId;
inline constexpr ApiId k_phosHostCopyStats = static_cast<ApiId>(0x10000);
inline constexpr ApiId k_phosBlasProbe = static_cast<ApiId>(0x10001);
inline constexpr ApiId k_phosTakeDeviceOutput = static_cast<ApiId>(0x10002);
}  // namespace call_ids

/// The canonical ApiId of each op, one constant per row of calls.def
/// (op::k<Op>; the row says what the op carries and how phosd runs it).
/// The client sends these ids; phosd answers any other id with
/// kNotSupported (and stays usable).
namespace op {
#define PHOS_CALL(Op, Api, ...) inline constexpr ApiId k##Op = call_ids::k_##Api;
#include "protocol/calls.def"
#undef PHOS_CALL
}  // namespace op

/// Markers for calls.def's Request and Reply columns: no payload; no reply
/// bytes; reply bytes of variable length (inline D2H data or a ChunkReply).
struct NoPayload {};
struct NoReply {};
struct ReplyBytes {};

// ---------------------------------------------------------------- payloads

struct DeviceCountReply {
  int32_t count;
  uint32_t pad;
};
static_assert(sizeof(DeviceCountReply) == 8);

/// kSetDevice: the GPU (phosd's ordinal; libphos.so maps the app's ordinal
/// through CUDA_VISIBLE_DEVICES) the session runs on from now on.
struct DeviceRequest {
  int32_t device;
  uint32_t pad;
};
static_assert(sizeof(DeviceRequest) == 8);

/// kGetDeviceProperties: the app takes a staging chunk (AcquireReplyChunk),
/// phosd writes a WireDeviceProps at its start and completes with
/// ChunkReply{bytes}; the app copies it out and releases the chunk.
struct DevicePropsRequest {
  int32_t device;
  uint32_t reply_chunk;  // a staging chunk the app holds (kChunkFilling)
};
static_assert(sizeof(DevicePropsRequest) == 8);

struct ChunkReply {
  uint64_t bytes;  // bytes phosd wrote at the start of the chunk
};
static_assert(sizeof(ChunkReply) == 8);

/// Slots of WireDeviceProps::attributes: one per CUdevice_attribute number
/// (CUDA 13.0 defines 1..147; the generated interposer::kDeviceAttributeSlots
/// is checked against this where both are visible).
inline constexpr int kDeviceAttributeSlots = 192;
/// An attribute phosd has no answer for (the backend refused the number).
inline constexpr int64_t kNoAttribute = INT64_MIN;

/// What phosd says of a device: its name, uuid and memory, and every device
/// attribute as kDeviceGetAttribute would answer it (slot i = attribute
/// number i; slot 0 unused). The app fills cudaDeviceProp and the driver's
/// legacy CUdevprop from it, so the two APIs never disagree.
struct WireDeviceProps {
  char name[256];        // NUL-terminated
  char uuid[64];         // "GPU-xxxxxxxx-..." text, NUL-terminated
  uint64_t total_memory;
  int64_t attributes[kDeviceAttributeSlots];
};
static_assert(sizeof(WireDeviceProps) == 320 + 8 + 8 * kDeviceAttributeSlots);

/// kDeviceGetAttribute: `attribute` is a cudaDeviceAttr (= CUdevice_attribute)
/// number. phosd answers every number the backend knows (daemon/session/
/// device_attributes.h: phos's own answer for the features it does not
/// offer) and kInvalidValue for any other.
struct DeviceAttributeRequest {
  int32_t device;
  int32_t attribute;
};
static_assert(sizeof(DeviceAttributeRequest) == 8);

struct ValueReply {
  int64_t value;
};
static_assert(sizeof(ValueReply) == 8);

struct MemGetInfoReply {
  uint64_t free_bytes;
  uint64_t total_bytes;
};
static_assert(sizeof(MemGetInfoReply) == 16);

struct MallocRequest {
  uint64_t bytes;
};
static_assert(sizeof(MallocRequest) == 8);

struct MallocReply {
  uint64_t ptr;
};
static_assert(sizeof(MallocReply) == 8);

/// kFree (the pointer must be the start of a buffer of this session).
struct PointerRequest {
  uint64_t ptr;
};
static_assert(sizeof(PointerRequest) == 8);

/// The app's own virtual-memory calls (daemon/session/vmm_handlers.cc;
/// docs/interposer.md "The driver's virtual-memory API"). Sizes, addresses
/// and alignments are multiples of kVmmGranularity, which libphos.so's
/// cuMemGetAllocationGranularity answers (the allocation granularity of
/// every current NVIDIA GPU, and the sim's).
inline constexpr uint64_t kVmmGranularity = 2ull << 20;

/// kMemAddressReserve: `bytes` of address space aligned to `alignment` (0:
/// the granularity), at `addr` if it is free (a hint, as in CUDA). Reply:
/// MallocReply with the range's start.
struct AddressReserveRequest {
  uint64_t bytes;
  uint64_t alignment;
  uint64_t addr;
};
static_assert(sizeof(AddressReserveRequest) == 24);

/// kMemAddressFree (a whole reserved range), kMemMap (one mapping of
/// `bytes` at `ptr`, inside a reserved range), kMemUnmap (one mapping,
/// whole: libphos.so splits a cuMemUnmap over several).
struct AddressRangeRequest {
  uint64_t ptr;
  uint64_t bytes;
};
static_assert(sizeof(AddressRangeRequest) == 16);

/// kDeviceSetLimit (cudaDeviceSetLimit of the limits phosd applies):
/// `limit` is a cudaLimit — kLimitPrintfFifoSize (the device printf FIFO)
/// or kLimitMallocHeapSize (the device heap; refused once the heap exists,
/// after a launch of a kernel that calls malloc, as in CUDA).
inline constexpr uint32_t kLimitPrintfFifoSize = 1;  // cudaLimitPrintfFifoSize
inline constexpr uint32_t kLimitMallocHeapSize = 2;  // cudaLimitMallocHeapSize
struct DeviceLimitRequest {
  uint32_t limit;
  uint32_t pad;  // 0
  uint64_t value;
};
static_assert(sizeof(DeviceLimitRequest) == 16);

/// kLaunchHostFunc (cudaLaunchHostFunc, cudaStreamAddCallback,
/// cuLaunchHostFunc; docs/interposer.md "Host functions in stream order"):
/// the frame's stream stops at this point until the app has run its
/// function. `word` and `doorbell` are app addresses of 4-byte aligned
/// words inside the app's shared pinned segments. When the stream gets
/// here phosd stores kHostFuncReached into `word`, increments `doorbell`
/// and wakes futex waiters on it; the stream goes on once `word` holds
/// anything else (the app stores kHostFuncDone after its function
/// returned) or the session ends.
struct HostFuncRequest {
  uint64_t word;
  uint64_t doorbell;
};
static_assert(sizeof(HostFuncRequest) == 16);
inline constexpr uint32_t kHostFuncArmed = 0;
inline constexpr uint32_t kHostFuncReached = 1;
inline constexpr uint32_t kHostFuncDone = 2;

/// kBlas*: one cuBLAS routine (the row names which; interposer/protocol/
/// blas_spec.h says how each routine reads these fields and which device
/// ranges it reads and writes). Matrices are column-major, as cuBLAS's.
/// Vectors: x in (a, lda = incx), y in (b, ldb = incy) for level 1; gemv's
/// x in (b, ldb = incx) and y in (c, ldc = incy).
struct BlasRequest {
  int32_t type_a;        // cudaDataType_t of A / x
  int32_t type_b;        // ... of B / y
  int32_t type_c;        // ... of C (gemm, geam; gemv's y)
  int32_t compute;       // cublasComputeType_t, or a cudaDataType_t (GemmEx's legacy form, Ex level 1)
  int32_t scalar_type;   // cudaDataType_t of alpha, beta and a reduction's result
  uint32_t op_a;         // cublasOperation_t: 0 N, 1 T, 2 C
  uint32_t op_b;
  uint32_t flags;        // kBlasDeviceScalars | kBlasConjugate | ... (below)
  int64_t m, n, k;
  int64_t batch;         // 1 unless strided-batched
  uint64_t a, b, c;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;  // elements between batch members
  uint64_t alpha_ptr;    // kBlasDeviceScalars: device addresses of alpha, beta
  uint64_t beta_ptr;
  uint64_t result;       // kBlasDeviceScalars: a reduction's result (device)
  uint8_t alpha[16];     // host scalars (CUBLAS_POINTER_MODE_HOST), in scalar_type
  uint8_t beta[16];
};
static_assert(sizeof(BlasRequest) == 192);
/// alpha/beta (and a reduction's result) live in device memory
/// (CUBLAS_POINTER_MODE_DEVICE).
inline constexpr uint32_t kBlasDeviceScalars = 0x1;
/// dot: the conjugated form (cublasDotcEx, cublasCdotc).
inline constexpr uint32_t kBlasConjugate = 0x2;
/// trsm: A on the right (X op(A) = alpha B), A upper triangular, A's
/// diagonal taken as ones (cublasSideMode_t, cublasFillMode_t,
/// cublasDiagType_t as bits).
inline constexpr uint32_t kBlasSideRight = 0x4;
inline constexpr uint32_t kBlasUpper = 0x8;
inline constexpr uint32_t kBlasUnitDiag = 0x10;
/// alpha / beta are of the real type of scalar_type's precision (herk,
/// her2k's beta, her): BlasRealTypeOf(scalar_type), in host and device mode.
inline constexpr uint32_t kBlasRealAlpha = 0x20;
inline constexpr uint32_t kBlasRealBeta = 0x40;
/// amax/amin: the result index is an int64 (the _64 forms), else an int32.
inline constexpr uint32_t kBlasIndex64 = 0x80;

/// kBlasLtMatmul: cublasLtMatmul, D = epilogue(alpha op(A) op(B) + beta C).
/// `gemm` holds A, B, C (C is read only: the output is D) as a strided-
/// batched gemm; the epilogue (cublasLtEpilogue_t) adds the bias (one
/// element per row of D, `bias_stride` elements apart between batch
/// members), applies ReLU or GELU, or their gradients, and may write or
/// read the auxiliary matrix (`aux`: ReLU's bit mask, `aux_ld` and
/// `aux_stride` in bits; GELU's input, in elements of `aux_type`) or write
/// a bias gradient into `bias` (protocol/blas_spec.h, CheckBlasLt).
struct BlasLtRequest {
  BlasRequest gemm;
  uint64_t d;
  int64_t ldd;
  int64_t stride_d;
  int32_t type_d;
  uint32_t epilogue;
  uint64_t bias;        // 0: none
  int32_t bias_type;    // cudaDataType_t
  uint32_t reserved;    // 0
  int64_t bias_stride;
  uint64_t aux;         // 0: none
  int64_t aux_ld;
  int64_t aux_stride;
  int32_t aux_type;     // cudaDataType_t of GELU's aux matrix
  uint32_t reserved2;   // 0
};
static_assert(sizeof(BlasLtRequest) == 192 + 88);

/// kBlasProbe: can this phosd's backend compute `api`'s routine with the
/// types (and, for cuBLASLt, epilogue) of `call`? Answered at once, no
/// device memory touched: libphos.so asks once per routine and type
/// combination before it posts the first such call, so an unsupported
/// combination is the call's own CUBLAS_STATUS_NOT_SUPPORTED, not a
/// deferred stream error. `call.gemm` holds a non-Lt routine's request.
struct BlasProbeRequest {
  uint32_t api;       // the row the routine is sent as (wire::op::kBlas*)
  uint32_t reserved;  // 0
  BlasLtRequest call;
};
static_assert(sizeof(BlasProbeRequest) == 8 + sizeof(BlasLtRequest));

/// A reduction's result in host pointer mode (dot, nrm2, asum: the value in
/// the row's scalar type; amax/amin: an int32, 1-based).
struct BlasResultReply {
  uint8_t value[16];
};
static_assert(sizeof(BlasResultReply) == 16);

/// kPinnedToDevice / kDeviceToPinned (pinned host memory and 2D copies):
/// the host side is an app address inside a shared pinned segment
/// (HostSegmentRequest); phosd copies straight from / into its mapping of
/// the segment. Posted or called; no staging, no inline bytes.
enum class CopyDir : uint32_t {
  kHostToDevice = 1,
  kDeviceToHost = 2,
  kDeviceToDevice = 3,
  kPinnedToDevice = 4,
  kDeviceToPinned = 5,
};

/// kMemcpy / kMemcpyAsync. The frame's stream_id is the stream.
///   H2D, inline: payload = MemcpyRequest + `bytes` data bytes (when the
///     frame fits: RingClient::max_payload_bytes()). `src` is ignored.
///   H2D, staged: RingClient::PostBulk(kMemcpyAsync, meta = MemcpyRequest,
///     data); each piece lands at dst + StagingRef::offset; `bytes` is the
///     whole transfer. phosd frees each chunk after its piece reached the
///     device. For a synchronous cudaMemcpy the app then Calls
///     kStreamSynchronize on the same stream (which also reports the
///     pieces' errors).
///   D2H: always Called. `bytes` <= kSlotResultBytes with reply_chunk ==
///     kNoChunk: the data comes back inline in the reply. Otherwise the app
///     holds a staging chunk (AcquireReplyChunk), sends reply_chunk and
///     bytes <= chunk_bytes, phosd copies src..src+bytes into the chunk and
///     completes with ChunkReply; the app copies the bytes out, releases the
///     chunk, and loops chunk by chunk (several chunks may be in flight).
///     Completion means the data is in the chunk (phosd waited for the
///     stream).
///   D2D: dst and src device pointers; posted (async) or called (sync).
///   kPinnedToDevice / kDeviceToPinned: the host side (src / dst) is an app
///     address inside a pinned host segment (HostSegmentRequest); no data
///     travels; posted (async, D2H included) or called (sync: phosd syncs
///     the stream before answering).
struct MemcpyRequest {
  uint64_t dst;
  uint64_t src;
  uint64_t bytes;
  uint32_t dir;          // CopyDir
  uint32_t reply_chunk;  // D2H only; else kNoChunk
};
static_assert(sizeof(MemcpyRequest) == 32);

/// kMemset / kMemsetAsync: `count` elements of `element_size` (1, 2, 4)
/// bytes set to the low bytes of `value` (cudaMemset = element_size 1).
struct MemsetRequest {
  uint64_t dst;
  uint64_t count;
  uint32_t value;
  uint32_t element_size;
};
static_assert(sizeof(MemsetRequest) == 24);

/// kStreamCreate: flags as cudaStreamNonBlocking.
struct StreamCreateRequest {
  uint32_t stream_id;  // the new virtual id (nonzero)
  uint32_t flags;
  int32_t priority;
  uint32_t pad;
};
static_assert(sizeof(StreamCreateRequest) == 16);

/// Ops that name one object: kStreamDestroy (stream), kStreamWaitEvent
/// (event; the stream is the frame's), kEventRecord/Query/Synchronize/
/// Destroy (event), kModuleUnload (module).
struct HandleRequest {
  uint32_t id;
  uint32_t flags;  // unused, 0
};
static_assert(sizeof(HandleRequest) == 8);

/// kEventCreate: flags as cudaEventDisableTiming etc.
struct EventCreateRequest {
  uint32_t event_id;
  uint32_t flags;
};
static_assert(sizeof(EventCreateRequest) == 8);

struct ElapsedTimeRequest {
  uint32_t start_event;
  uint32_t end_event;
};
static_assert(sizeof(ElapsedTimeRequest) == 8);

struct ElapsedTimeReply {
  float ms;
  uint32_t pad;
};
static_assert(sizeof(ElapsedTimeReply) == 8);

/// kModuleLoad. Three phases:
///   kInline: Called; payload = request + `total_bytes` image bytes.
///   kPiece:  PostBulk pieces (meta = request); each piece lands at
///            StagingRef::offset of an image of `total_bytes` bytes
///            (<= kMaxModuleImageBytes) that phosd accumulates per module id.
///   kCommit: Called after the pieces; phosd loads the accumulated image
///            (it must be complete) and answers with the load's status.
/// The image is what cuModuleLoadData takes: fatbin, cubin or PTX text.
struct ModuleLoadRequest {
  uint32_t module_id;
  uint32_t phase;  // ModuleLoadPhase
  uint64_t total_bytes;
};
static_assert(sizeof(ModuleLoadRequest) == 16);
enum class ModuleLoadPhase : uint32_t { kInline = 1, kPiece = 2, kCommit = 3 };

/// kModuleGetFunction: payload = request + name (name_bytes, no NUL).
struct GetFunctionRequest {
  uint32_t module_id;
  uint32_t function_id;  // the new virtual id
  uint32_t name_bytes;
  uint32_t pad;
};
static_assert(sizeof(GetFunctionRequest) == 16);

/// kModuleGetGlobal: payload = request + name.
struct GetGlobalRequest {
  uint32_t module_id;
  uint32_t name_bytes;
  uint32_t flags;  // GetGlobalFlags; phosd refuses unknown bits
  uint32_t pad;
};
static_assert(sizeof(GetGlobalRequest) == 16);
/// GetGlobalRequest::flags.
enum GetGlobalFlags : uint32_t {
  /// The address goes to the app (cudaGetSymbolAddress, cuModuleGetGlobal
  /// with a dptr, cuLibraryGetGlobal), which may keep it: a restore must then
  /// put the variable back at that address. Without it (libphos's own
  /// cudaMemcpyToSymbol and friends, which ask every time) a restore may
  /// place the variable wherever the backend puts it.
  kGlobalAddressToApp = 1,
};

struct GetGlobalReply {
  uint64_t ptr;
  uint64_t bytes;
};
static_assert(sizeof(GetGlobalReply) == 16);

/// kLaunchKernel: payload = request + the packed parameter block (each
/// argument at its offset from the kernel's parameter table). The frame's
/// stream_id is the stream. Posted; its errors are deferred.
struct LaunchRequest {
  uint32_t function_id;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t param_bytes;
  uint32_t flags;  // LaunchFlags; phosd refuses unknown bits
};
/// LaunchRequest::flags.
enum LaunchFlags : uint32_t {
  /// cudaLaunchCooperativeKernel / CU_LAUNCH_ATTRIBUTE_COOPERATIVE: every
  /// block resident at once (grid.sync()); the client Calls it, so a grid
  /// too large for the device fails the launch itself.
  kLaunchCooperative = 1,
};
static_assert(sizeof(LaunchRequest) == 40);

// ---- pinned host memory and 2D copies

/// kHostSegmentRegister. The app first sends ring::HostSegmentRecord with
/// the segment's memfd over the channel socket (ChannelClient::
/// SendHostSegment), then Calls this op with the same three values. phosd
/// takes exactly one queued record, checks that it matches, that the memfd
/// is sealed against shrinking and holds `bytes`, maps it and registers it
/// as pinned. `app_base` is where the segment is mapped in the app (page
/// aligned); `bytes` a multiple of the page size.
struct HostSegmentRequest {
  uint64_t segment_id;  // nonzero, unused so far in this session
  uint64_t bytes;
  uint64_t app_base;
};
static_assert(sizeof(HostSegmentRequest) == 24);

/// kHostSegmentRegister's reply. `kernels_reach`: 1 when kernels reach the
/// segment at app_base (mapped pinned memory: the app's host pointer is its
/// device pointer; docs/interposer.md "Mapped pinned memory"), 0 when it is
/// pinned only (the backend cannot map host memory, or device memory lives
/// at that address).
struct HostSegmentReply {
  uint32_t kernels_reach;
  uint32_t reserved;
};
static_assert(sizeof(HostSegmentReply) == 8);

/// kMemcpy2D / kMemcpy2DAsync: `height` rows of `width` bytes; row r is at
/// dst + r*dpitch / src + r*spitch. By `dir`:
///   kDeviceToDevice, kPinnedToDevice, kDeviceToPinned: both pitches real;
///     one record, phosd issues the rows (one backend copy when both sides
///     are contiguous). Posted or called.
///   kHostToDevice (pageable source): the app packs the rows (spitch is
///     ignored: the source is width*height packed bytes), sent inline
///     (payload = request + width*height bytes) or as PostBulk pieces whose
///     StagingRef::offset is the packed offset; phosd scatters each piece
///     into the rows it covers.
///   kDeviceToHost (pageable destination): always Called, one call per
///     reply chunk: phosd gathers packed bytes [packed_offset,
///     packed_offset + packed_bytes) of the region into the chunk (or inline
///     when reply_chunk == kNoChunk and packed_bytes <= kSlotResultBytes);
///     the app unpacks them into its rows (dpitch is ignored by phosd).
struct Memcpy2DRequest {
  uint64_t dst;
  uint64_t src;
  uint64_t dpitch;
  uint64_t spitch;
  uint64_t width;
  uint64_t height;
  uint64_t packed_offset;  // kDeviceToHost only
  uint64_t packed_bytes;   // kDeviceToHost only
  uint32_t dir;            // CopyDir
  uint32_t reply_chunk;    // kDeviceToHost only; else kNoChunk
};
static_assert(sizeof(Memcpy2DRequest) == 72);

/// kMemset2D / kMemset2DAsync: `height` rows of `width` bytes at dst +
/// r*pitch, each row filled with `value`'s low `element_size` bytes
/// (1, 2 or 4: cudaMemset2D and cuMemsetD2D8 set bytes, cuMemsetD2D16/32
/// 16- and 32-bit words; then dst, pitch and width are multiples of it).
struct Memset2DRequest {
  uint64_t dst;
  uint64_t pitch;
  uint64_t width;
  uint64_t height;
  uint32_t value;
  uint32_t element_size;
};
static_assert(sizeof(Memset2DRequest) == 40);

/// kHostCopyStats: how this session's host<->device copies travelled
/// (tests use it to prove that pinned copies take the zero-copy path).
struct HostCopyStatsReply {
  uint64_t pinned_copies;  // kPinnedToDevice / kDeviceToPinned records (1D and 2D)
  uint64_t pinned_bytes;
  uint64_t staged_copies;  // inline, staged-piece and reply-chunk records
  uint64_t staged_bytes;
  uint64_t segments;       // pinned segments registered
  uint64_t segment_bytes;
  uint64_t staging_pinned_bytes;  // the staging arena, when registered with the context (PinStagingArena)
};
static_assert(sizeof(HostCopyStatsReply) == 56);

/// kTakeDeviceOutput: the session's pending device printf text, up to a
/// chunk of it, written into the reply chunk the app holds (ChunkReply
/// says how many bytes; fewer than a chunk: nothing is left).
struct DeviceOutputRequest {
  uint32_t reply_chunk;
  uint32_t reserved;
};
static_assert(sizeof(DeviceOutputRequest) == 8);

// ---------------------------------------------------------------- function attributes

/// kFuncGetAttributes' reply: backend::FunctionAttributes in cudaFuncAttributes' units.
struct FunctionAttributesReply {
  uint64_t shared_size_bytes;
  uint64_t const_size_bytes;
  uint64_t local_size_bytes;
  int32_t max_threads_per_block;
  int32_t num_regs;
  int32_t ptx_version;
  int32_t binary_version;
  int32_t cache_mode_ca;
  int32_t max_dynamic_shared_size_bytes;
  int32_t preferred_shared_memory_carveout;
  uint32_t pad;
};
static_assert(sizeof(FunctionAttributesReply) == 56);

/// kFuncSetAttribute: `attribute` is a cudaFuncAttribute number
/// (= CUfunction_attribute): 8 max dynamic shared size, 9 preferred carveout.
struct FuncSetAttributeRequest {
  uint32_t function_id;
  int32_t attribute;
  int32_t value;
  uint32_t pad;
};
static_assert(sizeof(FuncSetAttributeRequest) == 16);
inline constexpr int32_t kFuncAttrMaxDynamicSharedSize = 8;
inline constexpr int32_t kFuncAttrPreferredCarveout = 9;

template <typename T>
inline constexpr bool kIsWireStruct = std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>;
static_assert(kIsWireStruct<MemcpyRequest> && kIsWireStruct<LaunchRequest> &&
              kIsWireStruct<WireDeviceProps>);
static_assert(sizeof(MemGetInfoReply) <= ring::kSlotResultBytes &&
              sizeof(GetGlobalReply) <= ring::kSlotResultBytes &&
              sizeof(FunctionAttributesReply) <= ring::kSlotResultBytes);

// ---------------------------------------------------------------- client helpers

/// App side: takes a free staging chunk for a reply (D2H, device
/// properties): CAS kChunkFree -> kChunkFilling on the region's ChunkState,
/// waiting on RegionHeader::staging (bounded spin, then futex with liveness
/// checks, like every ring wait) while none is free. Shares the chunk pool
/// with RingClient::PostBulk.
Status AcquireReplyChunk(void* region_base, const ring::RingGeometry& g, const ring::WaitPolicy& wait,
                         const ring::AliveFn& alive, uint32_t* chunk);
/// App side: returns a reply chunk to the pool and wakes waiters.
void ReleaseReplyChunk(void* region_base, const ring::RingGeometry& g, uint32_t chunk);
/// The bytes of a chunk (either side; chunk must be < chunk_count).
std::byte* ChunkBytes(void* region_base, const ring::RingGeometry& g, uint32_t chunk);

}  // namespace phos::wire
