// This phosd as a member of a group of phosds coordinated through etcd
// (phosd --etcd; docs/protocols.md "Jobs across phosds").
//
// Join connects to etcd and takes a lease that a thread keeps alive; Announce
// registers the daemon under it (/phos/v1/daemons/<endpoint>) and watches the
// others: a phosd whose key goes (its lease expired: it died or lost etcd)
// is reported once through `on_peer_lost`. Stop (or the destructor) ends
// both threads and revokes the lease, so every key this phosd put under it
// goes at once.
//
// Threads: the keep-alive and the peer watch; the state they share is
// guarded by mu_. Everything else is set in Join/Announce, before the
// threads that read it start.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "cluster/etcd_client.h"
#include "common/status.h"

namespace phos::cluster {

struct ClusterOptions {
  std::string etcd_endpoints;  // --etcd HOST:PORT[,...]
  /// The lease's time to live: a phosd that dies is noticed by the others
  /// at most this long after (and a network pause longer than it ends this
  /// phosd's membership).
  int lease_ttl_s = 5;
  std::chrono::milliseconds connect_timeout{5000};
};

/// The keys phosd keeps in etcd, all under one root.
inline constexpr const char* kEtcdRoot = "/phos/v1/";

class ClusterMember {
 public:
  using PeerLost = std::function<void(const std::string& endpoint, const std::string& why)>;

  static Status Join(const ClusterOptions& options, std::unique_ptr<ClusterMember>* out);
  ~ClusterMember();

  /// Registers this phosd as reachable at `endpoint` (its peer plane,
  /// HOST:PORT) and starts watching the others. Once.
  Status Announce(const std::string& endpoint, PeerLost on_peer_lost);
  void Stop();

  EtcdClient& etcd() { return *etcd_; }
  std::int64_t lease() const { return lease_; }
  /// "" until Announce.
  std::string endpoint() const;
  /// Why the membership ended (the lease could not be kept), or "".
  std::string lost() const;

 private:
  ClusterMember(std::unique_ptr<EtcdClient> etcd, std::int64_t lease, int ttl_s);
  void KeepAliveLoop();
  void WatchPeers(PeerLost on_peer_lost);

  std::unique_ptr<EtcdClient> etcd_;
  const std::int64_t lease_;
  const int ttl_s_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string endpoint_;
  std::string lost_;
  std::thread keep_alive_;
  std::thread watch_;
};

}  // namespace phos::cluster
