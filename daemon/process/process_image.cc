#include "process/process_image.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "common/proc_nspid.h"

namespace phos::process {
namespace {

std::string Hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

bool Unhex(const std::string& h, std::string* out) {
  if (h.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < h.size(); i += 2) {
    auto v = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    int a = v(h[i]), b = v(h[i + 1]);
    if (a < 0 || b < 0) return false;
    out->push_back(static_cast<char>(a * 16 + b));
  }
  return true;
}

}  // namespace

Status WriteProcessImage(const std::string& dir, const ProcessImage& im) {
  const std::string path = dir + "/" + kProcessImageFile;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return Status::IoError("cannot write " + tmp + ": " + std::strerror(errno));
    const ring::RingGeometry& g = im.geometry;
    f << "version " << im.version << "\n"
      << "pid " << im.pid << "\n"
      << "uid " << im.uid << "\n"
      << "session_id " << im.session_id << "\n"
      << "channel_inode " << im.channel_inode << "\n"
      << "ring_start " << im.ring_start << "\n"
      << "ring_end " << im.ring_end << "\n"
      << "region_bytes " << g.region_bytes << "\n"
      << "geometry_session_id " << g.session_id << "\n"
      << "ring_offset " << g.ring_offset << "\n"
      << "ring_bytes " << g.ring_bytes << "\n"
      << "slots_offset " << g.slots_offset << "\n"
      << "slot_count " << g.slot_count << "\n"
      << "chunk_state_offset " << g.chunk_state_offset << "\n"
      << "staging_offset " << g.staging_offset << "\n"
      << "chunk_count " << g.chunk_count << "\n"
      << "chunk_bytes " << g.chunk_bytes << "\n"
      << "max_frame_bytes " << g.max_frame_bytes << "\n"
      << "ring_head " << im.ring_head << "\n"
      << "admitted " << im.admitted << "\n"
      << "shell_job " << (im.shell_job ? 1 : 0) << "\n"
      << "pid_namespace " << (im.pid_namespace ? 1 : 0) << "\n"
      << "tcp_established " << (im.tcp_established ? 1 : 0) << "\n"
      << "file_locks " << (im.file_locks ? 1 : 0) << "\n"
      << "cmdline_hex " << Hex(im.cmdline) << "\n";
    for (const ProcessImage::HostSegment& h : im.host_segments) {
      f << "host_segment " << h.id << " " << h.app_base << " " << h.bytes << "\n";
    }
    f.flush();
    if (!f) return Status::IoError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno("rename " + tmp, errno);
  return Status::Ok();
}

Status ReadProcessImage(const std::string& dir, ProcessImage* im) {
  const std::string path = dir + "/" + kProcessImageFile;
  std::ifstream f(path);
  if (!f) {
    return Status::NotFound(dir + " is not a whole-process image (no " + kProcessImageFile +
                            "; a --gpu-only image restores with --gpu-only --pid P)");
  }
  std::map<std::string, std::string> kv;
  std::string line;
  im->host_segments.clear();
  bool segments_ok = true;
  while (std::getline(f, line)) {
    if (line.rfind("host_segment ", 0) == 0) {  // repeated: not a key/value line
      std::istringstream in(line.substr(13));
      ProcessImage::HostSegment h;
      if (!(in >> h.id >> h.app_base >> h.bytes) || h.id == 0 || h.bytes == 0) segments_ok = false;
      im->host_segments.push_back(h);
      continue;
    }
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) {
      if (!line.empty()) kv[line] = "";
      continue;
    }
    kv[line.substr(0, sp)] = line.substr(sp + 1);
  }
  bool ok = true;
  auto num = [&](const char* key) -> uint64_t {
    auto it = kv.find(key);
    if (it == kv.end() || it->second.empty()) {
      ok = false;
      return 0;
    }
    try {
      return std::stoull(it->second);
    } catch (...) {
      ok = false;
      return 0;
    }
  };
  im->version = static_cast<int>(num("version"));
  im->pid = static_cast<pid_t>(num("pid"));
  im->uid = static_cast<uid_t>(num("uid"));
  im->session_id = num("session_id");
  im->channel_inode = num("channel_inode");
  im->ring_start = num("ring_start");
  im->ring_end = num("ring_end");
  ring::RingGeometry& g = im->geometry;
  g.region_bytes = num("region_bytes");
  g.session_id = num("geometry_session_id");
  g.ring_offset = num("ring_offset");
  g.ring_bytes = num("ring_bytes");
  g.slots_offset = num("slots_offset");
  g.slot_count = static_cast<uint32_t>(num("slot_count"));
  g.chunk_state_offset = num("chunk_state_offset");
  g.staging_offset = num("staging_offset");
  g.chunk_count = static_cast<uint32_t>(num("chunk_count"));
  g.chunk_bytes = static_cast<uint32_t>(num("chunk_bytes"));
  g.max_frame_bytes = static_cast<uint32_t>(num("max_frame_bytes"));
  im->ring_head = num("ring_head");
  im->admitted = num("admitted");
  im->shell_job = num("shell_job") != 0;
  // Absent in images written before pid namespaces (then: false).
  if (kv.count("pid_namespace") != 0) im->pid_namespace = num("pid_namespace") != 0;
  // Absent in images written before the CRIU options were recorded.
  if (kv.count("tcp_established") != 0) im->tcp_established = num("tcp_established") != 0;
  if (kv.count("file_locks") != 0) im->file_locks = num("file_locks") != 0;
  if (!ok || !segments_ok || !Unhex(kv["cmdline_hex"], &im->cmdline)) {
    return Status::Corruption(path + ": missing or malformed fields");
  }
  if (im->version != 1) return Status::Corruption(path + ": unknown version " + std::to_string(im->version));
  if (im->pid <= 0 || im->ring_end <= im->ring_start || im->ring_end - im->ring_start != g.region_bytes) {
    return Status::Corruption(path + ": inconsistent pid or ring mapping");
  }
  return Status::Ok();
}

