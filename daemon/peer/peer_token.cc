#include "peer/peer_token.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

namespace phos::peer {

Status LoadPeerToken(const std::string& path, std::string* token) {
  if (path.empty()) return Status::InvalidArgument("no peer token file given (--peer-token FILE)");
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("peer token file " + path + " does not exist");
    return Status::FromErrno("peer token file " + path, errno);
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument("peer token file " + path + " is not a regular file");
  // Anyone who can read the token can push images into this daemon; one
  // who can write it can lock peers out. Refuse any group/other access.
  if ((st.st_mode & 077) != 0) {
    std::string who;
    if (st.st_mode & (S_IRGRP | S_IWGRP)) who = "group";
    if (st.st_mode & (S_IROTH | S_IWOTH)) who += who.empty() ? "others" : " and others";
    const bool readable = (st.st_mode & (S_IRGRP | S_IROTH)) != 0;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument("peer token file " + path + " is " + (readable ? "readable" : "accessible") +
                                   " by " + (who.empty() ? "group or others" : who) + " (mode " + mode +
                                   "); make it private: chmod 600 " + path);
  }
  std::ifstream in(path);
  if (!in) return Status::FromErrno("open peer token file " + path, errno);
  std::string line;
  std::getline(in, line);
  const char* ws = " \t\r\n\v\f";
  const auto first = line.find_first_not_of(ws);
  if (first == std::string::npos) {
    return Status::InvalidArgument("peer token file " + path + " is empty (its first line is the token)");
  }
  const auto last = line.find_last_not_of(ws);
  *token = line.substr(first, last - first + 1);
  return Status::Ok();
}

bool PeerTokenMatches(std::string_view expected, std::string_view presented) {
  // Every byte of `expected` is looked at whatever `presented` holds; the
  // length difference is folded into the same accumulator.
  unsigned diff = expected.size() == presented.size() ? 0u : 1u;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0u;
    diff |= static_cast<unsigned>(static_cast<unsigned char>(expected[i]) ^ p);
  }
  // volatile: keep the compiler from turning the loop into an early exit.
  volatile unsigned result = diff;
  return result == 0 && !expected.empty();
}

}  // namespace phos::peer
