#include "templates/template_store.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "common/file_identity.h"
#include "common/plain_name.h"
#include "image/commit_dir.h"
#include "image/file_util.h"
#include "image/image_layout.h"
#include "image/manifest_file.h"
#include "image/image_reader.h"
#include "common/clock_util.h"
#include "process/process_image.h"

namespace phos::templates {

using process::ProcessImage;
namespace fs = std::filesystem;

namespace {

/// The stamps of the files a verification covers: the manifest (it holds
/// the checksums) and gpu.img. Empty when either cannot be stat'ed.
std::vector<FileIdentity> StampImage(const std::string& dir) {
  std::vector<FileIdentity> out;
  for (std::string_view name : {image::kManifestName, image::kGpuImgName}) {
    FileIdentity id;
    if (!IdentifyFile(dir + "/" + std::string(name), &id)) return {};
    out.push_back(id);
  }
  return out;
}

/// Every checksum of the image in `dir` (ImageReader: manifest, gpu.img
/// header and length, every chunk).
Status VerifyImage(const std::string& dir) {
  std::unique_ptr<image::ImageReader> reader;
  PHOS_RETURN_IF_ERROR(image::ImageReader::Open(dir, {}, &reader));
  return reader->VerifyAll();
}

}  // namespace

struct TemplateStore::Entry {
  std::mutex op;                            // a Lease holds it
  bool present = false;                     // a template is committed (mu_)
  TemplateMeta meta;                        // mu_
  std::uint64_t cached_id = 0;              // id of the valid cache copy, 0 = none (mu_)
  /// StampImage of the cache copy taken before it was verified; empty = not
  /// verified by this phosd (mu_).
  std::vector<FileIdentity> verified_stamps;
  std::vector<TemplateInstance> instances;  // mu_
};

namespace {

std::string Hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The template's record in the manifest of its image (one format for
// everything an image directory says: proto/image.proto).
Status WriteMeta(const std::string& dir, const TemplateMeta& meta) {
  return image::AmendManifest(
      dir,
      [&](image::v1::Manifest* m) {
        image::v1::TemplateRecord* t = m->mutable_template_info();
        t->set_name(meta.name);
        t->set_id(meta.id);
        t->set_saved_unix_ms(meta.saved_unix_ms);
        t->set_source_pid(meta.source_pid);
        t->set_source_command(meta.source_command);
        t->set_mode(meta.mode);
        t->set_bytes(meta.bytes);
      },
      /*durable=*/true);
}

// The template record of a manifest already read (`dir` names it in errors).
Status MetaFromManifest(const image::v1::Manifest& m, const std::string& dir, TemplateMeta* meta) {
  if (!m.has_template_info() || m.template_info().id() == 0) {
    std::string why = dir + " is not a template: its manifest has no template record";
    if (fs::exists(dir + "/template.txt")) why += " (its template.txt was written by an older phos)";
    return Status::Corruption(why);
  }
  const image::v1::TemplateRecord& t = m.template_info();
  meta->name = t.name();
  meta->id = t.id();
  meta->saved_unix_ms = t.saved_unix_ms();
  meta->source_pid = static_cast<pid_t>(t.source_pid());
  meta->source_command = t.source_command();
  meta->mode = t.mode();
  meta->bytes = t.bytes();
  return Status::Ok();
}

Status ReadMeta(const std::string& dir, TemplateMeta* meta) {
  image::v1::Manifest m;
  PHOS_RETURN_IF_ERROR(image::ReadManifest(dir, &m));
  return MetaFromManifest(m, dir, meta);
}

std::uint64_t TreeBytes(const std::string& dir) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) n += it->file_size(ec);
  }
  return n;
}

std::uint64_t NewId() {
  std::random_device rd;
  std::uint64_t id = 0;
  while (id == 0) id = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return id;
}


}  // namespace

TemplateStore::TemplateStore(const Options& options) : root_(options.root) {}

TemplateStore::~TemplateStore() {
  stopping_.store(true);
  if (warm_.joinable()) warm_.join();
  // An empty cache (no template left) is not left behind in /dev/shm.
  if (!cache_root_.empty()) {
    rmdir((cache_root_ + "/.staging").c_str());
    rmdir(cache_root_.c_str());  // fails (fine) while it holds copies
  }
}

