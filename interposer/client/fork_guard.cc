// fork() after CUDA was initialised (docs/interposer.md "Streams,
// functions, reset and fork"). The child inherits the parent's mapping of
// the ring and copies of its fds; if it wrote into the ring, phosd would
// take its calls for the parent's (and the two would corrupt each other's
// completion slots). So the child drops the connection without touching it
// and every CUDA call there fails with cudaErrorInitializationError /
// CUDA_ERROR_NOT_INITIALIZED, as with the real driver. A child forked
// before any CUDA call had connected connects normally on its first call.
#include <pthread.h>

#include <atomic>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"

namespace phos::client {
namespace {

std::atomic<bool> g_forked_child{false};

// Runs in the child only, single-threaded, right after fork().
void OnForkChild() {
  if (Connection::Get().AbandonAfterFork()) g_forked_child.store(true, std::memory_order_release);
}

// Installed when libphos.so loads; the Connection object is created here
// too, so the child handler never allocates.
[[maybe_unused]] const bool g_installed = [] {
  (void)Connection::Get();
  return pthread_atfork(nullptr, nullptr, OnForkChild) == 0;
}();

}  // namespace

bool InForkedChild() { return g_forked_child.load(std::memory_order_acquire); }

}  // namespace phos::client
