#include "cluster/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <sstream>
#include <thread>

namespace phos::cluster {

namespace {

std::chrono::system_clock::time_point CallDeadline() { return std::chrono::system_clock::now() + EtcdClient::kCallTimeout; }

KeyValue FromProto(const etcdserverpb::KeyValue& kv) {
  return KeyValue{kv.key(), kv.value(), kv.mod_revision(), kv.lease()};
}

}  // namespace

std::string EtcdClient::PrefixEnd(const std::string& prefix) {
  // etcd's rule: the prefix with its last byte below 0xff incremented
  // (trailing 0xff bytes dropped); "\0" means "to the end of the keys".
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

EtcdClient::EtcdClient(std::string endpoint, std::shared_ptr<grpc::Channel> channel)
    : endpoint_(std::move(endpoint)),
      channel_(std::move(channel)),
      kv_(etcdserverpb::KV::NewStub(channel_)),
      lease_(etcdserverpb::Lease::NewStub(channel_)),
      watch_(etcdserverpb::Watch::NewStub(channel_)) {}

Status EtcdClient::Connect(const std::string& endpoints, std::chrono::milliseconds connect_timeout,
                           std::unique_ptr<EtcdClient>* out) {
  std::vector<std::string> list;
  std::stringstream ss(endpoints);
  for (std::string e; std::getline(ss, e, ',');) {
    for (const char* scheme : {"http://", "https://"}) {
      if (e.rfind(scheme, 0) == 0) e = e.substr(std::string(scheme).size());
    }
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (!e.empty()) list.push_back(e);
  }
  if (list.empty()) return Status::InvalidArgument("--etcd names no endpoint (HOST:PORT[,HOST:PORT...])");
  const auto deadline = std::chrono::system_clock::now() + connect_timeout;
  // Each endpoint gets an equal share of the time, then all get what is left.
  const auto share = connect_timeout / static_cast<int>(list.size());
  for (int round = 0; round < 2; ++round) {
    for (const std::string& e : list) {
      auto channel = grpc::CreateChannel(e, grpc::InsecureChannelCredentials());
      const auto until = round == 0 ? std::min(deadline, std::chrono::system_clock::now() + share) : deadline;
      if (!channel->WaitForConnected(until)) continue;
      out->reset(new EtcdClient(e, std::move(channel)));
      return Status::Ok();
    }
    if (std::chrono::system_clock::now() >= deadline) break;
  }
  return Status::Unavailable("no etcd answers at " + endpoints + " (tried for " +
                             std::to_string(connect_timeout.count()) + " ms; is etcd running there?)");
}

Status EtcdClient::Error(const char* call, const grpc::Status& g) const {
  const std::string msg = "etcd at " + endpoint_ + ": " + call + ": " + g.error_message();
  switch (g.error_code()) {
    case grpc::StatusCode::NOT_FOUND: return Status::NotFound(msg);
    case grpc::StatusCode::INVALID_ARGUMENT: return Status::InvalidArgument(msg);
    case grpc::StatusCode::FAILED_PRECONDITION: return Status::FailedPrecondition(msg);
    default: return Status::Unavailable(msg);
  }
}

Status EtcdClient::Put(const std::string& key, const std::string& value, std::int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  etcdserverpb::PutResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = kv_->Put(&ctx, req, &resp);
  return g.ok() ? Status::Ok() : Error("Put", g);
}

Status EtcdClient::PutIfAbsent(const std::string& key, const std::string& value, std::int64_t lease, bool* created,
                               std::string* existing) {
  etcdserverpb::TxnRequest req;
  etcdserverpb::Compare* cmp = req.add_compare();
  cmp->set_key(key);
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_create_revision(0);  // the key does not exist
  etcdserverpb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  req.add_failure()->mutable_request_range()->set_key(key);
  etcdserverpb::TxnResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = kv_->Txn(&ctx, req, &resp);
  if (!g.ok()) return Error("Txn", g);
  *created = resp.succeeded();
  if (!resp.succeeded() && existing != nullptr && resp.responses_size() == 1 &&
      resp.responses(0).response_range().kvs_size() == 1) {
    *existing = resp.responses(0).response_range().kvs(0).value();
  }
  return Status::Ok();
}

Status EtcdClient::Get(const std::string& key, std::string* value) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  etcdserverpb::RangeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = kv_->Range(&ctx, req, &resp);
  if (!g.ok()) return Error("Range", g);
  if (resp.kvs_size() == 0) return Status::NotFound("etcd has no key " + key);
  *value = resp.kvs(0).value();
  return Status::Ok();
}

Status EtcdClient::List(const std::string& prefix, std::vector<KeyValue>* out, std::int64_t* revision) {
  etcdserverpb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  etcdserverpb::RangeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = kv_->Range(&ctx, req, &resp);
  if (!g.ok()) return Error("Range", g);
  out->clear();
  for (const etcdserverpb::KeyValue& kv : resp.kvs()) out->push_back(FromProto(kv));
  if (revision != nullptr) *revision = resp.header().revision();
  return Status::Ok();
}

Status EtcdClient::Delete(const std::string& key) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(key);
  etcdserverpb::DeleteRangeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = kv_->DeleteRange(&ctx, req, &resp);
  return g.ok() ? Status::Ok() : Error("DeleteRange", g);
}

