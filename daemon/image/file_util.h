// Small POSIX helpers of the image store: durable writes, directory fsync,
// tree removal, and the errors they produce. ENOSPC/EDQUOT become a
// "disk full" IoError naming the file (IsDiskFull tells them apart).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace phos::image {

/// IoError "disk full: writing PATH: No space left on device; free space on
/// that filesystem or write the checkpoint elsewhere (--out)".
Status DiskFullError(std::string_view path, int err);
/// True for statuses made by DiskFullError.
bool IsDiskFull(const Status& s);
/// Errno -> Status: DiskFullError for ENOSPC/EDQUOT, else FromErrno("what PATH").
Status ErrnoError(std::string_view what, std::string_view path, int err);

/// Creates/truncates PATH, writes all bytes, fsyncs, closes. `write_life_hint`
/// (RWH_WRITE_LIFE_*, 0 = none) is applied before writing.
Status WriteFileDurable(const std::string& path, std::string_view bytes,
                        std::uint64_t write_life_hint);
/// Reads a whole (small) file; Corruption if it is larger than max_bytes.
Status ReadSmallFile(const std::string& path, std::uint64_t max_bytes, std::string* out);
/// fsync of a directory (makes creates/renames inside it durable).
Status FsyncDir(const std::string& path);
/// rm -rf PATH (absent is fine).
Status RemoveTree(const std::string& path);
/// F_SET_RW_HINT on fd; failure is logged at debug (hints are advisory).
void SetWriteLifeHint(int fd, std::uint64_t hint, std::string_view path);

}  // namespace phos::image
