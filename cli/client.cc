#include "cli/client.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include <sys/stat.h>

#include <chrono>
#include <iostream>

#include <google/protobuf/util/json_util.h>

#include <grpcpp/grpcpp.h>

namespace phos::cli {
namespace {

std::string HowToStart(const std::string& socket_path) {
  return "start one with `phos daemon --socket " + socket_path +
         "` (or point --socket / $PHOS_SOCKET at a running daemon)";
}

}  // namespace

Status ConnectToDaemon(const std::string& socket_path, int timeout_ms,
                       std::unique_ptr<v1::Phos::Stub>* out) {
  struct stat st {};
  if (stat(socket_path.c_str(), &st) != 0) {
    return Status::Unavailable("no phosd running: socket " + socket_path + " does not exist; " +
                               HowToStart(socket_path));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status::Unavailable(socket_path + " exists but is not a socket; " +
                               HowToStart(socket_path));
  }
  auto channel = grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials());
  auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (!channel->WaitForConnected(deadline)) {
    return Status::Unavailable("no phosd answering on " + socket_path +
                               " (stale socket or permission denied: the socket is mode 0660, "
                               "run as its owner or group); " + HowToStart(socket_path));
  }
  *out = v1::Phos::NewStub(channel);
  return Status::Ok();
}

std::string DescribeRpcError(const std::string& rpc, const grpc::Status& status) {
  return rpc + ": " + status.error_message();
}

bool ConnectOrExplain(const std::string& socket_path, int timeout_ms,
                      std::unique_ptr<v1::Phos::Stub>* out) {
  Status s = ConnectToDaemon(socket_path, timeout_ms, out);
  if (!s.ok()) std::cerr << "phos: " << s.message() << "\n";
  return s.ok();
}

void PrintJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  std::cout << out;
}

void WaitForExit(int pid) {
  const int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pfd >= 0) {
    pollfd p{pfd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    close(pfd);
    return;
  }
  while (kill(pid, 0) == 0 || errno != ESRCH) usleep(100 * 1000);
}

}  // namespace phos::cli
