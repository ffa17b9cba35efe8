#include "peer/fabric_message.h"

#include <cstring>
#include <limits>
#include <string>

namespace phos::peer {

using backend::CollectiveOp;
using backend::FabricMessage;

void EncodeFabricMessage(const FabricMessage& in, peer::v1::CollectiveMessage* out) {
  switch (in.kind) {
    case FabricMessage::Kind::kCollective: out->set_kind(peer::v1::CollectiveMessage::COLLECTIVE); break;
    case FabricMessage::Kind::kSend: out->set_kind(peer::v1::CollectiveMessage::SEND); break;
    case FabricMessage::Kind::kAbort: out->set_kind(peer::v1::CollectiveMessage::ABORT); break;
  }
  out->set_comm(in.comm.data(), in.comm.size());
  out->set_nranks(in.nranks);
  out->set_from_rank(in.from_rank);
  out->set_to_rank(in.to_rank);
  out->set_seq(in.seq);
  if (in.kind != FabricMessage::Kind::kAbort) {
    out->set_op_kind(static_cast<std::uint32_t>(in.op.kind));
    out->set_datatype(in.op.datatype);
    out->set_redop(in.op.redop);
    out->set_scalar(in.op.scalar);  // by value: the sender resolved a device scalar
    out->set_peer(in.op.peer);
    out->set_count(in.op.count);
    out->set_data(in.data.data(), in.data.size());
  }
  out->set_why(in.why);
}

Status DecodeFabricMessage(const peer::v1::CollectiveMessage& in, FabricMessage* out) {
  *out = FabricMessage{};
  switch (in.kind()) {
    case peer::v1::CollectiveMessage::COLLECTIVE: out->kind = FabricMessage::Kind::kCollective; break;
    case peer::v1::CollectiveMessage::SEND: out->kind = FabricMessage::Kind::kSend; break;
    case peer::v1::CollectiveMessage::ABORT: out->kind = FabricMessage::Kind::kAbort; break;
    default: return Status::InvalidArgument("a collective message of unknown kind " + std::to_string(in.kind()));
  }
  if (in.comm().size() != out->comm.size()) {
    return Status::InvalidArgument("a collective message's communicator id has " + std::to_string(in.comm().size()) +
                                   " bytes, not " + std::to_string(out->comm.size()));
  }
  std::memcpy(out->comm.data(), in.comm().data(), out->comm.size());
  out->nranks = in.nranks();
  out->from_rank = in.from_rank();
  out->to_rank = in.to_rank();
  out->seq = in.seq();
  if (in.why().size() > 4096) return Status::InvalidArgument("a collective message's reason is over 4 KiB");
  out->why = in.why();
  if (out->kind == FabricMessage::Kind::kAbort) return Status::Ok();
  if (in.op_kind() > static_cast<std::uint32_t>(CollectiveOp::Kind::kRecv) || in.datatype() > 0xff ||
      in.redop() > 0xff) {
    return Status::InvalidArgument("a collective message's op is malformed (kind " + std::to_string(in.op_kind()) +
                                   ", type " + std::to_string(in.datatype()) + ", operator " +
                                   std::to_string(in.redop()) + ")");
  }
  if (in.data().size() > kMaxCollectiveMessageBytes) {
    return Status::InvalidArgument("a collective message carries " + std::to_string(in.data().size()) +
                                   " bytes, more than " + std::to_string(kMaxCollectiveMessageBytes));
  }
  out->op.kind = static_cast<CollectiveOp::Kind>(in.op_kind());
  out->op.datatype = static_cast<std::uint8_t>(in.datatype());
  out->op.redop = static_cast<std::uint8_t>(in.redop());
  out->op.scalar_on_device = false;
  out->op.scalar = in.scalar();
  out->op.peer = in.peer();
  out->op.count = in.count();
  out->data.assign(in.data().begin(), in.data().end());
  return Status::Ok();
}

}  // namespace phos::peer