Status TemplateStore::CheckName(const std::string& name) {
  const bool tmp = name.size() >= 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
  if (!IsPlainName(name) || tmp) {
    return Status::InvalidArgument("bad template name '" + name +
                                   "': use 1-100 characters of A-Z a-z 0-9 _ . -, not starting with '.' and not "
                                   "ending in .tmp");
  }
  return Status::Ok();
}

std::string TemplateStore::DefaultCacheRoot(const std::string& root) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: one cache per template root
  for (unsigned char c : root) h = (h ^ c) * 0x100000001b3ull;
  return "/dev/shm/phos-templates-" + std::to_string(geteuid()) + "-" + Hex(h).substr(0, 12);
}

Status TemplateStore::Open(const Options& options, std::unique_ptr<TemplateStore>* out) {
  std::unique_ptr<TemplateStore> store(new TemplateStore(options));
  std::error_code ec;
  fs::create_directories(store->root_ + "/.staging", ec);
  if (ec) return Status::IoError("cannot create the template directory " + store->root_ + "/.staging: " + ec.message());
  store->SetUpCache(options.cache_root);
  PHOS_RETURN_IF_ERROR(store->Load());
  const bool any = !store->entries_.empty();  // Load() made entries for committed templates only
  if (options.warm && any && (!store->cache_root_.empty() || options.prepare)) {
    store->warm_ = std::thread([s = store.get(), prepare = options.prepare] { s->WarmLoop(prepare); });
  }
  *out = std::move(store);
  return Status::Ok();
}

namespace {

/// NotSupported unless `dir` (existing) is a directory of phosd's uid, not
/// writable by others, on tmpfs. /dev/shm is world-writable: a symlink or
/// someone else's directory planted under the expected name is not used.
Status CheckCacheDir(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return Status::FromErrno("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
    return Status::NotSupported(dir + " is not a directory owned by uid " + std::to_string(geteuid()) +
                                " and writable only by it");
  }
  struct statfs sf;
  if (statfs(dir.c_str(), &sf) != 0) return Status::FromErrno("statfs " + dir, errno);
  if (static_cast<unsigned long>(sf.f_type) != static_cast<unsigned long>(TMPFS_MAGIC)) {
    char type[24];
    std::snprintf(type, sizeof type, "0x%lx", static_cast<unsigned long>(sf.f_type));
    return Status::NotSupported(dir + " is not on tmpfs (filesystem type " + type + ")");
  }
  return Status::Ok();
}

}  // namespace

void TemplateStore::SetUpCache(const std::string& wanted) {
  if (wanted.empty()) {
    cache_note_ = "the template cache is off (--template-cache off): starts read templates from " + root_;
    spdlog::info("templates: {}", cache_note_);
    return;
  }
  // Checked now, created only when the first template is copied into it
  // (EnsureCacheDir): a phosd without templates leaves nothing in /dev/shm.
  std::error_code ec;
  Status s = fs::exists(wanted, ec) ? CheckCacheDir(wanted) : Status::Ok();
  if (s.ok() && !fs::exists(wanted, ec)) {
    struct statfs sf;
    const std::string parent = fs::path(wanted).parent_path().string();
    if (statfs(parent.c_str(), &sf) != 0) {
      s = Status::FromErrno("statfs " + parent + " (the parent of " + wanted + ")", errno);
    } else if (static_cast<unsigned long>(sf.f_type) != static_cast<unsigned long>(TMPFS_MAGIC)) {
      s = Status::NotSupported(parent + " is not on tmpfs");
    }
  }
  if (!s.ok()) {
    cache_note_ = "no template cache: " + s.message() + "; starts read templates from " + root_;
    spdlog::warn("templates: {}", cache_note_);
    return;
  }
  cache_root_ = wanted;
  spdlog::info("templates: in-memory copies in {} (tmpfs)", cache_root_);
}

