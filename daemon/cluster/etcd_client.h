// A small client of etcd's v3 gRPC API (proto/etcd.proto): what phosd needs
// to coordinate with other phosds (docs/protocols.md "Jobs across phosds").
//
// One channel to the first endpoint that answers. Every call has a deadline
// (kCallTimeout); errors are Unavailable naming the endpoint. Thread-safe
// (gRPC stubs are), no state besides the channel.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "etcd.grpc.pb.h"

namespace phos::cluster {

struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;
};

class EtcdClient {
 public:
  /// A deadline for each unary call.
  static constexpr std::chrono::milliseconds kCallTimeout{5000};

  /// `endpoints`: "HOST:PORT[,HOST:PORT...]" (an "http://" prefix is
  /// accepted and ignored); uses the first that answers within
  /// `connect_timeout`. Unavailable naming them all when none does.
  static Status Connect(const std::string& endpoints, std::chrono::milliseconds connect_timeout,
                        std::unique_ptr<EtcdClient>* out);

  const std::string& endpoint() const { return endpoint_; }

  /// Sets `key` (attached to `lease` when not 0: gone when the lease ends).
  Status Put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  /// Sets `key` only if it does not exist; `*created` says whether it did
  /// (and `*existing` gets the value that was there when not).
  Status PutIfAbsent(const std::string& key, const std::string& value, std::int64_t lease, bool* created,
                     std::string* existing = nullptr);
  /// The value of `key`; NotFound when there is none.
  Status Get(const std::string& key, std::string* value);
  /// Every key starting with `prefix`, sorted; `revision`: the store's
  /// revision the answer is from (optional).
  Status List(const std::string& prefix, std::vector<KeyValue>* out, std::int64_t* revision = nullptr);
  Status Delete(const std::string& key);
  Status DeletePrefix(const std::string& prefix);

  /// A lease of `ttl_s` seconds (keys put with it go when it expires).
  Status GrantLease(std::int64_t ttl_s, std::int64_t* id);
  /// Renews the lease once; NotFound when it expired already.
  Status KeepAlive(std::int64_t id);
  Status RevokeLease(std::int64_t id);

  /// Blocks until `done(keys under prefix)` is true: re-reads the prefix
  /// whenever a watch on it reports a change (and at least every 250 ms, to
  /// look at `cancelled`). Unavailable when `deadline` passes or
  /// `cancelled()` returns true first, naming `what`.
  Status WaitPrefix(const std::string& prefix, const std::function<bool(const std::vector<KeyValue>&)>& done,
                    std::chrono::steady_clock::time_point deadline, const std::function<bool()>& cancelled,
                    const std::string& what);

  /// Calls `changed` with the keys under `prefix` now and after every
  /// change, until `stop()` returns true (looked at every 250 ms) or etcd
  /// cannot be reached for `give_up` (then the last error).
  Status WatchPrefix(const std::string& prefix, const std::function<void(const std::vector<KeyValue>&)>& changed,
                     const std::function<bool()>& stop, std::chrono::milliseconds give_up);

  /// The range end that makes a request cover every key starting with `prefix`.
  static std::string PrefixEnd(const std::string& prefix);

 private:
  EtcdClient(std::string endpoint, std::shared_ptr<grpc::Channel> channel);
  Status Error(const char* call, const grpc::Status& g) const;
  /// Waits up to `wait` for a change under `prefix` after `revision`.
  Status WaitForChange(const std::string& prefix, std::int64_t revision, std::chrono::milliseconds wait);

  const std::string endpoint_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
};

}  // namespace phos::cluster
