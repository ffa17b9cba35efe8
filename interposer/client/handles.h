// Virtual ids for streams, events, modules and functions, minted app-side
// (DESIGN §2). Thread-safe. A cudaStream_t / cudaEvent_t handed to the app
// is the id itself cast to a pointer; stream ids start above the reserved
// handles cudaStreamLegacy (1) and cudaStreamPerThread (2).
#pragma once

#include <cstdint>

namespace phos::client {

uint32_t NewStreamId();
uint32_t NewEventId();
uint32_t NewModuleId();
uint32_t NewFunctionId();

/// cudaStream_t -> wire stream id: 0, cudaStreamLegacy and
/// cudaStreamPerThread all map to 0 (the per-thread default stream is the
/// legacy stream for now).
uint32_t StreamIdOf(const void* stream);
void* StreamHandleOf(uint32_t id);
uint32_t EventIdOf(const void* event);
void* EventHandleOf(uint32_t id);

}  // namespace phos::client
