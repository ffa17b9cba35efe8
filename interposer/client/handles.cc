#include "interposer/client/handles.h"

#include <atomic>
#include <cstdint>

namespace phos::client {
namespace {
constexpr uint32_t kFirstStreamId = 16;  // above cudaStreamLegacy / cudaStreamPerThread
std::atomic<uint32_t> g_stream{kFirstStreamId};
std::atomic<uint32_t> g_event{1};
std::atomic<uint32_t> g_module{1};
std::atomic<uint32_t> g_function{1};
}  // namespace

uint32_t NewStreamId() { return g_stream.fetch_add(1, std::memory_order_relaxed); }
uint32_t NewEventId() { return g_event.fetch_add(1, std::memory_order_relaxed); }
uint32_t NewModuleId() { return g_module.fetch_add(1, std::memory_order_relaxed); }
uint32_t NewFunctionId() { return g_function.fetch_add(1, std::memory_order_relaxed); }

uint32_t StreamIdOf(const void* stream) {
  const auto v = reinterpret_cast<uintptr_t>(stream);
  return v < kFirstStreamId ? 0 : static_cast<uint32_t>(v);
}
void* StreamHandleOf(uint32_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }
uint32_t EventIdOf(const void* event) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(event)); }
void* EventHandleOf(uint32_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }

}  // namespace phos::client
