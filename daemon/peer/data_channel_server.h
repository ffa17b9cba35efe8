// DataChannelServer: the destination's listener for data channels
// (data_channel.h; docs/migration.md "Data channel"). It binds an
// ephemeral TCP port on the host of phosd's --listen, hands out one-use
// tickets (PhosPeer.OpenDataChannel, whose caller proved the peer token),
// and gives each connection that presents the magic and a live ticket to
// the handler on a thread of its own.
//
// Threads: Start/Shutdown from the owner's thread; IssueTicket from gRPC
// threads. One accept thread; one thread per connection (at most
// kMaxConnections at once: more are closed at once, as are connections
// without a valid ticket within kTicketWait). mu_ guards tickets_, live_
// and active_; cv_ is notified when active_ drops.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/status.h"

namespace phos::peer {

/// Serves one authenticated data channel; `fd` is closed by the server
/// after it returns. `peer`: the remote address, for messages; `purpose`:
/// the stream its ticket was issued for (peer::v1::DataChannelPurpose).
using DataChannelHandler = std::function<void(int fd, const std::string& peer, int purpose)>;

class DataChannelServer {
 public:
  static constexpr std::chrono::seconds kTicketTtl{60};
  static constexpr std::chrono::seconds kTicketWait{10};  // magic + ticket must arrive within this
  static constexpr std::chrono::seconds kIdleLimit{60};   // a stream silent this long is dropped
  static constexpr int kMaxConnections = 16;

  DataChannelServer() = default;
  ~DataChannelServer() { Shutdown(); }
  DataChannelServer(const DataChannelServer&) = delete;
  DataChannelServer& operator=(const DataChannelServer&) = delete;

  /// Listens on `host` (an address or name; "" or "0.0.0.0" = any), port 0.
  Status Start(const std::string& host, DataChannelHandler handler);
  /// Stops accepting, ends live connections (their handlers see the socket
  /// shut down) and waits for their threads. Idempotent.
  void Shutdown();
  int port() const { return port_; }

  /// A fresh ticket (kTicketBytes random bytes) for a stream of `purpose`,
  /// valid once within kTicketTtl.
  Status IssueTicket(int purpose, std::string* ticket);

 private:
  void AcceptLoop();
  void Serve(int fd, std::string peer);
  /// mu_ held: true (and forgets it, *purpose = its purpose) when `ticket`
  /// was issued and is live.
  bool TakeTicketLocked(const std::string& ticket, int* purpose);

  DataChannelHandler handler_;  // set by Start, then only read
  int listen_fd_ = -1;          // owner's thread (Start/Shutdown)
  int wake_fd_ = -1;            // eventfd: wakes the accept loop at Shutdown
  int port_ = 0;
  std::thread accept_thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  struct Ticket {
    std::chrono::steady_clock::time_point expiry;
    int purpose = 0;
  };
  std::map<std::string, Ticket> tickets_;
  std::set<int> live_;  // sockets of running connections (shut down by Shutdown)
  int active_ = 0;      // connection threads not yet finished
  bool stopping_ = false;
};

}  // namespace phos::peer
