// A one-member etcd on loopback for tests of phosds coordinated through it
// (docs/protocols.md "Jobs across phosds"): started by the test, on ports
// the kernel picked free, its data in the test's directory; killed when the
// object goes. Header-only.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <thread>

#include "cluster/etcd_client.h"
#include "harness.h"

namespace phos::testing {

/// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick).
inline int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

/// The etcd binary (scripts/setup.sh installs Debian's etcd-server), or "".
inline std::string EtcdBinary() {
  for (const char* p : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

class LocalEtcd {
 public:
  /// Starts etcd with its data under `dir`; `ok()` once it serves clients.
  explicit LocalEtcd(const std::string& dir) {
    const std::string bin = EtcdBinary();
    if (bin.empty()) {
      error_ = "etcd is not installed (scripts/setup.sh installs Debian's etcd-server)";
      return;
    }
    client_port_ = FreeLoopbackPort();
    const int peer_port = FreeLoopbackPort();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    // Its log goes to a file: a pipe nobody reads would stall it.
    const std::string cmd = "exec " + bin + " --name phos-test --data-dir " + dir + "/etcd --listen-client-urls " +
                            client + " --advertise-client-urls " + client + " --listen-peer-urls " + peer +
                            " --initial-advertise-peer-urls " + peer + " --initial-cluster phos-test=" + peer +
                            " > " + dir + "/etcd.log 2>&1";
    child_ = Child::Start({"/bin/sh", "-c", cmd});
    // Ready once a write goes through (a member that elected itself leader).
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    Status last = Status::Unavailable("not tried");
    while (Clock::now() < deadline) {
      std::unique_ptr<cluster::EtcdClient> etcd;
      last = cluster::EtcdClient::Connect(endpoint(), std::chrono::milliseconds(500), &etcd);
      if (last.ok()) last = etcd->Put("/phos-test/ready", "1");
      if (last.ok()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    error_ = "etcd did not start (" + last.ToString() + "); see " + dir + "/etcd.log";
  }
  ~LocalEtcd() { Kill(); }

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  /// HOST:PORT for phosd's --etcd.
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  void Kill() {
    if (child_.pid > 0) {
      kill(child_.pid, SIGKILL);
      child_.Wait(std::chrono::seconds(10));
    }
  }

 private:
  Child child_;
  int client_port_ = -1;
  std::string error_;
};

}  // namespace phos::testing
