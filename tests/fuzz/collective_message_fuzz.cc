// libFuzzer target for what another phosd sends about an NCCL communicator
// spanning phosds (PhosPeer.Collective; docs/backends.md "Collectives across
// phosds"): the bytes of a CollectiveMessage, decoded by
// peer::DecodeFabricMessage and delivered to a live sim backend holding one
// formed 2-rank communicator (rank 0 here, rank 1 at peer "B"). No message
// may crash phosd or be taken when it contradicts the communicator.
//
// Input: byte 0 — bit 0 set: keep the message's communicator id (else it
// is replaced by the live communicator's, so the delivery paths past the
// lookup are reached); the rest: the serialized CollectiveMessage. Seeds
// are made by make_collective_seeds.py.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "backend/backend_factory.h"
#include "peer/fabric_message.h"

namespace {

using namespace phos;
using namespace phos::backend;

class StubFabric final : public CollectiveFabric {
 public:
  Status Rendezvous(const CommunicatorId&, int nranks, int rank, const std::function<bool()>&,
                    std::vector<std::string>* where) override {
    if (nranks != 2 || rank != 0) return Status::InvalidArgument("the fuzzer forms 2-rank communicators");
    *where = {"", "B"};
    return Status::Ok();
  }
  Status Send(const std::string&, const FabricMessage&) override { return Status::Ok(); }
  void Leave(const CommunicatorId&, int) override {}
};

struct World {
  StubFabric fabric;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Context> ctx;
  World() {
    SimOptions o;
    o.memory_bytes = 64ull << 20;
    o.fabric = &fabric;
    if (!CreateSimBackend(o, &backend).ok() || !backend->CreateContext(0, &ctx).ok()) std::abort();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();
  static std::uint64_t iteration = 0;
  if (size < 1) return 0;
  const bool keep_comm = (data[0] & 1) != 0;
  peer::v1::CollectiveMessage proto;
  if (!proto.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  FabricMessage m;
  if (!peer::DecodeFabricMessage(proto, &m).ok()) return 0;
  // A fresh communicator each time: nothing of one input stays for the next.
  CommunicatorId id{};
  ++iteration;
  for (int i = 0; i < 8; ++i) id[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(iteration >> (8 * i));
  id[8] = 0xf2;
  std::shared_ptr<CommRank> rank;
  if (!world->ctx->JoinCommunicator(id, 2, 0, [] { return false; }, &rank).ok()) std::abort();
  if (!keep_comm) m.comm = id;
  (void)world->backend->DeliverCollective(m);
  rank->Abort("the fuzzer's input is done");
  return 0;
}
