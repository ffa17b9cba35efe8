#include "session/session_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/clock_util.h"

namespace phos::session {

SessionServer::SessionServer(backend::Backend* backend, SessionServerOptions options, SessionCallbacks callbacks)
    : backend_(backend), options_(std::move(options)), callbacks_(std::move(callbacks)) {}

SessionServer::~SessionServer() { Stop(); }

Status SessionServer::Start(const std::string& path) {
  PHOS_RETURN_IF_ERROR(ring::ChannelListener::Listen(path, &listener_));
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    listener_.reset();
    return Status::FromErrno("eventfd", errno);
  }
  path_ = path;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void SessionServer::Wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof one);
  (void)n;  // EAGAIN = the counter is already non-zero: a wake-up is pending
}

void SessionServer::SetHookFactory(HookFactory factory) {
  std::lock_guard<std::mutex> lock(mu_);
  hook_factory_ = std::move(factory);
}

size_t SessionServer::session_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->finished() ? 0 : 1;
  return n;
}

void SessionServer::AcceptOne() {
  std::unique_ptr<ring::ChannelConnection> conn;
  Status s = listener_->Accept(options_.hello_timeout_ms, &conn);
  if (!s.ok()) {
    if (s.code() != Status::Code::kNotReady) spdlog::warn("data plane: refused a connection: {}", s.ToString());
    return;
  }
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  std::unique_ptr<ring::SharedRegion> region;
  s = conn->Establish(options_.ring, id, &region);
  if (!s.ok()) {
    spdlog::warn("data plane: cannot set up a ring for pid {}: {}", conn->peer_pid(), s.ToString());
    conn->Reject(s);
    return;
  }
  std::unique_ptr<AdmissionHook> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (hook_factory_) hook = hook_factory_(id);
  }
  auto session = std::make_shared<Session>(id, std::move(conn), std::move(region), backend_, std::move(hook),
                                           callbacks_);
  session->set_on_finished([this] { Wake(); });
  session->set_context_pool(options_.context_pool);
  session->set_signature_cache(options_.signature_cache);
  session->set_comm_book(&comm_book_);
  s = session->Start();
  if (!s.ok()) {
    spdlog::warn("data plane: cannot start session {}: {}", id, s.ToString());
    return;  // ~Session closes the ring: the app's first call gets Unavailable
  }
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.emplace(id, std::move(session));
}

Status SessionServer::Adopt(std::unique_ptr<ring::ChannelConnection> conn,
                            std::unique_ptr<ring::SharedRegion> region, std::shared_ptr<Session>* out) {
  if (stop_.load(std::memory_order_acquire)) return Status::Unavailable("data plane is stopping");
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  std::unique_ptr<AdmissionHook> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (hook_factory_) hook = hook_factory_(id);
  }
  auto session = std::make_shared<Session>(id, std::move(conn), std::move(region), backend_, std::move(hook),
                                           callbacks_);
  session->set_on_finished([this] { Wake(); });
  session->set_context_pool(options_.context_pool);
  session->set_signature_cache(options_.signature_cache);
  session->set_comm_book(&comm_book_);
  session->set_start_gated();
  PHOS_RETURN_IF_ERROR(session->PrepareContext().WithContext("a GPU context for the adopted session"));
  PHOS_RETURN_IF_ERROR(session->Start().WithContext("starting the adopted session"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.emplace(id, session);
  }
  Wake();  // the server thread polls the new socket from its next round
  *out = std::move(session);
  return Status::Ok();
}

std::shared_ptr<Session> SessionServer::FindById(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::shared_ptr<Session> SessionServer::FindByPid(pid_t pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Session> found;
  for (const auto& [id, s] : sessions_) {
    if (s->pid() == pid && !s->finished() && !s->stop_requested()) found = s;  // ids grow: the newest wins
  }
  return found;
}

bool SessionServer::PidHasSession(pid_t pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, s] : sessions_) {
    if (s->pid() == pid && !s->finished()) return true;
  }
  return false;
}

void SessionServer::Reap(bool all) {
  std::vector<std::shared_ptr<Session>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (all || it->second->finished()) {
        done.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : done) s->RequestStop();
  if (all) {
    // Give every consumer a moment, then say who is still busy and with
    // what: a consumer stuck in the driver makes the joins below wait
    // (phosd's --stop-timeout ends that wait).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    auto unfinished = [&done] {
      for (const auto& s : done)
        if (!s->finished()) return true;
      return false;
    };
    while (unfinished() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    LogUnfinished(done);
  }
  done.clear();  // ~Session joins (each consumer finishes tearing down)
}

void SessionServer::Loop() {
  std::vector<pollfd> fds;
  std::vector<Session*> polled;
  while (!stop_.load(std::memory_order_acquire)) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listener_->fd(), POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, s] : sessions_) {
        if (s->stop_requested()) continue;
        fds.push_back({s->fd(), POLLRDHUP, 0});
        polled.push_back(s.get());
      }
    }
    // Bounded: re-evaluates at least once a second even if nothing happens.
    int n = poll(fds.data(), fds.size(), 1000);
    if (n < 0 && errno != EINTR) {
      spdlog::error("data plane: poll: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t r = read(wake_fd_, &v, sizeof v);
      (void)r;
    }
    if (stop_.load(std::memory_order_acquire)) break;
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i + 2].revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) {
        spdlog::info("session {}: pid {} hung up", polled[i]->id(), polled[i]->pid());
        polled[i]->RequestStop();
      }
    }
    if (fds[1].revents & POLLIN) AcceptOne();
    Reap(false);
    LogSlowCalls();
  }
}

void SessionServer::LogSlowCalls() {
  if (options_.slow_call_log_ms <= 0) return;
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) live.push_back(s);
  }
  const int64_t now = SteadyNs();
  std::map<uint64_t, int64_t> still;
  for (const auto& s : live) {
    std::string what;
    int64_t since = 0;
    if (!s->BusyCall(&what, &since)) continue;
    const int64_t ms = (now - since) / 1000000;
    auto it = slow_logged_.find(s->id());
    const bool logged = it != slow_logged_.end() && it->second == since;
    if (logged || ms >= options_.slow_call_log_ms) still[s->id()] = since;
    if (logged || ms < options_.slow_call_log_ms) continue;
    spdlog::warn("session {}: pid {}: {} has been running for {} s{} (a kernel that never ends, or a driver call "
                 "waiting for one; the app waits too)",
                 s->id(), s->pid(), what, ms / 1000, s->stop_requested() ? " after the app hung up" : "");
  }
  slow_logged_.swap(still);
}

void SessionServer::LogUnfinished(const std::vector<std::shared_ptr<Session>>& sessions) const {
  const int64_t now = SteadyNs();
  for (const auto& s : sessions) {
    if (s->finished()) continue;
    std::string what;
    int64_t since = 0;
    if (s->BusyCall(&what, &since)) {
      spdlog::warn("phosd is stopping: session {} (pid {}) is still in {} (for {} ms); waiting for it", s->id(),
                   s->pid(), what, (now - since) / 1000000);
    } else {
      spdlog::warn("phosd is stopping: session {} (pid {}) is still releasing its GPU state; waiting for it",
                   s->id(), s->pid());
    }
  }
}

void SessionServer::Stop() {
  if (stop_.exchange(true, std::memory_order_acq_rel)) return;
  // Close every ring first so apps blocked in calls return at once, even
  // while consumers are still finishing the call they are executing.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : sessions_) s->RequestStop();
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  Reap(true);
  listener_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

}  // namespace phos::session
