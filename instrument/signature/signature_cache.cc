#include "signature/signature_cache.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>

namespace phos::signature {
namespace {

constexpr std::string_view kMagic = "phos-kernel-signatures";
constexpr uint64_t kVersion = 1;
// Bounds that keep a corrupt file from asking for absurd allocations.
constexpr uint64_t kMaxKernels = 1u << 20;
constexpr uint64_t kMaxParams = 1u << 14;
constexpr uint64_t kMaxString = 1u << 20;

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

void PutStr(std::string* o, std::string_view s) {
  *o += std::to_string(s.size());
  *o += ' ';
  o->append(s);
}

// Strict reader of the text format: fields separated by one space, records
// ended by '\n', strings as "<len> <bytes>".
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  bool Word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    size_t end = pos_ + w.size();
    if (end < s_.size() && s_[end] == ' ') {
      pos_ = end + 1;
      return true;
    }
    if (end < s_.size() && s_[end] == '\n') {
      pos_ = end;
      return true;
    }
    return false;
  }
  bool Num(uint64_t* v, uint64_t max = UINT64_MAX, int base = 10) {
    size_t end = pos_;
    while (end < s_.size() && s_[end] != ' ' && s_[end] != '\n') ++end;
    if (end == pos_) return false;
    auto [p, ec] = std::from_chars(s_.data() + pos_, s_.data() + end, *v, base);
    if (ec != std::errc() || p != s_.data() + end || *v > max) return false;
    pos_ = end;
    if (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
    return true;
  }
  bool U32(uint32_t* v) {
    uint64_t x = 0;
    if (!Num(&x, UINT32_MAX)) return false;
    *v = static_cast<uint32_t>(x);
    return true;
  }
  bool Bool(bool* b) {
    uint64_t x = 0;
    if (!Num(&x, 1)) return false;
    *b = x != 0;
    return true;
  }
  bool Str(std::string* out) {
    uint64_t len = 0;
    size_t save = pos_;
    if (!Num(&len, kMaxString)) return false;
    if (s_[pos_ - 1] != ' ' || pos_ + len > s_.size()) {
      pos_ = save;
      return false;
    }
    out->assign(s_.substr(pos_, len));
    pos_ += len;
    if (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
    return true;
  }
  bool Eol() {
    if (pos_ >= s_.size() || s_[pos_] != '\n') return false;
    ++pos_;
    return true;
  }
  size_t pos() const { return pos_; }
  bool AtEnd() const { return pos_ == s_.size(); }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

Status ReadFile(const std::string& path, std::string* out, bool* missing) {
  *missing = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      *missing = true;
      return Status::NotFound(path);
    }
    return Status::FromErrno("open " + path, err);
  }
  out->clear();
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status::FromErrno("read " + path, err);
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& dir, const std::string& path, const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("create cache directory " + dir + ": " + ec.message());
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("open " + tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::FromErrno("write " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno("sync " + tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno("rename " + tmp + " -> " + path, err);
  }
  return Status::Ok();
}

}  // namespace

SignatureCache::SignatureCache(std::string dir) : dir_(std::move(dir)) {}

SignatureCache::~SignatureCache() {
  Status st = Flush();
  if (!st.ok()) spdlog::warn("kernel signature cache: {}", st.ToString());
}

uint64_t SignatureCache::HashFatbin(std::span<const uint8_t> fatbin) {
  return XXH3_64bits(fatbin.data(), fatbin.size());
}

std::string SignatureCache::CacheFilePath(const std::string& dir, uint64_t fatbin_hash) {
  return dir + "/" + Hex16(fatbin_hash) + ".sig";
}

std::string SignatureCache::Serialize(uint64_t fatbin_hash, const std::map<std::string, Entry>& kernels) {
  std::string o;
  o += std::string(kMagic) + " " + std::to_string(kVersion) + "\n";
  o += "fatbin " + Hex16(fatbin_hash) + "\n";
  o += "kernels " + std::to_string(kernels.size()) + "\n";
  for (const auto& [name, e] : kernels) {
    const KernelRequest& rq = e.request;
    const KernelSignature& sg = e.signature;
    o += "kernel ";
    PutStr(&o, name);
    o += "\nrequest " + std::to_string(rq.has_nv_info ? 1 : 0) + " " + std::to_string(rq.kparams.size());
    for (const auto& k : rq.kparams) {
      o += " " + std::to_string(k.ordinal) + " " + std::to_string(k.offset) + " " + std::to_string(k.size);
    }
    o += "\nsig " + std::to_string(sg.extern_c) + " " + std::to_string(sg.fully_typed) + " " +
         std::to_string(sg.from_nv_info) + " ";
    PutStr(&o, sg.demangled);
    o += "\nparams " + std::to_string(sg.params.size()) + "\n";
    for (const auto& p : sg.params) {
      o += "p " + std::to_string(p.ordinal) + " " + std::to_string(p.offset) + " " +
           std::to_string(p.size) + " " + std::to_string(p.layout_known) + " " +
           std::string(AccessRoleName(p.role)) + " " + std::to_string(p.pointee_is_pointer) + " " +
           std::to_string(p.typed) + " ";
      PutStr(&o, p.type);
      o += "\n";
    }
  }
  o += "checksum " + Hex16(XXH3_64bits(o.data(), o.size())) + "\n";
  return o;
}

Status SignatureCache::Deserialize(std::string_view bytes, uint64_t fatbin_hash,
                                   std::map<std::string, Entry>* kernels) {
  kernels->clear();
  auto bad = [](std::string what) { return Status::Corruption("signature cache file: " + what); };
  // Checksum first: the last line is "checksum <16 hex>\n".
  constexpr std::string_view kSum = "checksum ";
  if (bytes.size() < kSum.size() + 17 || bytes.back() != '\n') return bad("truncated");
  size_t line = bytes.rfind('\n', bytes.size() - 2);
  size_t sum_at = line == std::string_view::npos ? 0 : line + 1;
  {
    Reader r(bytes.substr(sum_at));
    uint64_t sum = 0;
    if (!r.Word("checksum") || !r.Num(&sum, UINT64_MAX, 16) || !r.Eol() || !r.AtEnd()) {
      return bad("no checksum line");
    }
    if (sum != XXH3_64bits(bytes.data(), sum_at)) return bad("checksum mismatch");
  }
  Reader r(bytes.substr(0, sum_at));
  uint64_t version = 0, hash = 0, n = 0;
  if (!r.Word(kMagic) || !r.Num(&version) || !r.Eol()) return bad("bad magic");
  if (version != kVersion) return bad("version " + std::to_string(version) + ", want " + std::to_string(kVersion));
  if (!r.Word("fatbin") || !r.Num(&hash, UINT64_MAX, 16) || !r.Eol()) return bad("bad fatbin line");
  if (hash != fatbin_hash) return bad("written for fatbin " + Hex16(hash));
  if (!r.Word("kernels") || !r.Num(&n, kMaxKernels) || !r.Eol()) return bad("bad kernel count");
  for (uint64_t i = 0; i < n; ++i) {
    Entry e;
    std::string name;
    uint64_t nk = 0, np = 0;
    if (!r.Word("kernel") || !r.Str(&name) || !r.Eol()) return bad("bad kernel record");
    if (!r.Word("request") || !r.Bool(&e.request.has_nv_info) || !r.Num(&nk, kMaxParams)) {
      return bad("bad request of " + name);
    }
    e.request.mangled_name = name;
    for (uint64_t k = 0; k < nk; ++k) {
      ParamInfo pi;
      if (!r.U32(&pi.ordinal) || !r.U32(&pi.offset) || !r.U32(&pi.size)) return bad("bad kparam of " + name);
      e.request.kparams.push_back(pi);
    }
    if (!r.Eol()) return bad("bad request of " + name);
    KernelSignature& sg = e.signature;
    sg.mangled_name = name;
    if (!r.Word("sig") || !r.Bool(&sg.extern_c) || !r.Bool(&sg.fully_typed) ||
        !r.Bool(&sg.from_nv_info) || !r.Str(&sg.demangled) || !r.Eol()) {
      return bad("bad signature of " + name);
    }
    if (!r.Word("params") || !r.Num(&np, kMaxParams) || !r.Eol()) return bad("bad params of " + name);
    for (uint64_t k = 0; k < np; ++k) {
      ParamAccess p;
      if (!r.Word("p") || !r.U32(&p.ordinal) || !r.U32(&p.offset) || !r.U32(&p.size) ||
          !r.Bool(&p.layout_known)) {
        return bad("bad param of " + name);
      }
      bool ok = false;
      for (AccessRole cand : {AccessRole::kNone, AccessRole::kRead, AccessRole::kReadWrite,
                              AccessRole::kScanWords}) {
        if (r.Word(AccessRoleName(cand))) {
          p.role = cand;
          ok = true;
          break;
        }
      }
      if (!ok || !r.Bool(&p.pointee_is_pointer) || !r.Bool(&p.typed) || !r.Str(&p.type) || !r.Eol()) {
        return bad("bad param of " + name);
      }
      if (p.ordinal != k) return bad("param ordinals out of order in " + name);
      sg.params.push_back(std::move(p));
    }
    e.from_disk = true;
    if (!kernels->emplace(name, std::move(e)).second) return bad("duplicate kernel " + name);
  }
  if (!r.AtEnd()) return bad("trailing bytes");
  return Status::Ok();
}

SignatureCache::Fatbin& SignatureCache::LoadLocked(uint64_t fatbin_hash) {
  Fatbin& fb = fatbins_[fatbin_hash];
  if (fb.disk_checked || dir_.empty()) return fb;
  fb.disk_checked = true;
  std::string path = CacheFilePath(dir_, fatbin_hash);
  std::string bytes;
  bool missing = false;
  Status st = ReadFile(path, &bytes, &missing);
  if (missing) return fb;
  std::map<std::string, Entry> loaded;
  if (st.ok()) st = Deserialize(bytes, fatbin_hash, &loaded);
  if (!st.ok()) {
    spdlog::warn("kernel signature cache: ignoring {} ({}); it will be rewritten", path, st.ToString());
    ++stats_.corrupt_files;
    fb.dirty = true;
    return fb;
  }
  ++stats_.files_loaded;
  for (auto& [name, e] : loaded) fb.kernels.emplace(name, std::move(e));  // memory entries win
  return fb;
}

bool SignatureCache::LookupLocked(uint64_t fatbin_hash, const KernelRequest& request, KernelSignature* out) {
  Fatbin& fb = LoadLocked(fatbin_hash);
  auto it = fb.kernels.find(request.mangled_name);
  if (it == fb.kernels.end()) return false;
  const KernelRequest& have = it->second.request;
  if (have.kparams != request.kparams ||
      (have.has_nv_info || !have.kparams.empty()) != (request.has_nv_info || !request.kparams.empty())) {
    return false;
  }
  ++stats_.memory_hits;
  if (it->second.from_disk) ++stats_.disk_hits;
  *out = it->second.signature;
  return true;
}

Status SignatureCache::Resolve(uint64_t fatbin_hash, const KernelRequest& request, KernelSignature* out) {
  std::vector<KernelSignature> sigs;
  std::vector<Status> statuses;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (LookupLocked(fatbin_hash, request, out)) return Status::Ok();
  }
  ResolveKernelSignatures({request}, &sigs, &statuses);
  if (!statuses[0].ok()) return statuses[0];
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.resolved;
    Fatbin& fb = fatbins_[fatbin_hash];
    fb.kernels[request.mangled_name] = Entry{request, sigs[0], false};
    fb.dirty = true;
  }
  *out = std::move(sigs[0]);
  return Status::Ok();
}

