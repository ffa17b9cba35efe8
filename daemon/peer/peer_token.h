// The shared secret of the peer plane (docs/migration.md "Security"):
// loading it from its file and comparing what a caller presents.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace phos::peer {

/// The gRPC metadata header that carries the token on every PhosPeer call.
inline constexpr const char* kPeerTokenHeader = "phos-peer-token";

/// Reads the token: the file's first line, whitespace-trimmed. Refuses
/// (InvalidArgument/NotFound, naming the file and what to do) a missing
/// file, one readable or writable by group or others (says which and the
/// mode), and an empty token.
Status LoadPeerToken(const std::string& path, std::string* token);

/// Compares in time that depends only on `expected`'s length, not on where
/// the first difference is (no timing oracle for guessing the token).
bool PeerTokenMatches(std::string_view expected, std::string_view presented);

}  // namespace phos::peer