std::string MapFilesPath(pid_t pid, uint64_t start, uint64_t end) {
  char path[96];
  std::snprintf(path, sizeof path, "/proc/%d/map_files/%llx-%llx", pid, static_cast<unsigned long long>(start),
                static_cast<unsigned long long>(end));
  return path;
}

Status UnixPeerInode(int fd, uint64_t* inode) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Status::FromErrno("fstat channel socket", errno);
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return Status::FromErrno("socket(NETLINK_SOCK_DIAG)", errno);
  struct {
    nlmsghdr nlh;
    unix_diag_req req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = AF_UNIX;
  msg.req.udiag_states = ~0u;
  msg.req.udiag_ino = static_cast<uint32_t>(st.st_ino);
  msg.req.udiag_show = UDIAG_SHOW_PEER;
  msg.req.udiag_cookie[0] = msg.req.udiag_cookie[1] = ~0u;  // INET_DIAG_NOCOOKIE
  Status result = Status::NotFound("sock_diag: no peer reported for socket inode " + std::to_string(st.st_ino));
  if (send(nl, &msg, sizeof msg, 0) != static_cast<ssize_t>(sizeof msg)) {
    result = Status::FromErrno("sock_diag send", errno);
  } else {
    alignas(nlmsghdr) char buf[8192];
    ssize_t n = recv(nl, buf, sizeof buf, 0);
    if (n < 0) {
      result = Status::FromErrno("sock_diag recv", errno);
    } else {
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
           h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
          const int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
          result = Status::FromErrno("sock_diag (is CONFIG_UNIX_DIAG available?)", err);
          break;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
        auto* m = reinterpret_cast<unix_diag_msg*>(NLMSG_DATA(h));
        int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
        for (auto* a = reinterpret_cast<rtattr*>(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
          if (a->rta_type == UNIX_DIAG_PEER) {
            uint32_t peer;
            std::memcpy(&peer, RTA_DATA(a), sizeof peer);
            *inode = peer;
            result = Status::Ok();
          }
        }
        break;
      }
    }
  }
  close(nl);
  return result;
}

Status FindMemfdMapping(pid_t pid, uint64_t inode, uint64_t bytes, uint64_t* start, uint64_t* end) {
  const std::string path = "/proc/" + std::to_string(pid) + "/maps";
  std::ifstream f(path);
  if (!f) return Status::NotFound("cannot read " + path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, path_name;
    uint64_t ino = 0;
    if (!(in >> range >> perms >> offset >> dev >> ino)) continue;
    if (ino != inode || std::stoull(offset, nullptr, 16) != 0) continue;
    const size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    const uint64_t s = std::stoull(range.substr(0, dash), nullptr, 16);
    const uint64_t e = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (e - s != bytes || perms.size() < 4 || perms[3] != 's') continue;
    *start = s;
    *end = e;
    return Status::Ok();
  }
  return Status::NotFound("pid " + std::to_string(pid) + " has no shared mapping of its ring memfd (inode " +
                          std::to_string(inode) + ", " + std::to_string(bytes) + " bytes) in " + path);
}

bool ProcessHoldsSocket(pid_t pid, uint64_t inode) {
  const std::string want = "socket:[" + std::to_string(inode) + "]";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    char buf[64];
    const ssize_t n = readlink(e.path().c_str(), buf, sizeof buf - 1);
    if (n > 0 && std::string(buf, static_cast<size_t>(n)) == want) return true;
  }
  return false;
}

Status PidNamespaceRole(pid_t pid, bool* own_ns) {
  *own_ns = false;
  std::vector<long> ids;
  PHOS_RETURN_IF_ERROR(ReadNsPids(pid, &ids));
  // Empty: a kernel without NSpid has no namespaces to care about; one: ours.
  if (ids.size() <= 1) return Status::Ok();
  if (ids.back() == 1 && ids.size() == 2) {
    *own_ns = true;
    return Status::Ok();
  }
  return Status::NotSupported("pid " + std::to_string(pid) + " is pid " + std::to_string(ids.back()) +
                              " of a pid namespace " + (ids.size() > 2 ? "nested below another" : "it does not lead") +
                              ": CRIU dumps a pid namespace from its init only; run the app with `phos run` "
                              "(its own namespace) or `phos run --no-pid-ns`");
}

}  // namespace phos::process