Status TemplateStore::EnsureCacheDir() {
  if (mkdir(cache_root_.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno("mkdir " + cache_root_, errno);
  }
  PHOS_RETURN_IF_ERROR(CheckCacheDir(cache_root_));
  if (mkdir((cache_root_ + "/.staging").c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno("mkdir " + cache_root_ + "/.staging", errno);
  }
  return Status::Ok();
}

Status TemplateStore::Load() {
  // Saves interrupted by a crash, and replaced templates not yet removed.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_ + "/.staging", ec)) {
    spdlog::info("templates: removing {} (an interrupted save)", e.path().string());
    fs::remove_all(e.path(), ec);
  }
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !CheckName(name).ok()) continue;
    // One read of the manifest (it can hold the app's module images) for
    // both records.
    const std::string dir = e.path().string();
    image::v1::Manifest manifest;
    TemplateMeta meta;
    ProcessImage im;
    Status s = image::ReadManifest(dir, &manifest);
    if (s.ok()) s = MetaFromManifest(manifest, dir, &meta);
    if (s.ok()) s = process::ProcessImageFromManifest(manifest, dir, &im);
    if (!s.ok()) {
      spdlog::warn("templates: skipping {}: {}", e.path().string(), s.ToString());
      continue;
    }
    auto entry = std::make_shared<Entry>();
    entry->present = true;
    entry->meta = meta;
    entry->meta.name = name;
    entries_[name] = entry;
  }
  if (ec) return Status::IoError("cannot list " + root_ + ": " + ec.message());
  if (cache_root_.empty() || !fs::exists(cache_root_, ec)) return Status::Ok();
  // Cache copies of a phosd that ran before: kept if they are the current
  // version of a template, else removed (with interrupted copies).
  fs::remove_all(cache_root_ + "/.staging", ec);
  for (const auto& e : fs::directory_iterator(cache_root_, ec)) {
    const std::string name = e.path().filename().string();
    auto it = entries_.find(name);
    TemplateMeta meta;
    if (it != entries_.end() && ReadMeta(e.path().string(), &meta).ok() && meta.id == it->second->meta.id) {
      it->second->cached_id = meta.id;
      continue;
    }
    spdlog::info("templates: removing stale cache copy {}", e.path().string());
    fs::remove_all(e.path(), ec);
  }
  return Status::Ok();
}

void TemplateStore::WarmLoop(const std::function<void()>& prepare) {
  if (prepare) prepare();
  if (cache_root_.empty()) return;
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [name, e] : entries_) {
      if (e->present && e->cached_id != e->meta.id) names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    if (stopping_.load()) return;
    Lease lease = Acquire(name);
    std::uint64_t ms = 0;
    if (Status s = Fill(lease, &ms); !s.ok()) spdlog::warn("templates: warming the cache copy of {}: {}", name, s.ToString());
  }
}

TemplateStore::Lease TemplateStore::Acquire(const std::string& name) {
  Lease lease;
  lease.name_ = name;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& slot = entries_[name];
    if (!slot) slot = std::make_shared<Entry>();
    lease.entry_ = slot;
  }
  lease.lock_ = std::unique_lock<std::mutex>(lease.entry_->op);
  return lease;
}

bool TemplateStore::Get(const Lease& lease, TemplateMeta* meta) const {
  std::lock_guard<std::mutex> l(mu_);
  if (!lease.entry_->present) return false;
  *meta = lease.entry_->meta;
  return true;
}

Status TemplateStore::PrepareStaging(const Lease& lease, std::string* dir) {
  *dir = root_ + "/.staging/" + lease.name();
  PHOS_RETURN_IF_ERROR(image::RemoveTree(*dir));
  PHOS_RETURN_IF_ERROR(image::RemoveTree(*dir + ".tmp"));
  std::error_code ec;
  fs::create_directories(root_ + "/.staging", ec);
  if (ec) return Status::IoError("cannot create " + root_ + "/.staging: " + ec.message());
  return Status::Ok();
}

Status TemplateStore::Commit(const Lease& lease, const std::string& staged, TemplateMeta* meta) {
  meta->name = lease.name();
  meta->id = NewId();
  meta->bytes = TreeBytes(staged);
  PHOS_RETURN_IF_ERROR(WriteMeta(staged, *meta));
  const std::string final_dir = DirOf(lease.name());
  // A template of that name is replaced atomically: it is complete at every instant.
  PHOS_RETURN_IF_ERROR(
      image::CommitDirectory(staged, final_dir, image::CommitSync::kDirectory, image::CommitReplace::kExchange));
  {
    std::lock_guard<std::mutex> l(mu_);
    lease.entry_->present = true;
    lease.entry_->meta = *meta;
    lease.entry_->verified_stamps.clear();  // the copy (removed below) was of the replaced template
  }
  // The cache copy of the replaced template is of no use any more.
  if (!cache_root_.empty()) (void)image::RemoveTree(cache_root_ + "/" + lease.name());
  return Status::Ok();
}

