#include "image/job_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>


namespace phos::image {
namespace {

constexpr char kMagic[8] = {'p', 'h', 'o', 's', 'j', 'o', 'b', '\0'};

Status SyncPath(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path, errno);
  const int rc = fsync(fd);
  const int e = errno;
  close(fd);
  return rc == 0 ? Status::Ok() : Status::FromErrno("fsync " + path, e);
}

}  // namespace

bool IsJobImage(const std::string& dir) { return access((dir + "/" + kJobManifestFile).c_str(), F_OK) == 0; }

std::string EncodeJobManifest(const image::v1::JobManifest& m) {
  std::string bytes(kMagic, sizeof kMagic);
  const std::uint32_t version = kJobFormatVersion;
  bytes.append(reinterpret_cast<const char*>(&version), sizeof version);
  bytes += m.SerializeAsString();
  return bytes;
}

Status WriteJobManifest(const std::string& dir, const image::v1::JobManifest& m) {
  const std::string bytes = EncodeJobManifest(m);
  const std::string final_path = dir + "/" + kJobManifestFile;
  const std::string staged = final_path + ".tmp";
  {
    std::ofstream out(staged, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return Status::IoError("cannot write " + staged);
  }
  PHOS_RETURN_IF_ERROR(SyncPath(staged, O_RDONLY));
  if (rename(staged.c_str(), final_path.c_str()) != 0) return Status::FromErrno("rename " + staged, errno);
  return SyncPath(dir, O_RDONLY | O_DIRECTORY);
}

Status ReadJobManifest(const std::string& dir, image::v1::JobManifest* m) {
  const std::string path = dir + "/" + kJobManifestFile;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + " does not exist (not a job image)");
  std::stringstream ss;
  ss << in.rdbuf();
  return DecodeJobManifest(ss.str(), path, m);
}

Status DecodeJobManifest(std::string_view bytes, const std::string& path, image::v1::JobManifest* m) {
  if (bytes.size() < sizeof kMagic + 4 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return Status::Corruption(path + " is not a phos job manifest (bad magic)");
  }
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof kMagic, sizeof version);
  if (version != kJobFormatVersion) {
    return Status::Corruption(path + " has job format version " + std::to_string(version) + "; this phos reads " +
                              std::to_string(kJobFormatVersion) + " (use the phos that wrote it)");
  }
  if (!m->ParseFromArray(bytes.data() + sizeof kMagic + 4, static_cast<int>(bytes.size() - sizeof kMagic - 4))) {
    return Status::Corruption(path + ": the job manifest does not parse");
  }
  if (m->ranks_size() == 0) return Status::Corruption(path + " lists no ranks");
  for (const auto& r : m->ranks()) {
    if (r.dir().empty() || r.dir().find('/') != std::string::npos || r.dir() == "." || r.dir() == "..") {
      return Status::Corruption(path + " names a rank directory '" + r.dir() + "' outside the job directory");
    }
  }
  return Status::Ok();
}

}  // namespace phos::image
