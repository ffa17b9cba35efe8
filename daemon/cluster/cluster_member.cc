#include "cluster/cluster_member.h"

#include <spdlog/spdlog.h>

#include <map>
#include <vector>

namespace phos::cluster {

namespace {

std::string DaemonsPrefix() { return std::string(kEtcdRoot) + "daemons/"; }

}  // namespace

ClusterMember::ClusterMember(std::unique_ptr<EtcdClient> etcd, std::int64_t lease, int ttl_s)
    : etcd_(std::move(etcd)), lease_(lease), ttl_s_(ttl_s) {}

Status ClusterMember::Join(const ClusterOptions& options, std::unique_ptr<ClusterMember>* out) {
  if (options.lease_ttl_s < 2) return Status::InvalidArgument("--etcd-lease-ttl must be at least 2 seconds");
  std::unique_ptr<EtcdClient> etcd;
  PHOS_RETURN_IF_ERROR(EtcdClient::Connect(options.etcd_endpoints, options.connect_timeout, &etcd));
  std::int64_t lease = 0;
  PHOS_RETURN_IF_ERROR(etcd->GrantLease(options.lease_ttl_s, &lease));
  out->reset(new ClusterMember(std::move(etcd), lease, options.lease_ttl_s));
  ClusterMember* m = out->get();
  m->keep_alive_ = std::thread([m] { m->KeepAliveLoop(); });
  spdlog::info("cluster: etcd at {}, lease {:x} ({} s)", m->etcd_->endpoint(), lease, options.lease_ttl_s);
  return Status::Ok();
}

ClusterMember::~ClusterMember() { Stop(); }

std::string ClusterMember::endpoint() const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoint_;
}

std::string ClusterMember::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

Status ClusterMember::Announce(const std::string& endpoint, PeerLost on_peer_lost) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!endpoint_.empty()) return Status::FailedPrecondition("this phosd announced itself already");
  }
  bool created = false;
  std::string existing;
  PHOS_RETURN_IF_ERROR(etcd_->PutIfAbsent(DaemonsPrefix() + endpoint, std::to_string(getpid()), lease_, &created,
                                          &existing));
  if (!created) {
    return Status::AlreadyExists("another phosd (pid " + existing + ") is registered in etcd as " + endpoint +
                                 "; give each phosd its own --listen address");
  }
  std::lock_guard<std::mutex> lock(mu_);
  endpoint_ = endpoint;
  watch_ = std::thread([this, cb = std::move(on_peer_lost)] { WatchPeers(cb); });
  spdlog::info("cluster: registered as {}", endpoint);
  return Status::Ok();
}

void ClusterMember::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (keep_alive_.joinable()) keep_alive_.join();
  if (watch_.joinable()) watch_.join();
  // Every key put under the lease (the daemon, its ranks) goes with it.
  if (Status s = etcd_->RevokeLease(lease_); !s.ok()) spdlog::warn("cluster: {}", s.ToString());
}

void ClusterMember::KeepAliveLoop() {
  // Renew at a third of the TTL: two renewals may fail before it expires.
  const auto period = std::chrono::milliseconds(ttl_s_ * 1000 / 3);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    Status s = etcd_->KeepAlive(lease_);
    lock.lock();
    if (s.ok()) continue;
    if (s.code() == Status::Code::kNotFound && lost_.empty()) {
      // Our keys are gone: the others think this phosd died. Say so loudly;
      // its communicators across phosds have failed on their side.
      lost_ = s.message();
      spdlog::error("cluster: lost the etcd lease ({}): other phosds now consider this one gone", s.message());
    } else if (!s.ok()) {
      spdlog::warn("cluster: cannot renew the etcd lease: {}", s.message());
    }
  }
}

void ClusterMember::WatchPeers(PeerLost on_peer_lost) {
  const std::string prefix = DaemonsPrefix();
  std::set<std::string> seen;
  std::set<std::string> reported;
  auto stop = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  };
  Status s = etcd_->WatchPrefix(
      prefix,
      [&](const std::vector<KeyValue>& kvs) {
        std::set<std::string> now;
        for (const KeyValue& kv : kvs) now.insert(kv.key.substr(prefix.size()));
        for (const std::string& e : seen) {
          if (now.count(e) != 0 || reported.count(e) != 0) continue;
          reported.insert(e);
          spdlog::warn("cluster: the phosd at {} left etcd (its lease ended)", e);
          if (on_peer_lost) on_peer_lost(e, "its etcd lease ended (it stopped, died, or lost etcd)");
        }
        for (const std::string& e : now) {
          seen.insert(e);
          reported.erase(e);  // back again (restarted at the same address)
        }
      },
      stop, std::chrono::milliseconds(ttl_s_ * 1000));
  if (!s.ok()) spdlog::error("cluster: stopped watching the other phosds: {}", s.message());
}

}  // namespace phos::cluster
