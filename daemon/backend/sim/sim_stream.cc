#include "backend/sim/sim_stream.h"

#include "backend/backend.h"

#include <utility>

namespace phos::backend::sim {

// Everything the worker and the waiters share.
struct SimStream::Progress::State {
  mutable std::mutex mu;                   // protects every field below
  std::condition_variable work_cv;         // worker waits for ops / closing
  mutable std::condition_variable done_cv; // waiters wait for `completed`
  struct Item {
    Op op;
    std::function<void()> after;
  };
  std::deque<Item> queue;                  // ops not yet started
  std::uint64_t enqueued = 0;              // seq of the last op enqueued
  std::uint64_t completed = 0;             // seq of the last op that ran
  Status error;                            // first failure (sticky)
  bool closing = false;                    // worker exits once the queue is empty
  bool started = false;                    // worker thread exists
  // The owner's abandon flag (null = never): set, ops are skipped. Immutable.
  std::shared_ptr<const std::atomic<bool>> abandoned;
  bool Abandoned() const { return abandoned && abandoned->load(std::memory_order_relaxed); }
};

bool SimStream::Progress::Done(std::uint64_t seq) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->completed >= seq;
}

void SimStream::Progress::WaitFor(std::uint64_t seq) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->done_cv.wait(lock, [&] { return state_->completed >= seq; });
}

Status SimStream::Progress::error() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->error;
}

SimStream::SimStream(std::size_t max_queued, std::shared_ptr<const std::atomic<bool>> abandoned)
    : state_(std::make_shared<Progress::State>()), max_queued_(max_queued) {
  state_->abandoned = std::move(abandoned);
}

SimStream::~SimStream() {
  bool started;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closing = true;
    started = state_->started;
  }
  state_->work_cv.notify_all();
  if (started) worker_.join();
}

std::uint64_t SimStream::Enqueue(Op op, std::function<void()> after) {
  std::uint64_t seq;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (max_queued_ > 0) {
      // done_cv is notified after every op (run or skipped); once the owner
      // abandons, the running op ends soon and the rest are skipped.
      state_->done_cv.wait(lock, [&] { return state_->queue.size() < max_queued_ || state_->Abandoned(); });
    }
    state_->queue.push_back(Progress::State::Item{std::move(op), std::move(after)});
    seq = ++state_->enqueued;
    if (!state_->started) {
      state_->started = true;
      worker_ = std::thread(&SimStream::Run, state_);
    }
  }
  state_->work_cv.notify_one();
  return seq;
}

std::uint64_t SimStream::enqueued() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->enqueued;
}

bool SimStream::Idle() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->completed == state_->enqueued;
}

void SimStream::Run(std::shared_ptr<Progress::State> s) {
  for (;;) {
    Progress::State::Item item;
    bool skip = false;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->work_cv.wait(lock, [&] { return s->closing || !s->queue.empty(); });
      if (s->queue.empty()) return;  // closing and drained
      item = std::move(s->queue.front());
      s->queue.pop_front();
      skip = s->Abandoned();
    }
    Status st = skip ? AbandonedStatus("queued work dropped") : item.op();
    item.op = nullptr;  // release what the op captured before reporting completion
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (!st.ok() && s->error.ok()) s->error = st;
      ++s->completed;
      // Under mu, so "stream caught up" and what `after` publishes (an event
      // completing) are seen together. Lock order: stream mu, then the
      // event's mu; nothing takes them the other way round.
      if (item.after) item.after();
    }
    item.after = nullptr;
    s->done_cv.notify_all();
  }
}

}  // namespace phos::backend::sim
