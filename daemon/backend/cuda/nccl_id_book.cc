#include "backend/cuda/nccl_id_book.h"

#include <string>

namespace phos::backend::cuda {

Status NcclIdBook::Take(const CommunicatorId& id, int nranks, int rank, ncclUniqueId* out) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = forming_.find(id);
  if (it == forming_.end()) {
    if (forming_.size() >= kMaxForming) {
      return Status::OutOfMemory("phosd has " + std::to_string(forming_.size()) +
                                       " NCCL communicators forming, the most it keeps");
    }
    Forming f;
    f.nranks = nranks;
    PHOS_RETURN_IF_ERROR(make_(&f.nccl_id));
    it = forming_.emplace(id, f).first;
  }
  Forming& f = it->second;
  if (f.nranks != nranks) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " joins a communicator of " +
                                   std::to_string(nranks) + " ranks that its other ranks formed with " +
                                   std::to_string(f.nranks));
  }
  if (!f.joined.insert(rank).second) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of this NCCL communicator joined twice");
  }
  *out = f.nccl_id;
  if (static_cast<int>(f.joined.size()) == f.nranks) forming_.erase(it);
  return Status::Ok();
}

void NcclIdBook::GiveBack(const CommunicatorId& id, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = forming_.find(id);
  if (it == forming_.end()) return;
  it->second.joined.erase(rank);
  if (it->second.joined.empty()) forming_.erase(it);
}

std::size_t NcclIdBook::forming() const {
  std::lock_guard<std::mutex> lock(mu_);
  return forming_.size();
}

}  // namespace phos::backend::cuda