bool TemplateStore::CacheValid(const Lease& lease, std::string* dir) const {
  if (cache_root_.empty()) return false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (lease.entry_->cached_id == 0 || lease.entry_->cached_id != lease.entry_->meta.id) return false;
  }
  *dir = cache_root_ + "/" + lease.name();
  // A stat on tmpfs: catches a copy someone removed under us.
  std::error_code ec;
  return fs::exists(*dir + "/" + std::string(image::kManifestName), ec);
}

Status TemplateStore::FillLocked(const Lease& lease, const TemplateMeta& meta, std::uint64_t* fill_ms) {
  const auto t0 = Clock::now();
  PHOS_RETURN_IF_ERROR(EnsureCacheDir().WithContext("the template cache"));
  const std::string staging = cache_root_ + "/.staging/" + lease.name();
  PHOS_RETURN_IF_ERROR(image::RemoveTree(staging));
  std::error_code ec;
  // File by file: the copy of a large template stops early when phosd does.
  const fs::path from = DirOf(lease.name());
  fs::create_directories(staging, ec);
  for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (stopping_.load()) {
      (void)image::RemoveTree(staging);
      return Status::Unavailable("phosd is stopping");
    }
    const fs::path to = fs::path(staging) / fs::relative(it->path(), from);
    if (it->is_directory()) {
      fs::create_directories(to, ec);
    } else {
      fs::copy_file(it->path(), to, fs::copy_options::overwrite_existing, ec);
    }
    if (ec) break;
  }
  if (ec) {
    (void)image::RemoveTree(staging);
    return image::ErrnoError("copying " + from.string() + " to", staging, ec.value());
  }
  // Verified before it is installed, so no start ever uses a bad copy. The
  // stamps are taken first: a change during the verification shows later.
  const auto v0 = Clock::now();
  std::vector<FileIdentity> stamps = StampImage(staging);
  if (Status v = VerifyImage(staging); !v.ok()) {
    (void)image::RemoveTree(staging);
    return v.WithContext("the template " + from.string() + " fails its checksum verification (copied to the cache)");
  }
  const std::uint64_t verify_ms = MsSince(v0);
  // In memory (tmpfs): nothing to sync.
  PHOS_RETURN_IF_ERROR(image::CommitDirectory(staging, cache_root_ + "/" + lease.name(), image::CommitSync::kNone,
                                              image::CommitReplace::kExchange));
  {
    std::lock_guard<std::mutex> l(mu_);
    lease.entry_->cached_id = meta.id;
    lease.entry_->verified_stamps = std::move(stamps);
  }
  *fill_ms = MsSince(t0);
  spdlog::info("templates: {} copied to {} and verified ({} bytes, {} ms, of which verification {} ms)", lease.name(),
               cache_root_, meta.bytes, *fill_ms, verify_ms);
  return Status::Ok();
}

Status TemplateStore::VerifiedCopy(const Lease& lease, const TemplateMeta& meta, std::string* dir,
                                   std::uint64_t* fill_ms) {
  *fill_ms = 0;
  if (CacheValid(lease, dir)) {
    std::vector<FileIdentity> now = StampImage(*dir);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!now.empty() && now == lease.entry_->verified_stamps) return Status::Ok();
    }
    // Made by an earlier phosd (never verified by this one), or its files
    // changed since: verify it now.
    const auto t0 = Clock::now();
    Status v = VerifyImage(*dir);
    if (v.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      lease.entry_->verified_stamps = std::move(now);
      spdlog::info("templates: the in-memory copy {} verified ({} ms)", *dir, MsSince(t0));
      return Status::Ok();
    }
    spdlog::warn("templates: the in-memory copy {} fails verification ({}); removing it and copying {} again", *dir,
                 v.ToString(), DirOf(lease.name()));
    {
      std::lock_guard<std::mutex> l(mu_);
      lease.entry_->cached_id = 0;
      lease.entry_->verified_stamps.clear();
    }
    (void)image::RemoveTree(*dir);
  }
  PHOS_RETURN_IF_ERROR(FillLocked(lease, meta, fill_ms));
  *dir = cache_root_ + "/" + lease.name();
  return Status::Ok();
}

