// session_data_plane_test's harness: the data plane alone, its sessions
// published into a SessionRegistry as Daemon::Start publishes them
// (session_test_harness.h).
#include "backend/backend_factory.h"
#include "server/session_registry.h"
#include "session_test_harness.h"

namespace phos::session::testing {
namespace {

class DataPlaneHarness final : public SessionTestHarness {
 public:
  ~DataPlaneHarness() override {
    server_.reset();  // before the backend its sessions use
    backend_.reset();
  }
  Status Start(const std::string& socket_path, int gpus) override {
    backend::BackendOptions options;
    options.kind = backend::BackendKind::kSim;
    options.sim.device_count = gpus;
    std::string why;
    if (Status s = backend::CreateBackend(options, &backend_, &why); !s.ok()) return s.WithContext(why);
    SessionCallbacks callbacks;
    server::SessionRegistry* registry = &registry_;
    callbacks.publish = [registry](const SessionSummary& s) { registry->Publish(s); };
    callbacks.unpublish = [registry](uint64_t id) { registry->Remove(id); };
    server_ = std::make_unique<SessionServer>(backend_.get(), SessionServerOptions{}, callbacks);
    return server_->Start(SessionServer::DataSocketPath(socket_path));
  }
  backend::Backend* backend() override { return backend_.get(); }
  SessionServer* session_server() override { return server_.get(); }
  std::vector<v1::SessionInfo> ListSessions() override { return registry_.List(); }
  void Shutdown() override { server_->Stop(); }

 private:
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<SessionServer> server_;
  server::SessionRegistry registry_;
};

}  // namespace

std::unique_ptr<SessionTestHarness> SessionTestHarness::Make() { return std::make_unique<DataPlaneHarness>(); }

}  // namespace phos::session::testing
