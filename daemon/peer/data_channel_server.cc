#include "peer/data_channel_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "peer/data_channel.h"
#include "peer/peer_token.h"

namespace phos::peer {
namespace {

std::string AddressText(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace

Status DataChannelServer::Start(const std::string& host, DataChannelHandler handler) {
  handler_ = std::move(handler);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const bool any = host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::";
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (int rc = getaddrinfo(any ? nullptr : h.c_str(), "0", &hints, &res); rc != 0) {
    return Status::InvalidArgument("data channel: cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  Status status = Status::IoError("data channel: no address of '" + host + "' to listen on");
  for (addrinfo* ai = res; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
      status = Status::FromErrno("data channel: listen on " + host, errno);
      close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = bound.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                                       : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    listen_fd_ = fd;
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) return status;
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    Status e = Status::FromErrno("data channel: eventfd", errno);
    close(listen_fd_);
    listen_fd_ = -1;
    port_ = 0;
    return e;
  }
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void DataChannelServer::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && listen_fd_ < 0) return;
    stopping_ = true;
    for (int fd : live_) (void)shutdown(fd, SHUT_RDWR);  // handlers' reads and writes fail now
  }
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return active_ == 0; });
    tickets_.clear();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  port_ = 0;
}

Status DataChannelServer::IssueTicket(int purpose, std::string* ticket) {
  ticket->assign(kTicketBytes, '\0');
  std::size_t got = 0;
  while (got < ticket->size()) {
    const ssize_t n = getrandom(ticket->data() + got, ticket->size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("data channel: getrandom", errno);
    got += static_cast<std::size_t>(n);
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status::Unavailable("phosd is stopping");
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    it = it->second.expiry < now ? tickets_.erase(it) : std::next(it);
  }
  if (tickets_.size() >= 1024) return Status::Unavailable("data channel: too many tickets outstanding; try again");
  tickets_.emplace(*ticket, Ticket{now + kTicketTtl, purpose});
  return Status::Ok();
}

bool DataChannelServer::TakeTicketLocked(const std::string& ticket, int* purpose) {
  // Compared in constant time against each live ticket, so a timing
  // difference says nothing about how close a guess was.
  const auto now = std::chrono::steady_clock::now();
  for (auto it = tickets_.begin(); it != tickets_.end(); ++it) {
    if (it->second.expiry >= now && PeerTokenMatches(it->first, ticket)) {
      *purpose = it->second.purpose;
      tickets_.erase(it);
      return true;
    }
  }
  return false;
}

void DataChannelServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("data channel: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;  // Shutdown
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string peer = AddressText(from);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || active_ >= kMaxConnections) {
        spdlog::warn("data channel: refused a connection from {} ({} open)", peer, active_);
        close(fd);
        continue;
      }
      ++active_;
      live_.insert(fd);
    }
    std::thread([this, fd, peer = std::move(peer)]() mutable { Serve(fd, std::move(peer)); }).detach();
  }
}

void DataChannelServer::Serve(int fd, std::string peer) {
  SetSocketTimeouts(fd, static_cast<int>(kTicketWait.count()));
  char hello[sizeof kDataChannelMagic + kTicketBytes];
  Status s = SocketReader(fd)(hello, sizeof hello);
  bool admitted = false;
  int purpose = 0;
  if (s.ok() && std::memcmp(hello, kDataChannelMagic, sizeof kDataChannelMagic) == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    admitted = TakeTicketLocked(std::string(hello + sizeof kDataChannelMagic, kTicketBytes), &purpose);
  }
  if (admitted) {
    SetSocketTimeouts(fd, static_cast<int>(kIdleLimit.count()));
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    handler_(fd, peer, purpose);
  } else {
    spdlog::warn("data channel: refused a connection from {}: {}", peer,
                 s.ok() ? "no valid ticket (tickets come from PhosPeer.OpenDataChannel, with the peer token)"
                        : s.ToString());
  }
  // Notified under the lock: once Shutdown sees active_ == 0 it may destroy
  // the server, so this thread must not touch cv_ after unlocking.
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(fd);
  close(fd);
  --active_;
  cv_.notify_all();
}

}  // namespace phos::peer
