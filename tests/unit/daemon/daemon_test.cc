// phosd in-process: serving Status/ListSessions, refusing unimplemented
// RPCs, owning its socket.
#include "server/daemon.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "phos.grpc.pb.h"

namespace phos::server {
namespace {

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-daemon-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.socket_path = dir_ + "/phosd.sock";
    options_.backend.kind = backend::BackendKind::kSim;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<v1::Phos::Stub> Connect() {
    auto channel =
        grpc::CreateChannel("unix:" + options_.socket_path, grpc::InsecureChannelCredentials());
    return v1::Phos::NewStub(channel);
  }

  std::string dir_;
  DaemonOptions options_;
};

TEST_F(DaemonTest, StatusReportsSimBackendAndGpu) {
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  auto stub = Connect();
  grpc::ClientContext ctx;
  v1::StatusReply reply;
  grpc::Status rpc = stub->Status(&ctx, v1::StatusRequest(), &reply);
  ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  EXPECT_EQ(reply.backend(), "sim");
  ASSERT_EQ(reply.gpus_size(), 1);
  EXPECT_NE(reply.gpus(0).name().find("phos sim"), std::string::npos) << reply.gpus(0).name();
  EXPECT_EQ(reply.gpus(0).total_memory_bytes(), 80ull << 30);
  EXPECT_EQ(reply.gpus(0).compute_capability_major(), 9);
  EXPECT_EQ(reply.daemon_pid(), getpid());
  EXPECT_EQ(reply.socket_path(), options_.socket_path);
  EXPECT_FALSE(reply.version().empty());
  EXPECT_EQ(reply.session_count(), 0u);
}

TEST_F(DaemonTest, ListSessionsIsEmptyThenShowsRegisteredSessions) {
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  auto stub = Connect();
  {
    grpc::ClientContext ctx;
    v1::ListSessionsReply reply;
    ASSERT_TRUE(stub->ListSessions(&ctx, v1::ListSessionsRequest(), &reply).ok());
    EXPECT_EQ(reply.sessions_size(), 0);
  }
  v1::SessionInfo a;
  a.set_session_id(1);
  a.set_pid(100);
  v1::SessionInfo b;
  b.set_session_id(2);
  b.set_pid(200);
  daemon.sessions()->Upsert(a);
  daemon.sessions()->Upsert(b);
  grpc::ClientContext ctx;
  v1::ListSessionsRequest req;
  req.set_pid(200);
  v1::ListSessionsReply reply;
  ASSERT_TRUE(stub->ListSessions(&ctx, req, &reply).ok());
  ASSERT_EQ(reply.sessions_size(), 1);
  EXPECT_EQ(reply.sessions(0).session_id(), 2u);
}

// Every long operation must say UNIMPLEMENTED and name itself until its
// issue lands: a fake success would be a lie to the user.
template <typename Req, typename Call>
void ExpectUnimplemented(Call call, const std::string& rpc_name) {
  grpc::ClientContext ctx;
  Req req;
  auto reader = call(&ctx, req);
  v1::OperationEvent ev;
  EXPECT_FALSE(reader->Read(&ev)) << rpc_name << " produced an event";
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED) << rpc_name;
  EXPECT_NE(st.error_message().find(rpc_name), std::string::npos) << st.error_message();
}

TEST_F(DaemonTest, LongOperationsAnswerUnimplementedNamingTheRpc) {
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  auto stub = Connect();
  v1::Phos::Stub* s = stub.get();
  // Checkpoint and Restore are implemented (GPU-only and whole-process):
  // tests/integration/checkpoint_restore_test.cc, process_restore_test.cc.
  // Migrate and the templates are implemented too (migrate_test,
  // template_test); here an empty request must be refused, not "succeed".
  {
    grpc::ClientContext c;
    auto reader = s->Migrate(&c, v1::MigrateRequest());
    v1::OperationEvent ev;
    while (reader->Read(&ev)) EXPECT_FALSE(ev.has_done()) << "an empty Migrate request succeeded";
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext c;
    auto reader = s->TemplateStart(&c, v1::TemplateStartRequest());
    v1::OperationEvent ev;
    while (reader->Read(&ev)) EXPECT_FALSE(ev.has_done()) << "an empty TemplateStart request succeeded";
    EXPECT_NE(reader->Finish().error_code(), grpc::StatusCode::OK);
  }
  ExpectUnimplemented<v1::WatchOperationRequest>(
      [s](grpc::ClientContext* c, const v1::WatchOperationRequest& r) {
        return s->WatchOperation(c, r);
      },
      "WatchOperation");
}

TEST_F(DaemonTest, SocketIsMode0660AndRemovedOnShutdown) {
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  struct stat st {};
  ASSERT_EQ(stat(options_.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  daemon.Shutdown();
  EXPECT_FALSE(std::filesystem::exists(options_.socket_path));
}

// A daemon killed mid-checkpoint leaves NAME.tmp; the next one removes it
// at startup and leaves everything else alone.
TEST_F(DaemonTest, IncompleteCheckpointsAreRemovedAtStartup) {
  const std::string root = dir_ + "/checkpoints";
  std::filesystem::create_directories(root + "/crashed.tmp");
  std::filesystem::create_directories(root + "/latest/older.tmp");
  std::filesystem::create_directories(root + "/not-an-image");
  options_.checkpoint_root = root;
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/crashed.tmp"));
  EXPECT_FALSE(std::filesystem::exists(root + "/latest/older.tmp"));
  EXPECT_TRUE(std::filesystem::exists(root + "/not-an-image"));
}

TEST_F(DaemonTest, SecondDaemonOnTheSameSocketIsRefused) {
  Daemon first;
  ASSERT_TRUE(first.Start(options_).ok());
  Daemon second;
  Status s = second.Start(options_);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(getpid())), std::string::npos) << s.message();
  // The first one still serves.
  auto stub = Connect();
  grpc::ClientContext ctx;
  v1::StatusReply reply;
  EXPECT_TRUE(stub->Status(&ctx, v1::StatusRequest(), &reply).ok());
}

TEST_F(DaemonTest, StaleSocketFromADeadDaemonIsReplaced) {
  // A socket file nobody listens on: what a crashed daemon leaves behind.
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, options_.socket_path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  ASSERT_TRUE(std::filesystem::exists(options_.socket_path));

  Daemon daemon;
  Status s = daemon.Start(options_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto stub = Connect();
  grpc::ClientContext ctx;
  v1::StatusReply reply;
  EXPECT_TRUE(stub->Status(&ctx, v1::StatusRequest(), &reply).ok());
}

TEST_F(DaemonTest, CudaBackendWithoutDriverFailsClearly) {
  options_.backend.kind = backend::BackendKind::kCuda;
  options_.backend.cuda.driver_library = "/nonexistent/libcuda.so.1";
  Daemon daemon;
  Status s = daemon.Start(options_);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/libcuda.so.1"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(options_.socket_path));
}

TEST_F(DaemonTest, AutoFallsBackToSimWithoutDriver) {
  options_.backend.kind = backend::BackendKind::kAuto;
  options_.backend.cuda.driver_library = "/nonexistent/libcuda.so.1";
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  EXPECT_EQ(daemon.backend()->name(), "sim");
  auto stub = Connect();
  grpc::ClientContext ctx;
  v1::StatusReply reply;
  ASSERT_TRUE(stub->Status(&ctx, v1::StatusRequest(), &reply).ok());
  EXPECT_NE(reply.backend_detail().find("auto"), std::string::npos) << reply.backend_detail();
}

}  // namespace
}  // namespace phos::server
