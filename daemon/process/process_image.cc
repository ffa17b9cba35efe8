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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "common/proc_nspid.h"
#include "image/image_layout.h"
#include "image/image_reader.h"
#include "image/manifest_file.h"
#include "image.pb.h"

namespace phos::process {
namespace {

void ToRecord(const ProcessImage& im, image::v1::ProcessRecord* r) {
  r->set_pid(im.pid);
  r->set_uid(im.uid);
  r->set_session_id(im.session_id);
  r->set_channel_inode(im.channel_inode);
  r->set_ring_start(im.ring_start);
  r->set_ring_end(im.ring_end);
  const ring::RingGeometry& g = im.geometry;
  image::v1::RingGeometryRecord* gr = r->mutable_geometry();
  gr->set_region_bytes(g.region_bytes);
  gr->set_session_id(g.session_id);
  gr->set_ring_offset(g.ring_offset);
  gr->set_ring_bytes(g.ring_bytes);
  gr->set_slots_offset(g.slots_offset);
  gr->set_slot_count(g.slot_count);
  gr->set_chunk_state_offset(g.chunk_state_offset);
  gr->set_staging_offset(g.staging_offset);
  gr->set_chunk_count(g.chunk_count);
  gr->set_chunk_bytes(g.chunk_bytes);
  gr->set_max_frame_bytes(g.max_frame_bytes);
  r->set_ring_head(im.ring_head);
  r->set_admitted(im.admitted);
  r->set_shell_job(im.shell_job);
  r->set_pid_namespace(im.pid_namespace);
  r->set_tcp_established(im.tcp_established);
  r->set_file_locks(im.file_locks);
  r->set_cmdline(im.cmdline);
  for (const ProcessImage::HostSegment& h : im.host_segments) {
    image::v1::HostSegmentRecord* hr = r->add_host_segments();
    hr->set_id(h.id);
    hr->set_app_base(h.app_base);
    hr->set_bytes(h.bytes);
  }
}

void FromRecord(const image::v1::ProcessRecord& r, ProcessImage* im) {
  im->pid = static_cast<pid_t>(r.pid());
  im->uid = r.uid();
  im->session_id = r.session_id();
  im->channel_inode = r.channel_inode();
  im->ring_start = r.ring_start();
  im->ring_end = r.ring_end();
  const image::v1::RingGeometryRecord& gr = r.geometry();
  ring::RingGeometry& g = im->geometry;
  g.region_bytes = gr.region_bytes();
  g.session_id = gr.session_id();
  g.ring_offset = gr.ring_offset();
  g.ring_bytes = gr.ring_bytes();
  g.slots_offset = gr.slots_offset();
  g.slot_count = gr.slot_count();
  g.chunk_state_offset = gr.chunk_state_offset();
  g.staging_offset = gr.staging_offset();
  g.chunk_count = gr.chunk_count();
  g.chunk_bytes = gr.chunk_bytes();
  g.max_frame_bytes = gr.max_frame_bytes();
  im->ring_head = r.ring_head();
  im->admitted = r.admitted();
  im->shell_job = r.shell_job();
  im->pid_namespace = r.pid_namespace();
  im->tcp_established = r.tcp_established();
  im->file_locks = r.file_locks();
  im->cmdline = r.cmdline();
  im->host_segments.clear();
  for (const image::v1::HostSegmentRecord& h : r.host_segments()) {
    im->host_segments.push_back({h.id(), h.app_base(), h.bytes()});
  }
}

Status NotAWholeProcessImage(const std::string& dir, std::string why) {
  if (std::filesystem::exists(dir + "/process.txt")) {
    why += "; its process.txt was written by an older phos, which can restore it";
  }
  return Status::NotFound(dir + " is not a whole-process image (" + why +
                          "; a --gpu-only image restores with --gpu-only --pid P)");
}

}  // namespace

Status WriteProcessImage(const std::string& dir, const ProcessImage& im, bool durable) {
  return image::AmendManifest(dir, [&](image::v1::Manifest* m) { ToRecord(im, m->mutable_process()); }, durable)
      .WithContext("adding the process record to the GPU image");
}

Status ReadProcessImage(const std::string& dir, ProcessImage* im) {
  image::v1::Manifest m;
  Status s = image::ReadManifest(dir, &m);
  if (s.code() == Status::Code::kNotFound) return NotAWholeProcessImage(dir, "no manifest");
  PHOS_RETURN_IF_ERROR(s);
  return ProcessImageFromManifest(m, dir, im);
}

Status ProcessImageFromManifest(const image::v1::Manifest& m, const std::string& dir, ProcessImage* im) {
  if (!m.has_process()) return NotAWholeProcessImage(dir, "its manifest has no process record");
  const std::string path = dir + "/" + std::string(image::kManifestName);
  FromRecord(m.process(), im);
  const ring::RingGeometry& g = im->geometry;
  if (im->pid <= 0 || im->ring_end <= im->ring_start || im->ring_end - im->ring_start != g.region_bytes) {
    return Status::Corruption(path + ": the process record has an inconsistent pid or ring mapping");
  }
  for (const ProcessImage::HostSegment& h : im->host_segments) {
    if (h.id == 0 || h.bytes == 0) {
      return Status::Corruption(path + ": the process record has a host segment with id " + std::to_string(h.id) +
                                " and " + std::to_string(h.bytes) + " bytes");
    }
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
