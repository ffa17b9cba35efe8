#include "cluster/etcd_fabric.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "peer/fabric_message.h"
#include "peer/peer_client.h"
#include "peer/peer_token.h"

namespace phos::cluster {

std::string CommunicatorPrefix(const backend::CommunicatorId& comm) {
  static const char* kDigits = "0123456789abcdef";
  std::string hex;
  hex.reserve(comm.size() * 2);
  for (std::uint8_t b : comm) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return std::string(kEtcdRoot) + "comms/" + hex + "/";
}

EtcdFabric::EtcdFabric(ClusterMember* member, std::string peer_token)
    : member_(member), peer_token_(std::move(peer_token)) {}

Status EtcdFabric::Rendezvous(const backend::CommunicatorId& comm, int nranks, int rank,
                              const std::function<bool()>& cancelled, std::vector<std::string>* where) {
  const std::string self = member_->endpoint();
  if (self.empty()) return Status::FailedPrecondition("this phosd has not registered in etcd yet");
  const std::string prefix = CommunicatorPrefix(comm);
  const std::string mine = self + " " + std::to_string(nranks);
  bool created = false;
  std::string existing;
  PHOS_RETURN_IF_ERROR(member_->etcd().PutIfAbsent(prefix + std::to_string(rank), mine, member_->lease(), &created,
                                                   &existing));
  if (!created) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of this communicator has joined already (at " +
                                   existing.substr(0, existing.find(' ')) + "; two processes passed one rank)");
  }
  Status disagree;
  std::vector<std::string> found;
  Status s = member_->etcd().WaitPrefix(
      prefix,
      [&](const std::vector<KeyValue>& kvs) {
        std::vector<std::string> at(static_cast<std::size_t>(nranks));
        int count = 0;
        for (const KeyValue& kv : kvs) {
          std::istringstream key(kv.key.substr(prefix.size())), value(kv.value);
          int r = -1, n = 0;
          std::string endpoint;
          key >> r;
          value >> endpoint >> n;
          if (n != nranks || r < 0 || r >= nranks) {
            disagree = Status::InvalidArgument("the ranks disagree on the communicator's size: rank " +
                                               std::to_string(rank) + " says " + std::to_string(nranks) + ", rank " +
                                               std::to_string(r) + " (at " + endpoint + ") says " + std::to_string(n));
            return true;
          }
          if (at[static_cast<std::size_t>(r)].empty()) ++count;
          at[static_cast<std::size_t>(r)] = endpoint;
        }
        if (count < nranks) return false;
        found = std::move(at);
        return true;
      },
      std::chrono::steady_clock::time_point::max(), cancelled,
      "ncclCommInitRank of rank " + std::to_string(rank) + " waiting for all " + std::to_string(nranks) +
          " ranks in etcd");
  if (s.ok()) s = disagree;
  if (!s.ok()) {
    Leave(comm, rank);
    return s;
  }
  where->assign(found.size(), "");
  for (std::size_t r = 0; r < found.size(); ++r) {
    if (found[r] != self) (*where)[r] = found[r];
  }
  return Status::Ok();
}

void EtcdFabric::Leave(const backend::CommunicatorId& comm, int rank) {
  if (Status s = member_->etcd().Delete(CommunicatorPrefix(comm) + std::to_string(rank)); !s.ok()) {
    spdlog::warn("cluster: cannot remove rank {}'s key: {}", rank, s.message());
  }
}

Status EtcdFabric::StubFor(const std::string& endpoint, std::shared_ptr<peer::v1::PhosPeer::Stub>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& stub = stubs_[endpoint];
  if (!stub) {
    stub = peer::v1::PhosPeer::NewStub(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  }
  *out = stub;
  return Status::Ok();
}

Status EtcdFabric::Send(const std::string& endpoint, const backend::FabricMessage& message) {
  std::shared_ptr<peer::v1::PhosPeer::Stub> stub;
  PHOS_RETURN_IF_ERROR(StubFor(endpoint, &stub));
  peer::v1::CollectiveMessage request;
  peer::EncodeFabricMessage(message, &request);
  peer::v1::CollectiveReply reply;
  grpc::ClientContext ctx;
  ctx.AddMetadata(peer::kPeerTokenHeader, peer_token_);
  // Not wait_for_ready for parts: a peer that refuses connections is gone,
  // and the communicator must fail now (NCCL's ncclRemoteError), not in
  // 30 s. An abort waits briefly for a connection that is still coming up
  // (under load the channel may be between states): lost, it would leave
  // the peer's ranks waiting in a collective that never completes (the
  // peer also refuses parts of a communicator that ended here, the other
  // guard); a dead peer costs the aborting rank kAbortConnectTimeout.
  if (message.kind == backend::FabricMessage::Kind::kAbort) {
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + kAbortConnectTimeout);
  } else {
    ctx.set_deadline(std::chrono::system_clock::now() + kSendTimeout);
  }
  grpc::Status g = stub->Collective(&ctx, request, &reply);
  if (!g.ok()) return peer::PeerStatus(endpoint, g);
  return Status::Ok();
}

}  // namespace phos::cluster