Status EtcdClient::DeletePrefix(const std::string& prefix) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  etcdserverpb::DeleteRangeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = kv_->DeleteRange(&ctx, req, &resp);
  return g.ok() ? Status::Ok() : Error("DeleteRange", g);
}

Status EtcdClient::GrantLease(std::int64_t ttl_s, std::int64_t* id) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = lease_->LeaseGrant(&ctx, req, &resp);
  if (!g.ok()) return Error("LeaseGrant", g);
  if (!resp.error().empty()) return Status::Unavailable("etcd at " + endpoint_ + ": LeaseGrant: " + resp.error());
  *id = resp.id();
  return Status::Ok();
}

Status EtcdClient::KeepAlive(std::int64_t id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  auto stream = lease_->LeaseKeepAlive(&ctx);
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(id);
  etcdserverpb::LeaseKeepAliveResponse resp;
  if (!stream->Write(req) || !stream->Read(&resp)) {
    stream->WritesDone();
    grpc::Status g = stream->Finish();
    return Error("LeaseKeepAlive", g.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended") : g);
  }
  stream->WritesDone();
  ctx.TryCancel();  // the server keeps the stream open for more requests
  (void)stream->Finish();
  if (resp.ttl() <= 0) return Status::NotFound("etcd lease " + std::to_string(id) + " has expired");
  return Status::Ok();
}

Status EtcdClient::RevokeLease(std::int64_t id) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(id);
  etcdserverpb::LeaseRevokeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline());
  grpc::Status g = lease_->LeaseRevoke(&ctx, req, &resp);
  return g.ok() ? Status::Ok() : Error("LeaseRevoke", g);
}

Status EtcdClient::WaitForChange(const std::string& prefix, std::int64_t revision, std::chrono::milliseconds wait) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + wait);
  auto stream = watch_->Watch(&ctx);
  etcdserverpb::WatchRequest req;
  etcdserverpb::WatchCreateRequest* create = req.mutable_create_request();
  create->set_key(prefix);
  create->set_range_end(PrefixEnd(prefix));
  create->set_start_revision(revision + 1);
  if (!stream->Write(req)) {
    ctx.TryCancel();
    (void)stream->Finish();
    return Status::Ok();  // the caller re-reads either way
  }
  etcdserverpb::WatchResponse resp;
  while (stream->Read(&resp)) {
    if (resp.events_size() > 0 || resp.canceled() || resp.compact_revision() != 0) break;
  }
  ctx.TryCancel();
  (void)stream->Finish();
  return Status::Ok();
}

Status EtcdClient::WaitPrefix(const std::string& prefix, const std::function<bool(const std::vector<KeyValue>&)>& done,
                              std::chrono::steady_clock::time_point deadline, const std::function<bool()>& cancelled,
                              const std::string& what) {
  std::vector<KeyValue> kvs;
  for (;;) {
    std::int64_t revision = 0;
    PHOS_RETURN_IF_ERROR(List(prefix, &kvs, &revision));
    if (done(kvs)) return Status::Ok();
    if (cancelled && cancelled()) return Status::Unavailable(what + ": given up (cancelled)");
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return Status::Unavailable(what + ": not done in time");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    PHOS_RETURN_IF_ERROR(WaitForChange(prefix, revision, std::min(left, std::chrono::milliseconds(250))));
  }
}

Status EtcdClient::WatchPrefix(const std::string& prefix,
                               const std::function<void(const std::vector<KeyValue>&)>& changed,
                               const std::function<bool()>& stop, std::chrono::milliseconds give_up) {
  std::vector<KeyValue> kvs;
  auto last_ok = std::chrono::steady_clock::now();
  while (!stop()) {
    std::int64_t revision = 0;
    Status s = List(prefix, &kvs, &revision);
    if (!s.ok()) {
      if (std::chrono::steady_clock::now() - last_ok > give_up) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      continue;
    }
    last_ok = std::chrono::steady_clock::now();
    changed(kvs);
    (void)WaitForChange(prefix, revision, std::chrono::milliseconds(250));
  }
  return Status::Ok();
}

}  // namespace phos::cluster
