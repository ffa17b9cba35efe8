// The one way phos makes a directory it built appear whole or not at all:
// an image (ImageWriter), a received image (ImageReceiver), a whole-process
// image (process::CheckpointProcess), a template (TemplateStore). Each
// builds its tree under a staging name, makes it durable, then renames it
// to its final name and syncs the parent, so a crash leaves either the old
// state or the complete new one, never half of it (docs/image-format.md
// "Commit").
#pragma once

#include <string>

#include "common/status.h"

namespace phos::image {

/// What is synced before the rename makes the tree visible.
enum class CommitSync {
  kNone,        // nothing, parent included: a tree that lives only until it is sent on
  kDirectory,   // the staged directory itself (its files were fsynced by their writer)
  kSubtree,     // every directory in the tree, deepest first, then the staged one
  kFilesystem,  // syncfs of its filesystem: files nobody fsynced (CRIU writes them)
};

/// What happens when `final_dir` exists.
enum class CommitReplace {
  kNever,     // AlreadyExists; `staged` is left in place for the caller to discard
  kExchange,  // swapped atomically with the old tree, which is then removed
};

/// Syncs `staged` as `sync` says, renames it to `final_dir`, then fsyncs the
/// parent of `final_dir` (not for kNone). `*visible` (optional) says whether
/// the rename happened: a failure after it (syncing the parent) leaves the
/// tree complete and in place, with only its durability unknown.
Status CommitDirectory(const std::string& staged, const std::string& final_dir, CommitSync sync,
                       CommitReplace replace = CommitReplace::kNever, bool* visible = nullptr);

}  // namespace phos::image