Status TemplateStore::Fill(const Lease& lease, std::uint64_t* fill_ms) {
  *fill_ms = 0;
  TemplateMeta meta;
  if (cache_root_.empty() || !Get(lease, &meta)) return Status::Ok();
  std::string dir;
  return VerifiedCopy(lease, meta, &dir, fill_ms);
}

Status TemplateStore::StartDir(const Lease& lease, std::string* dir, bool* from_cache, std::uint64_t* fill_ms,
                               bool* verified) {
  *fill_ms = 0;
  *from_cache = false;
  *verified = false;
  TemplateMeta meta;
  if (!Get(lease, &meta)) {
    return Status::NotFound("no template '" + lease.name() + "' in " + root_ +
                            " (`phos template list` shows the saved ones; `phos template save " + lease.name() +
                            " --pid P` makes one)");
  }
  if (!cache_root_.empty()) {
    Status s = VerifiedCopy(lease, meta, dir, fill_ms);
    if (s.ok()) {
      *from_cache = true;
      *verified = true;
      return Status::Ok();
    }
    spdlog::warn("templates: no verified in-memory copy of {} ({}); this start reads {} and verifies it", lease.name(),
                 s.ToString(), DirOf(lease.name()));
  }
  *dir = DirOf(lease.name());
  return Status::Ok();
}

Status TemplateStore::Remove(const Lease& lease) {
  TemplateMeta meta;
  if (!Get(lease, &meta)) {
    return Status::NotFound("no template '" + lease.name() + "' in " + root_ + " (`phos template list` shows them)");
  }
  // Out of ROOT first (one rename: never half a template under its name),
  // then deleted.
  const std::string doomed = root_ + "/.staging/" + lease.name() + ".removed";
  PHOS_RETURN_IF_ERROR(image::RemoveTree(doomed));
  if (rename(DirOf(lease.name()).c_str(), doomed.c_str()) != 0) {
    return image::ErrnoError("rename " + DirOf(lease.name()) + " to", doomed, errno);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    lease.entry_->present = false;
    lease.entry_->cached_id = 0;
    lease.entry_->verified_stamps.clear();
    lease.entry_->meta = TemplateMeta{};
  }
  (void)image::FsyncDir(root_);
  if (Status r = image::RemoveTree(doomed); !r.ok()) spdlog::warn("templates: {}", r.ToString());
  if (!cache_root_.empty()) (void)image::RemoveTree(cache_root_ + "/" + lease.name());
  return Status::Ok();
}

void TemplateStore::AddInstance(const Lease& lease, const TemplateInstance& instance) {
  std::lock_guard<std::mutex> l(mu_);
  lease.entry_->instances.push_back(instance);
}

std::vector<TemplateInstance> TemplateStore::LiveInstances(
    const Lease& lease, const std::function<bool(const TemplateInstance&)>& alive) {
  std::lock_guard<std::mutex> l(mu_);
  auto& v = lease.entry_->instances;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const TemplateInstance& i) { return !alive(i); }), v.end());
  return v;
}

std::vector<TemplateView> TemplateStore::List(const std::function<bool(const TemplateInstance&)>& alive) {
  std::vector<TemplateView> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [name, e] : entries_) {
    auto& v = e->instances;
    v.erase(std::remove_if(v.begin(), v.end(), [&](const TemplateInstance& i) { return !alive(i); }), v.end());
    if (!e->present) continue;
    TemplateView view;
    view.meta = e->meta;
    view.dir = DirOf(name);
    if (!cache_root_.empty() && e->cached_id == e->meta.id) view.cache_dir = cache_root_ + "/" + name;
    view.instances = v;
    out.push_back(std::move(view));
  }
  return out;  // entries_ is a std::map: sorted by name
}

}  // namespace phos::templates
