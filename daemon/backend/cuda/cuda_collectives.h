// The cuda backend's collectives: real NCCL communicators, one per rank,
// made and run by phosd (docs/backends.md "Collectives on the cuda backend").
//
// Ids. The app's ncclUniqueId is libphos.so's ("phosnccl" + random bytes),
// not NCCL's: the ranks of one phosd meet here, and the first rank to join
// an id asks NCCL for a real unique id (ncclGetUniqueId) that the others of
// that id are given. A restore joins with the app's id again and so gets a
// new NCCL id, as docs/protocols.md "Job checkpoints" asks. Ranks on other
// phosds cannot be reached this way (their phosd would make another NCCL
// id): with a CollectiveFabric the backend refuses NCCL (below).
//
// Contexts. NCCL runs in the device's primary context: its init calls
// cudaSetDevice, which makes the primary context current, and allocates its
// buffers and streams there. A session's work is in phosd's own context for
// it (cuda_context.h), so a group is bridged by two events: the session's
// stream records `into`, NCCL's stream (primary context) waits for it, the
// group runs there, records `out`, and the session's stream waits for
// `out`. cuStreamWaitEvent takes events of other contexts; the buffers are
// VMM mappings, which every context of the device may access.
//
// Waiting. Communicators are non-blocking (ncclConfig_t::blocking = 0), so
// no NCCL call holds a phosd thread: an init or a group still in progress
// is polled through ncclCommGetAsyncError (sleeping 50 us, doubling to
// 20 ms), and a poll ends when the app ends (`cancelled`) or the rank is
// aborted. NCCL has no call that blocks until a non-blocking communicator
// is ready, so a poll is the only way.
//
// Locks: CudaCollectives::mu_ guards members_ (the id book has its own). Each
// CudaCommRank's mu_ serialises its use of the NCCL communicator (groups,
// Abort, the destructor); aborting_ is read without it so that a group
// polling under mu_ ends early. Never both at once: Abort takes the rank's
// mu_, releases it, then takes CudaCollectives::mu_ to find the peers.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backend/collective.h"
#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_nccl.h"
#include "backend/cuda/nccl_id_book.h"
#include "common/status.h"

namespace phos::backend::cuda {

class CudaCollectives;

/// One rank's NCCL communicator.
class CudaCommRank final : public CommRank {
 public:
  ~CudaCommRank() override;
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  /// Aborts this rank's NCCL communicator (its kernels in flight quit) and
  /// every other rank of the same id in this phosd: their AsyncError then
  /// names `why`. Idempotent.
  void Abort(const std::string& why) override;
  /// Unavailable naming why, once aborted; else NCCL's async error.
  Status AsyncError() const override;
  /// Every group enqueued so far has run (its `out` event completed).
  bool Idle() const override;

  /// Enqueues one group on `stream` of the session context `session_ctx`
  /// (the context this rank joined from). The group's ops are issued on
  /// NCCL's stream between the two events (file comment).
  Status RunGroup(const std::vector<CollectiveOp>& ops, CUcontext session_ctx, CUstream stream);

  /// The session context this rank joined from.
  CUcontext session_context() const { return session_ctx_; }

 private:
  friend class CudaCollectives;
  CudaCommRank(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const NcclLibrary> nccl,
               std::shared_ptr<CudaCollectives> owner, CommunicatorId id, int nranks, int rank, CUdevice device,
               CUcontext session_ctx)
      : driver_(std::move(driver)),
        nccl_(std::move(nccl)),
        owner_(std::move(owner)),
        id_(id),
        nranks_(nranks),
        rank_(rank),
        device_(device),
        session_ctx_(session_ctx) {}

  /// Aborts this rank only (Abort, and a peer's Abort). Returns false if
  /// it was aborted before.
  bool AbortHere(const std::string& why);
  /// Polls the communicator until it is no longer in progress (mu_ held).
  Status WaitReady(const std::string& what, const std::function<bool()>& cancelled);
  // Results as Status; `what` becomes a string only for a failure (these
  // check every call of a group, which a training step issues each step).
  Status Nccl(ncclResult_t result, std::string_view what) const {
    return result == ncclSuccess ? Status::Ok() : NcclStatus(result, std::string(what), nccl_.get());
  }
  Status Cuda(CUresult result, std::string_view what) const;

  const std::shared_ptr<const CudaDriver> driver_;
  const std::shared_ptr<const NcclLibrary> nccl_;
  const std::shared_ptr<CudaCollectives> owner_;
  const CommunicatorId id_;
  const int nranks_;
  const int rank_;
  const CUdevice device_;
  const CUcontext session_ctx_;

  // Set by CudaCollectives::Join before the rank is shared, then only read
  // or released under mu_.
  CUcontext primary_ = nullptr;  // retained
  ncclComm_t comm_ = nullptr;    // null once aborted or destroyed
  CUstream stream_ = nullptr;    // NCCL's stream (primary context)
  CUevent into_ = nullptr;       // session context: the group may start
  CUevent out_ = nullptr;        // primary context: the group ended

  mutable std::mutex mu_;          // guards the NCCL communicator's use and the fields below
  std::string aborted_why_;        // non-empty once aborted
  bool ran_group_ = false;         // out_ was recorded at least once
  std::atomic<bool> aborting_{false};  // read by polls without mu_
};

/// The communicators of one cuda backend: the ids still forming and the
/// ranks of each id in this phosd. Shared by the backend and its contexts.
class CudaCollectives : public std::enable_shared_from_this<CudaCollectives> {
 public:
  /// `nccl` null: NCCL could not be loaded, `unavailable_why` says why
  /// (every join is refused with it).
  CudaCollectives(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const NcclLibrary> nccl,
                  std::string unavailable_why)
      : driver_(std::move(driver)),
        nccl_(std::move(nccl)),
        unavailable_why_(std::move(unavailable_why)),
        ids_([lib = nccl_](ncclUniqueId* out) {
          // NCCL's bootstrap root runs in phosd from here on (a listening socket).
          return NcclStatus(lib->GetUniqueId(out), "ncclGetUniqueId", lib.get());
        }) {}

  /// Context::JoinCommunicator for a context `session_ctx` on `device`:
  /// blocks until every rank joined (NCCL's init completed), the app ended
  /// (`cancelled()`: Unavailable) or NCCL failed.
  Status Join(const CommunicatorId& id, int nranks, int rank, CUdevice device, CUcontext session_ctx,
              const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out);

  /// NCCL as loaded (null when it is not).
  const NcclLibrary* nccl() const { return nccl_.get(); }

  /// Ids forming now.
  std::size_t forming() const { return ids_.forming(); }

 private:
  friend class CudaCommRank;
  /// Aborts the other ranks of `id` in this phosd (CudaCommRank::Abort).
  void AbortPeers(const CommunicatorId& id, const CudaCommRank* from, const std::string& why);
  /// Drops `id`'s ranks that are gone (a rank's destructor).
  void Forget(const CommunicatorId& id);

  const std::shared_ptr<const CudaDriver> driver_;
  const std::shared_ptr<const NcclLibrary> nccl_;
  const std::string unavailable_why_;
  NcclIdBook ids_;  // thread-safe
  std::mutex mu_;  // guards members_
  std::map<CommunicatorId, std::vector<std::weak_ptr<CudaCommRank>>> members_;
};

}  // namespace phos::backend::cuda
