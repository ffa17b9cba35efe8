#include "image/recovery.h"

#include <filesystem>

#include <spdlog/spdlog.h>

#include "image/file_util.h"
#include "image/image_reader.h"

namespace phos::image {
namespace fs = std::filesystem;

bool IsImageDirectory(const std::string& dir) {
  v1::Manifest m;
  return ReadManifest(dir, &m).ok();
}

namespace {

bool IsTmpName(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
}

Status RecoverOne(const fs::path& dir, int depth, std::vector<std::string>* removed) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return Status::Ok();
    return Status::IoError("list " + dir.string() + ": " + ec.message());
  }
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (IsTmpName(name)) {
      PHOS_RETURN_IF_ERROR(RemoveTree(entry.path().string()));
      spdlog::info("image: removed incomplete checkpoint {}", entry.path().string());
      if (removed) removed->push_back(entry.path().string());
    } else if (depth == 0 && !IsImageDirectory(entry.path().string())) {
      PHOS_RETURN_IF_ERROR(RecoverOne(entry.path(), depth + 1, removed));
    }
  }
  return Status::Ok();
}

}  // namespace

Status RecoverDirectory(const std::string& root, std::vector<std::string>* removed) {
  return RecoverOne(fs::path(root), 0, removed);
}

}  // namespace phos::image