Status SignatureCache::ResolveAll(uint64_t fatbin_hash, const std::vector<KernelRequest>& requests,
                                  std::vector<KernelSignature>* out, std::vector<Status>* statuses) {
  out->assign(requests.size(), KernelSignature{});
  std::vector<Status> st(requests.size(), Status::Ok());
  std::vector<size_t> miss;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!LookupLocked(fatbin_hash, requests[i], &(*out)[i])) miss.push_back(i);
    }
  }
  if (!miss.empty()) {
    std::vector<KernelRequest> batch;
    for (size_t i : miss) batch.push_back(requests[i]);
    std::vector<KernelSignature> sigs;
    std::vector<Status> sts;
    ResolveKernelSignatures(batch, &sigs, &sts);
    std::lock_guard<std::mutex> lock(mu_);
    Fatbin& fb = fatbins_[fatbin_hash];
    for (size_t j = 0; j < miss.size(); ++j) {
      st[miss[j]] = sts[j];
      if (!sts[j].ok()) continue;
      ++stats_.resolved;
      fb.kernels[batch[j].mangled_name] = Entry{batch[j], sigs[j], false};
      fb.dirty = true;
      (*out)[miss[j]] = std::move(sigs[j]);
    }
  }
  Status first = Status::Ok();
  for (const auto& s : st) {
    if (!s.ok()) {
      first = s;
      break;
    }
  }
  if (statuses) *statuses = std::move(st);
  Status fs = FlushOne(fatbin_hash);
  if (first.ok() && !fs.ok()) spdlog::warn("kernel signature cache: {}", fs.ToString());
  return first;
}

Status SignatureCache::FlushOne(uint64_t fatbin_hash) {
  if (dir_.empty()) return Status::Ok();
  std::lock_guard<std::mutex> wlock(write_mu_);
  std::string data;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fatbins_.find(fatbin_hash);
    if (it == fatbins_.end() || !it->second.dirty || it->second.kernels.empty()) return Status::Ok();
    data = Serialize(fatbin_hash, it->second.kernels);
    it->second.dirty = false;
  }
  Status st = WriteFileAtomically(dir_, CacheFilePath(dir_, fatbin_hash), data);
  std::lock_guard<std::mutex> lock(mu_);
  if (st.ok()) {
    ++stats_.files_written;
  } else {
    fatbins_[fatbin_hash].dirty = true;  // try again on the next flush
  }
  return st;
}

Status SignatureCache::Flush() {
  if (dir_.empty()) return Status::Ok();
  std::vector<uint64_t> dirty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [h, fb] : fatbins_)
      if (fb.dirty) dirty.push_back(h);
  }
  Status first = Status::Ok();
  for (uint64_t h : dirty) {
    Status st = FlushOne(h);
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

SignatureCache::Stats SignatureCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace phos::signature
