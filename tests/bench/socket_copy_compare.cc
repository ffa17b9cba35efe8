// socket_copy_compare: the ways a file can cross a loopback TCP connection
// into another file with an xxh3 of every byte on both ends, measured in
// one process (a sender thread, a receiver thread) — what chose the data
// channel's own path (docs/benchmarks.md "Data channel vs gRPC vs iperf3").
//
//   socket_copy_compare --src FILE --dst FILE [--send pread|sendfile|mmap]
//                       [--recv recv|splice] [--piece-kib N]
//
// Senders: pread into a buffer, hash it, send it (the data channel's way);
// pread + hash, then sendfile() of the same range (no copy into the socket
// from user memory); hash straight from an mmap of the file and send()
// from the mapping (one copy fewer, but a file truncated meanwhile would
// raise SIGBUS in the hash). Receivers: recv into a buffer, hash, pwrite
// (the data channel's way); splice socket -> pipe -> file, then pread the
// piece back to hash it. Prints one line with the rate; exits 1 if the two
// digests differ.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/xxh3.h"

namespace {

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::exit(2);
}

struct Options {
  std::string src, dst, send = "pread", recv = "recv";
  std::size_t piece = 2u << 20;
};

std::uint64_t Receive(const Options& o, int sock, std::size_t size) {
  const int fd = open(o.dst.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) Die("open --dst");
  std::unique_ptr<char[]> buf(new char[o.piece]);
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) Die("pipe2");
  (void)fcntl(pipe_fds[1], F_SETPIPE_SZ, 1 << 20);
  for (std::size_t off = 0; off < size;) {
    const std::size_t n = std::min(o.piece, size - off);
    if (o.recv == "splice") {
      for (std::size_t got = 0; got < n;) {
        const ssize_t r = splice(sock, nullptr, pipe_fds[1], nullptr, n - got, SPLICE_F_MOVE);
        if (r <= 0) Die("splice from the socket");
        for (ssize_t moved = 0; moved < r;) {
          loff_t at = static_cast<loff_t>(off + got + static_cast<std::size_t>(moved));
          const ssize_t k = splice(pipe_fds[0], nullptr, fd, &at, static_cast<std::size_t>(r - moved), SPLICE_F_MOVE);
          if (k <= 0) Die("splice into --dst");
          moved += k;
        }
        got += static_cast<std::size_t>(r);
      }
      if (pread(fd, buf.get(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) Die("pread --dst");
      XXH3_64bits_update(h, buf.get(), n);
    } else {
      for (std::size_t got = 0; got < n;) {
        const ssize_t r = recv(sock, buf.get() + got, n - got, MSG_WAITALL);
        if (r <= 0) Die("recv");
        got += static_cast<std::size_t>(r);
      }
      XXH3_64bits_update(h, buf.get(), n);
      if (pwrite(fd, buf.get(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) Die("pwrite --dst");
    }
    off += n;
  }
  if (fsync(fd) != 0) Die("fsync --dst");
  close(fd);
  const std::uint64_t digest = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return digest;
}

std::uint64_t Send(const Options& o, int sock, int fd, std::size_t size) {
  std::unique_ptr<char[]> buf(new char[o.piece]);
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  const char* map = nullptr;
  if (o.send == "mmap") {
    void* m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) Die("mmap --src");
    map = static_cast<const char*>(m);
  }
  auto send_all = [sock](const char* p, std::size_t n) {
    while (n > 0) {
      const ssize_t k = send(sock, p, n, MSG_NOSIGNAL);
      if (k <= 0) Die("send");
      p += k;
      n -= static_cast<std::size_t>(k);
    }
  };
  for (std::size_t off = 0; off < size;) {
    const std::size_t n = std::min(o.piece, size - off);
    if (map != nullptr) {
      XXH3_64bits_update(h, map + off, n);
      send_all(map + off, n);
    } else {
      if (pread(fd, buf.get(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) Die("pread --src");
      XXH3_64bits_update(h, buf.get(), n);
      if (o.send == "sendfile") {
        off_t at = static_cast<off_t>(off);
        for (std::size_t left = n; left > 0;) {
          const ssize_t k = sendfile(sock, fd, &at, left);
          if (k <= 0) Die("sendfile");
          left -= static_cast<std::size_t>(k);
        }
      } else {
        send_all(buf.get(), n);
      }
    }
    off += n;
  }
  if (map != nullptr) munmap(const_cast<char*>(map), size);
  const std::uint64_t digest = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return digest;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"File -> loopback TCP -> file, with xxh3 on both ends, several ways"};
  Options o;
  std::size_t piece_kib = 2048;
  app.add_option("--src", o.src, "File to send (e.g. on /dev/shm)")->required();
  app.add_option("--dst", o.dst, "File to write (replaced)")->required();
  app.add_option("--send", o.send, "pread | sendfile | mmap")->check(CLI::IsMember({"pread", "sendfile", "mmap"}));
  app.add_option("--recv", o.recv, "recv | splice")->check(CLI::IsMember({"recv", "splice"}));
  app.add_option("--piece-kib", piece_kib, "Bytes per read/send/receive, KiB")->check(CLI::Range(4, 65536));
  CLI11_PARSE(app, argc, argv);
  o.piece = piece_kib << 10;

  const int src = open(o.src.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (src < 0 || fstat(src, &st) != 0) Die("open --src");
  const auto size = static_cast<std::size_t>(st.st_size);
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Die("listen on 127.0.0.1");
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t received = 0;
  std::thread receiver([&] {
    const int sock = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (sock < 0) Die("accept");
    received = Receive(o, sock, size);
    close(sock);
  });
  const int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Die("connect");
  const std::uint64_t sent = Send(o, sock, src, size);
  receiver.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(sock);
  std::printf("send %-8s recv %-6s piece %5zu KiB: %6.0f MB/s%s\n", o.send.c_str(), o.recv.c_str(), piece_kib,
              static_cast<double>(size) / 1e6 / secs, sent == received ? "" : "  DIGESTS DIFFER");
  return sent == received ? 0 : 1;
}
