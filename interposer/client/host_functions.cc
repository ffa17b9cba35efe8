// Host functions in stream order (docs/interposer.md "Host functions in
// stream order"): cudaLaunchHostFunc, cudaStreamAddCallback,
// cuLaunchHostFunc, cuStreamAddCallback and their _ptsz forms.
//
// The function is the app's code, so it runs here, on one host-function
// thread of libphos.so (CUDA, too, runs a context's host functions on a
// thread of its own, one at a time). phosd holds the stream at the
// function's place (kLaunchHostFunc, daemon/session/host_functions.h) until
// that thread has run it:
//   1. the call takes a gate word in shared pinned memory (a page from the
//      pinned arena, which phosd maps) and queues {word, function} here;
//   2. kLaunchHostFunc (called: a refusal comes back at once) puts the gate
//      on the stream;
//   3. when the stream gets there phosd stores kHostFuncReached into the
//      word and rings the page's doorbell (a futex word);
//   4. the host-function thread, asleep on the doorbell, runs every queued
//      function whose word is reached, stores kHostFuncDone, wakes phosd.
// The thread never waits for phosd's consumer, so a cudaStreamSynchronize
// of the stream from any app thread completes once the function ran.
//
// Not checked: a host function must not call CUDA (CUDA's rule); under
// phos such a call from a function that a synchronising call of another
// thread waits for would wait for itself.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/driver_internal.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"
#include "ring/waiter.h"

