// Virtual ids for streams, events, modules and functions, minted app-side
// (docs/backends.md). Thread-safe. A cudaStream_t / cudaEvent_t handed to the app
// is the id itself cast to a pointer; stream ids start above the reserved
// handles cudaStreamLegacy (1) and cudaStreamPerThread (2).
//
// The per-thread default stream (docs/interposer.md "Streams, functions,
// reset and fork"): each host thread that names it gets its own blocking
// stream in phosd, created on first use and destroyed when the thread
// exits. It is named by cudaStreamPerThread / CU_STREAM_PER_THREAD (2)
// anywhere, and by stream 0 in the `_ptsz` / `_ptds` entry points that
// `nvcc --default-stream per-thread` maps calls to.
#pragma once

#include <cstdint>

namespace phos::client {

uint32_t NewStreamId();
uint32_t NewEventId();
uint32_t NewModuleId();
uint32_t NewFunctionId();

/// What stream 0 (NULL) means to the caller: the legacy default stream
/// (plain entry points) or this thread's per-thread stream (`_ptsz`/`_ptds`).
enum class DefaultStream { kLegacy, kPerThread };

/// cudaStream_t -> wire stream id. cudaStreamLegacy (1) is the legacy
/// stream 0; cudaStreamPerThread (2), and 0 under kPerThread, are this
/// thread's per-thread stream (created in phosd on first use; if that
/// fails, the returned id is one phosd does not know, so the call fails
/// with cudaErrorInvalidResourceHandle and the reason is printed once).
uint32_t StreamIdOf(const void* stream, DefaultStream zero = DefaultStream::kLegacy);
/// The calling thread's per-thread stream id on its current GPU (one per
/// thread and GPU, as in CUDA; creating it if needed).
uint32_t PerThreadStreamId();
/// Forgets every thread's per-thread stream (cudaDeviceReset destroyed them
/// in phosd): each thread creates a new one on its next use.
void ForgetPerThreadStreams();

/// Flags and priority of created streams (cudaStreamGetFlags/GetPriority).
/// Recorded by the stream-creating call once phosd accepted the stream.
void NoteStreamCreated(uint32_t id, unsigned flags, int priority);
void NoteStreamDestroyed(uint32_t id);
/// False for an id that is neither a live created stream nor a default one.
bool StreamInfo(uint32_t id, unsigned* flags, int* priority);
/// The app's ordinal of the GPU stream `id` was made on (the legacy
/// default stream: the calling thread's current GPU); false for an unknown
/// id.
bool StreamDevice(uint32_t id, int* device);
/// Whether `id` is a live created stream or a default one.
inline bool IsKnownStream(uint32_t id) {
  unsigned flags = 0;
  int priority = 0;
  return StreamInfo(id, &flags, &priority);
}
/// cudaDeviceReset: every created stream is gone.
void ForgetCreatedStreams();
/// The attributes an app set on a stream (stream_attributes.cc): dropped
/// when the stream goes (its id may be reused), all of them at a reset.
void ForgetStreamAttributes(uint32_t id);
void ForgetAllStreamAttributes();

void* StreamHandleOf(uint32_t id);
uint32_t EventIdOf(const void* event);
void* EventHandleOf(uint32_t id);

}  // namespace phos::client
