#include "image/image_catalog.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "image/file_util.h"
#include "image/image_layout.h"
#include "image/image_reader.h"
#include "image/recovery.h"

namespace phos::image {
namespace fs = std::filesystem;

Status ImageCatalog::Open(const std::string& root, std::unique_ptr<ImageCatalog>* out) {
  std::unique_ptr<ImageCatalog> c(new ImageCatalog(root));
  for (KeepClass k : {KeepClass::kLatest, KeepClass::kBest, KeepClass::kManual}) {
    std::error_code ec;
    fs::create_directories(c->ClassDir(k), ec);
    if (ec) return Status::IoError("create " + c->ClassDir(k) + ": " + ec.message());
  }
  PHOS_RETURN_IF_ERROR(RecoverDirectory(root));
  *out = std::move(c);
  return Status::Ok();
}

std::string ImageCatalog::ClassDir(KeepClass c) const {
  return root_ + "/" + std::string(KeepClassName(c));
}

std::string ImageCatalog::PathFor(KeepClass c, const std::string& name) const {
  return ClassDir(c) + "/" + name;
}

Status ImageCatalog::List(KeepClass c, std::vector<CatalogEntry>* out) const {
  out->clear();
  std::error_code ec;
  fs::directory_iterator it(ClassDir(c), ec);
  if (ec) return Status::IoError("list " + ClassDir(c) + ": " + ec.message());
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_directory(ec)) continue;
    v1::Manifest m;
    if (!ReadManifest(entry.path().string(), &m).ok()) continue;  // not an image
    CatalogEntry e;
    e.name = entry.path().filename().string();
    e.created_unix_ns = m.created_unix_ns();
    if (m.has_metric() && !std::isnan(m.metric())) e.metric = m.metric();
    out->push_back(std::move(e));
  }
  return Status::Ok();
}

Status ImageCatalog::Delete(KeepClass c, const std::string& name) const {
  const std::string dir = PathFor(c, name);
  const std::string manifest = dir + "/" + std::string(kManifestName);
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("delete", manifest, errno);
  }
  PHOS_RETURN_IF_ERROR(FsyncDir(dir));
  PHOS_RETURN_IF_ERROR(RemoveTree(dir));
  return FsyncDir(ClassDir(c));
}

Status ImageCatalog::ApplyRetention(KeepClass c, const RetentionPolicy& policy,
                                    std::vector<std::string>* deleted) const {
  if (c == KeepClass::kManual) return Status::Ok();  // never deleted by phos
  std::vector<CatalogEntry> entries;
  PHOS_RETURN_IF_ERROR(List(c, &entries));
  for (const std::string& name : PlanRetention(c, policy, std::move(entries))) {
    PHOS_RETURN_IF_ERROR(Delete(c, name));
    spdlog::info("image: retention ({}) deleted {}", KeepClassName(c), PathFor(c, name));
    if (deleted) deleted->push_back(name);
  }
  return Status::Ok();
}

}  // namespace phos::image
