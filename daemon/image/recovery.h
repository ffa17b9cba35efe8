// Crash recovery of checkpoint directories.
//
// A directory is an image only if it has a valid manifest (written last,
// then renamed into place). RecoverDirectory removes what a crash can leave
// behind: `NAME.tmp` directories of checkpoints that never committed. phosd
// calls it at startup on its image root; each removal is logged as
// "removed incomplete checkpoint X". Directories without a manifest that do
// not end in .tmp are not ours to delete: they are skipped (and never
// listed as images).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace phos::image {

/// True when DIR has a manifest that decodes and validates.
bool IsImageDirectory(const std::string& dir);

/// Removes `*.tmp` directories in `root` and in its immediate
/// subdirectories (the class directories latest/, best/, manual/).
/// `removed` (optional) receives the removed paths. A missing root is fine.
Status RecoverDirectory(const std::string& root, std::vector<std::string>* removed = nullptr);

}  // namespace phos::image
