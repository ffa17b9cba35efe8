// session_test's harness: a real Daemon, sessions read through ListSessions
// (session_test_harness.h).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "phos.grpc.pb.h"
#include "server/daemon.h"
#include "session_test_harness.h"

namespace phos::session::testing {
namespace {

class DaemonHarness final : public SessionTestHarness {
 public:
  Status Start(const std::string& socket_path, int gpus) override {
    options_.socket_path = socket_path;
    options_.backend.kind = backend::BackendKind::kSim;
    options_.backend.sim.device_count = gpus;
    daemon_ = std::make_unique<server::Daemon>();
    return daemon_->Start(options_);
  }
  backend::Backend* backend() override { return daemon_->backend(); }
  SessionServer* session_server() override { return daemon_->session_server(); }
  std::vector<v1::SessionInfo> ListSessions() override {
    auto stub = v1::Phos::NewStub(
        grpc::CreateChannel("unix:" + options_.socket_path, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::ListSessionsReply reply;
    grpc::Status rpc = stub->ListSessions(&ctx, v1::ListSessionsRequest(), &reply);
    if (!rpc.ok()) ADD_FAILURE() << rpc.error_message();
    return {reply.sessions().begin(), reply.sessions().end()};
  }
  void Shutdown() override { daemon_->Shutdown(); }

 private:
  server::DaemonOptions options_;
  std::unique_ptr<server::Daemon> daemon_;
};

}  // namespace

std::unique_ptr<SessionTestHarness> SessionTestHarness::Make() { return std::make_unique<DaemonHarness>(); }

}  // namespace phos::session::testing
