// backend::FabricMessage <-> the peer plane's CollectiveMessage
// (proto/peer.proto; docs/backends.md "Collectives across phosds").
//
// Decoding reads bytes another phosd sent: it checks the shape (the id's
// size, a known kind, op fields inside their types' ranges, at most 16 MiB
// of data) and leaves what needs the communicator (its size, which ranks
// are here, the extents) to the backend that receives it.
#pragma once

#include "backend/collective.h"
#include "common/status.h"
#include "peer.pb.h"

namespace phos::peer {

/// The most data one message carries (the sim ships each op in one).
constexpr std::uint64_t kMaxCollectiveMessageBytes = 16ull << 20;

void EncodeFabricMessage(const backend::FabricMessage& in, peer::v1::CollectiveMessage* out);
/// InvalidArgument naming what is malformed.
Status DecodeFabricMessage(const peer::v1::CollectiveMessage& in, backend::FabricMessage* out);

}  // namespace phos::peer