namespace phos::client {
namespace {

using Word = std::atomic<uint32_t>;

// One page of gate words: word 0 of the first page is the doorbell; every
// other word is a gate. Words are handed out round robin, so a word is
// reused only after every other one was (phosd may still be reading a word
// whose function just ran: its next use must not come at once).
constexpr size_t kPageBytes = 4096;
constexpr size_t kWordsPerPage = kPageBytes / sizeof(Word);

struct Queued {
  Word* word = nullptr;
  std::function<void()> run;
};

// Lock: mu guards everything but the words themselves (atomics shared with
// phosd). Never destroyed: calls may come during exit.
struct HostFunctions {
  std::mutex mu;
  std::condition_variable queued_cv;  // the thread waits here while nothing is queued
  std::vector<Word*> pages;           // pinned pages of gate words
  std::deque<Word*> free_words;       // not in use: taken from the front, given back at the end
  std::deque<Queued> queue;           // in launch order
  bool thread_started = false;
  Word* doorbell() const { return pages.front(); }
};
HostFunctions& Functions() {
  static auto* h = new HostFunctions;
  return *h;
}

// Caller holds mu. A free gate word, from a new pinned page when none is
// left (CUDA bounds queued host functions only by memory).
cudaError_t TakeWord(HostFunctions& h, Word** out) {
  if (h.free_words.empty()) {
    void* page = nullptr;
    if (cudaError_t e = cudaMallocHost(&page, kPageBytes); e != cudaSuccess) return e;
    auto* words = static_cast<Word*>(page);
    for (size_t i = 0; i < kWordsPerPage; ++i) words[i].store(wire::kHostFuncArmed);
    const size_t first = h.pages.empty() ? 1 : 0;  // word 0 of the first page: the doorbell
    h.pages.push_back(words);
    for (size_t i = first; i < kWordsPerPage; ++i) h.free_words.push_back(&words[i]);
  }
  *out = h.free_words.front();
  h.free_words.pop_front();
  return cudaSuccess;
}

// The host-function thread: runs each queued function once phosd reached
// its gate, in launch order among the reached ones.
void RunHostFunctions() {
  HostFunctions& h = Functions();
  for (;;) {
    Word* bell = nullptr;
    {
      std::unique_lock<std::mutex> lock(h.mu);
      h.queued_cv.wait(lock, [&] { return !h.queue.empty(); });
      bell = h.doorbell();
    }
    // Read the doorbell before looking at the words: a gate reached after
    // the look changes it, so the sleep below returns at once.
    const uint32_t rung = bell->load(std::memory_order_acquire);
    std::vector<Queued> ready;
    {
      std::lock_guard<std::mutex> lock(h.mu);
      for (auto it = h.queue.begin(); it != h.queue.end();) {
        if (it->word->load(std::memory_order_acquire) == wire::kHostFuncReached) {
          ready.push_back(std::move(*it));
          it = h.queue.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Queued& q : ready) {
      q.run();
      q.word->store(wire::kHostFuncDone, std::memory_order_seq_cst);
      ring::FutexWake(q.word, 1);
      std::lock_guard<std::mutex> lock(h.mu);
      h.free_words.push_back(q.word);
    }
    if (ready.empty()) (void)ring::FutexWait(bell, rung, /*timeout_ns=*/-1);
  }
}

// What the stream callback is told (below): the process's sticky error.
cudaError_t CallbackStatus();

}  // namespace

cudaError_t LaunchHostFunctionOn(uint32_t id, std::function<void()> run) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (cudaError_t e = StickyError(); e != cudaSuccess) return SetError(e);
  if (!IsKnownStream(id)) return SetError(cudaErrorInvalidResourceHandle);
  cudaError_t captured = cudaSuccess;
  if (MaybeCapture(id, cudaGraphNodeTypeHost, [run](uint32_t s) { return LaunchHostFunctionOn(s, run); },
                   &captured)) {
    return captured == cudaSuccess ? cudaSuccess : SetError(captured);
  }
  HostFunctions& h = Functions();
  Word* word = nullptr;
  uint64_t doorbell = 0;
  {
    std::lock_guard<std::mutex> lock(h.mu);
    if (cudaError_t e = TakeWord(h, &word); e != cudaSuccess) return SetError(e);
    word->store(wire::kHostFuncArmed, std::memory_order_relaxed);
    doorbell = reinterpret_cast<uint64_t>(h.doorbell());
    h.queue.push_back({word, std::move(run)});
    if (!h.thread_started) {
      std::thread(RunHostFunctions).detach();  // lives as long as the process
      h.thread_started = true;
    }
  }
  h.queued_cv.notify_one();
  const wire::HostFuncRequest req{reinterpret_cast<uint64_t>(word), doorbell};
  WireStatus w = Connection::Get().Call(wire::op::kLaunchHostFunc, id, std::as_bytes(std::span(&req, 1)));
  if (w != WireStatus::kSuccess) {
    // Not queued in phosd: it will never be reached.
    std::lock_guard<std::mutex> lock(h.mu);
    for (auto it = h.queue.begin(); it != h.queue.end(); ++it) {
      if (it->word == word) {
        h.queue.erase(it);
        break;
      }
    }
    h.free_words.push_back(word);
  }
  return Finish(w);
}

namespace {
// What a stream callback is told: the stream's error so far (a sticky one,
// the only kind a phos stream keeps), else success.
cudaError_t CallbackStatus() { return StickyError(); }

cudaError_t Launch(const void* stream, DefaultStream zero, std::function<void()> run) {
  return LaunchHostFunctionOn(StreamIdOf(stream, zero), std::move(run));
}
}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (fn == nullptr) return SetError(cudaErrorInvalidValue);
  return Launch(stream, DefaultStream::kLegacy, [fn, data] { fn(data); });
}
PHOS_EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (fn == nullptr) return SetError(cudaErrorInvalidValue);
  return Launch(stream, DefaultStream::kPerThread, [fn, data] { fn(data); });
}
PHOS_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t cb, void* data,
                                              unsigned int flags) {
  if (cb == nullptr || flags != 0) return SetError(cudaErrorInvalidValue);
  return Launch(stream, DefaultStream::kLegacy, [cb, stream, data] { cb(stream, CallbackStatus(), data); });
}
PHOS_EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t cb, void* data,
                                                   unsigned int flags) {
  if (cb == nullptr || flags != 0) return SetError(cudaErrorInvalidValue);
  return Launch(stream, DefaultStream::kPerThread, [cb, stream, data] { cb(stream, CallbackStatus(), data); });
}

namespace {
CUresult DriverLaunch(CUstream s, DefaultStream zero, std::function<void()> run) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(Launch(s, zero, std::move(run)));
}
}  // namespace

PHOS_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return DriverLaunch(s, DefaultStream::kLegacy, [fn, data] { fn(data); });
}
PHOS_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return DriverLaunch(s, DefaultStream::kPerThread, [fn, data] { fn(data); });
}
PHOS_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return DriverLaunch(s, DefaultStream::kLegacy,
                      [cb, s, data] { cb(s, static_cast<CUresult>(ToCu(CallbackStatus())), data); });
}
PHOS_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return DriverLaunch(s, DefaultStream::kPerThread,
                      [cb, s, data] { cb(s, static_cast<CUresult>(ToCu(CallbackStatus())), data); });
}
