// backend::CollectiveFabric over etcd and the peer plane (docs/backends.md
// "Collectives across phosds"): communicators whose ranks are sessions of
// several phosds.
//
// Rendezvous: each rank puts /phos/v1/comms/<unique id, hex>/<rank> =
// "<endpoint> <nranks>" under this phosd's lease (create-only: a rank named
// twice is refused), then watches the prefix until all nranks ranks are
// there. The keys stay until this phosd's lease ends (a rank that forms and
// leaves at once must not vanish before a slower peer saw it); a join that
// gives up removes its own.
// Send: PhosPeer.Collective to the endpoint, authenticated with the peer
// token, one cached stub per endpoint (guarded by mu_).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/collective.h"
#include "cluster/cluster_member.h"
#include "peer.grpc.pb.h"

namespace phos::cluster {

class EtcdFabric final : public backend::CollectiveFabric {
 public:
  /// `member` must outlive this and be announced before the first
  /// Rendezvous. `peer_token`: the peer plane's token (all phosds of a job
  /// share it).
  EtcdFabric(ClusterMember* member, std::string peer_token);

  Status Rendezvous(const backend::CommunicatorId& comm, int nranks, int rank, const std::function<bool()>& cancelled,
                    std::vector<std::string>* where) override;
  Status Send(const std::string& endpoint, const backend::FabricMessage& message) override;
  void Leave(const backend::CommunicatorId& comm, int rank) override;
  const std::string& peer_token() const { return peer_token_; }

  /// How long one Send waits for the peer (connecting included).
  static constexpr std::chrono::seconds kSendTimeout{30};
  /// An ABORT waits this long for a connection still coming up (a dead
  /// peer must not hold the aborting rank much longer).
  static constexpr std::chrono::seconds kAbortConnectTimeout{2};

 private:
  Status StubFor(const std::string& endpoint, std::shared_ptr<peer::v1::PhosPeer::Stub>* out);

  ClusterMember* const member_;
  const std::string peer_token_;
  std::mutex mu_;  // guards stubs_
  std::map<std::string, std::shared_ptr<peer::v1::PhosPeer::Stub>> stubs_;
};

/// "/phos/v1/comms/<hex of the 128-byte id>/".
std::string CommunicatorPrefix(const backend::CommunicatorId& comm);

}  // namespace phos::cluster
