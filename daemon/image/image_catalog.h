// ImageCatalog: the image root with one directory per lifecycle class
// (ROOT/latest, ROOT/best, ROOT/manual) and retention applied per class.
//
// Flow for the C/R engine: path = catalog.PathFor(cls, name); write it with
// ImageWriter (the class's write-life hint comes from Manifest.keep); after
// a successful Commit only, catalog.ApplyRetention(cls, policy).
// Deleting an image removes its manifest first (then fsyncs the directory),
// so a crash mid-delete leaves a non-image, never a damaged image that
// looks whole.
//
// Stateless apart from the root path: safe to use from several threads,
// but two concurrent ApplyRetention calls on one class may both try to
// delete the same image (the second then finds it gone, which is fine).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "image/retention.h"

namespace phos::image {

class ImageCatalog {
 public:
  /// Creates ROOT and the class directories, and removes leftover *.tmp
  /// checkpoints (RecoverDirectory).
  static Status Open(const std::string& root, std::unique_ptr<ImageCatalog>* out);

  const std::string& root() const { return root_; }
  std::string ClassDir(KeepClass c) const;
  std::string PathFor(KeepClass c, const std::string& name) const;

  /// Valid images of a class (directories with a valid manifest).
  Status List(KeepClass c, std::vector<CatalogEntry>* out) const;
  /// Plans with PlanRetention and deletes; `deleted` gets the names.
  Status ApplyRetention(KeepClass c, const RetentionPolicy& policy,
                        std::vector<std::string>* deleted = nullptr) const;
  /// Deletes one image of a class (manifest first).
  Status Delete(KeepClass c, const std::string& name) const;

 private:
  explicit ImageCatalog(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

}  // namespace phos::image
