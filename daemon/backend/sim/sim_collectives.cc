#include "backend/sim/sim_collectives.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <type_traits>
#include <utility>

#include "backend/sim/sim_address_space.h"
#include "interp/numeric.h"
#include "protocol/nccl_wire.h"

namespace phos::backend::sim {

using Kind = CollectiveOp::Kind;
// phosd casts the wire's kinds to these (nccl_handlers.cc); the shared
// predicates of nccl_wire.h take them back the same way.
static_assert(static_cast<int>(Kind::kSend) == static_cast<int>(wire::NcclKind::kSend) &&
              static_cast<int>(Kind::kRecv) == static_cast<int>(wire::NcclKind::kRecv) &&
              static_cast<int>(Kind::kReduceScatter) == static_cast<int>(wire::NcclKind::kReduceScatter));

// All state of one communicator; every field below `nranks` is guarded by
// `mu` (sim_collectives.h "Locks").
struct SimCommunicator {
  SimCommunicator(const CommunicatorId& i, int n, CollectiveFabric* f)
      : id(i), nranks(n), fabric(f), joined(static_cast<std::size_t>(n), false), errors(static_cast<std::size_t>(n)),
        local_ranks(n) {}
  const CommunicatorId id;
  const int nranks;
  CollectiveFabric* const fabric;  // null: no ranks elsewhere possible
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> joined;
  int joined_count = 0;
  bool formed = false;
  std::string aborted;          // why, once aborted
  std::vector<Status> errors;   // each rank's first async error
  // Where each rank is ("" here, else its phosd's peer endpoint): set by
  // the first local rank past its rendezvous, read-only once formed (so
  // RunGroup reads it without mu). Empty: every rank is here.
  std::vector<std::string> where;
  std::vector<std::string> remotes;  // the distinct endpoints in `where`
  int local_ranks;                   // ranks on this phosd
  int local_joined = 0;
  // Collective #seq: each rank's op (null until it arrived; the op lives in
  // its rank's group, which waits in RunGroup until `done`).
  struct Slot {
    std::vector<const CollectiveOp*> ops;
    int arrived = 0;
    int left = 0;           // local ranks done with the slot (it goes when all are)
    bool computing = false;  // a local rank computes it (mu released)
    bool done = false;
    Status result;
    // The parts of ranks on other phosds: their op, send pointing into data.
    struct Remote {
      CollectiveOp op;
      std::vector<std::uint8_t> data;
    };
    std::vector<std::unique_ptr<Remote>> remote;
  };
  std::map<std::uint64_t, Slot> slots;
  // Sends from .first to .second, oldest first.
  struct Deposit {
    std::uint64_t addr = 0;
    std::uint64_t bytes = 0;
    bool copying = false;  // a receiver copies out of it with mu released
    bool taken = false;
    std::vector<std::uint8_t> owned;  // a remote sender's bytes (addr points here)
  };
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Deposit>>> mail;

  /// True when this call aborted it (the caller tells the other phosds,
  /// with mu released: TellAbort).
  bool AbortLocked(const std::string& why) {
    const bool first = aborted.empty();
    if (first) {
      aborted = why;
      for (Status& e : errors)
        if (e.ok()) e = Status::Unavailable(why);
    }
    cv.notify_all();
    return first;
  }

  /// Tells every other phosd of the communicator that it ended here
  /// (mu not held; best effort: a phosd that cannot be told finds out from
  /// its own next send, which this phosd refuses (Deliver), or from etcd
  /// when this phosd is gone).
  void TellAbort(const std::string& why) {
    if (fabric == nullptr || remotes.empty()) return;
    FabricMessage m;
    m.kind = FabricMessage::Kind::kAbort;
    m.comm = id;
    m.nranks = nranks;
    m.why = why;
    for (const std::string& e : remotes) (void)fabric->Send(e, m);
  }

  bool IsRemote(int rank) const { return !where.empty() && !where[static_cast<std::size_t>(rank)].empty(); }

  /// Waits (with `lock` held on mu) until `done()`; Unavailable when the
  /// communicator is aborted or `cancelled` is set first.
  template <typename Pred>
  Status Wait(std::unique_lock<std::mutex>& lock, const std::atomic<bool>* cancelled, Pred done) {
    while (!done()) {
      if (!aborted.empty()) return Status::Unavailable(aborted);
      if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
        return Status::Unavailable("the rank's process ended");
      }
      cv.wait_for(lock, std::chrono::milliseconds(100));
    }
    return Status::Ok();
  }
};

namespace {

std::byte* At(std::uint64_t addr) { return reinterpret_cast<std::byte*>(addr); }

// ---- reductions (rank order 0..n-1; 16-bit floats reduce in float) ----

template <typename T>
T Load(const std::byte* p, std::uint64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void Store(std::byte* p, std::uint64_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <typename A>
A Combine(A a, A b, std::uint8_t op) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    switch (op) {
      case 1: return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
      case 2: return std::max(a, b);
      case 3: return std::min(a, b);
      default: return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));  // sum, avg, PreMulSum
    }
  } else {
    switch (op) {
      case 1: return a * b;
      case 2: return a < b ? b : a;
      case 3: return b < a ? b : a;
      default: return a + b;
    }
  }
}

// out[i] = op over ranks of in[r][i] (each multiplied by scale[r] first for
// PreMulSum); Avg divides the sum by the rank count.
template <typename S, typename A, typename FromS, typename ToS>
void ReduceAs(const std::vector<const std::byte*>& in, const std::vector<A>& scale, std::uint8_t op,
              std::uint64_t count, std::byte* out, FromS from, ToS to) {
  const bool premul = op == CollectiveOp::kPreMulSum;
  const A n = static_cast<A>(in.size());
  for (std::uint64_t i = 0; i < count; ++i) {
    A acc{};
    for (std::size_t r = 0; r < in.size(); ++r) {
      A v = from(Load<S>(in[r], i));
      if (premul) v = Combine<A>(v, scale[r], 1);
      acc = r == 0 ? v : Combine<A>(acc, v, op);
    }
    if (op == 4) acc = acc / n;
    Store<S>(out, i, to(acc));
  }
}

template <typename T>
void ReducePlain(const std::vector<const std::byte*>& in, const std::vector<const CollectiveOp*>& ops,
                 std::uint8_t op, std::uint64_t count, std::byte* out) {
  std::vector<T> scale(in.size(), T{1});
  for (std::size_t r = 0; r < ops.size(); ++r) {
    if (op != CollectiveOp::kPreMulSum) break;
    const std::byte* p = ops[r]->scalar_on_device ? At(ops[r]->scalar)
                                                  : reinterpret_cast<const std::byte*>(&ops[r]->scalar);
    scale[r] = Load<T>(p, 0);
  }
  ReduceAs<T, T>(in, scale, op, count, out, [](T v) { return v; }, [](T v) { return v; });
}

void ReduceHalfLike(bool bf16, const std::vector<const std::byte*>& in, const std::vector<const CollectiveOp*>& ops,
                    std::uint8_t op, std::uint64_t count, std::byte* out) {
  auto from = [bf16](std::uint16_t h) { return bf16 ? interp::Bf16ToFloat(h) : interp::HalfToFloat(h); };
  auto to = [bf16](float f) {
    return bf16 ? interp::FloatToBf16(f, interp::Round::kNearest) : interp::FloatToHalf(f, interp::Round::kNearest);
  };
  std::vector<float> scale(in.size(), 1.0f);
  for (std::size_t r = 0; r < ops.size() && op == CollectiveOp::kPreMulSum; ++r) {
    const std::byte* p = ops[r]->scalar_on_device ? At(ops[r]->scalar)
                                                  : reinterpret_cast<const std::byte*>(&ops[r]->scalar);
    scale[r] = from(Load<std::uint16_t>(p, 0));
  }
  ReduceAs<std::uint16_t, float>(in, scale, op, count, out, from, to);
}

Status Reduce(std::uint8_t type, const std::vector<const std::byte*>& in, const std::vector<const CollectiveOp*>& ops,
              std::uint8_t op, std::uint64_t count, std::byte* out) {
  switch (type) {
    case 0: ReducePlain<std::int8_t>(in, ops, op, count, out); return Status::Ok();
    case 1: ReducePlain<std::uint8_t>(in, ops, op, count, out); return Status::Ok();
    case 2: ReducePlain<std::int32_t>(in, ops, op, count, out); return Status::Ok();
    case 3: ReducePlain<std::uint32_t>(in, ops, op, count, out); return Status::Ok();
    case 4: ReducePlain<std::int64_t>(in, ops, op, count, out); return Status::Ok();
    case 5: ReducePlain<std::uint64_t>(in, ops, op, count, out); return Status::Ok();
    case 6: ReduceHalfLike(false, in, ops, op, count, out); return Status::Ok();
    case 7: ReducePlain<float>(in, ops, op, count, out); return Status::Ok();
    case 8: ReducePlain<double>(in, ops, op, count, out); return Status::Ok();
    case 9: ReduceHalfLike(true, in, ops, op, count, out); return Status::Ok();
    default:
      return Status::NotSupported(std::string("the sim does not reduce ") + wire::NcclTypeName(type) +
                                  " (8-bit floats) yet");
  }
}

std::string Describe(const CollectiveOp& op) {
  return std::string(wire::NcclKindName(static_cast<std::uint8_t>(op.kind))) + " of " + std::to_string(op.count) +
         " " + wire::NcclTypeName(op.datatype);
}

/// Collective #seq with every rank's op: the ranks must agree on what it is.
Status Compute(const std::vector<const CollectiveOp*>& ops, std::uint64_t seq) {
  const CollectiveOp& a = *ops[0];
  const int n = static_cast<int>(ops.size());
  for (int r = 1; r < n; ++r) {
    const CollectiveOp& b = *ops[static_cast<std::size_t>(r)];
    const bool reduces = wire::NcclReduces(static_cast<std::uint8_t>(a.kind));
    const bool rooted = a.kind == Kind::kBroadcast || a.kind == Kind::kReduce;
    if (b.kind != a.kind || b.datatype != a.datatype || b.count != a.count || (rooted && b.peer != a.peer) ||
        (reduces && (b.redop == CollectiveOp::kPreMulSum) != (a.redop == CollectiveOp::kPreMulSum)) ||
        (reduces && a.redop != CollectiveOp::kPreMulSum && b.redop != a.redop)) {
      return Status::InvalidArgument("the ranks disagree on collective #" + std::to_string(seq) + ": rank 0 calls " +
                                     Describe(a) + ", rank " + std::to_string(r) + " " + Describe(b) +
                                     " (NCCL needs every rank to call the same collectives in the same order)");
    }
  }
  const std::uint64_t es = wire::NcclTypeBytes(a.datatype);
  const std::uint64_t bytes = a.count * es;
  std::vector<std::byte> tmp;
  std::vector<const std::byte*> in;
  switch (a.kind) {
    case Kind::kAllReduce:
    case Kind::kReduce: {
      for (const CollectiveOp* o : ops) in.push_back(At(o->send));
      tmp.resize(bytes);
      PHOS_RETURN_IF_ERROR(Reduce(a.datatype, in, ops, a.redop, a.count, tmp.data()));
      if (a.kind == Kind::kReduce) {
        const CollectiveOp* root = ops[static_cast<std::size_t>(a.peer)];
        if (bytes && root->recv) std::memcpy(At(root->recv), tmp.data(), bytes);
      } else {
        for (const CollectiveOp* o : ops)
          if (bytes && o->recv) std::memcpy(At(o->recv), tmp.data(), bytes);
      }
      return Status::Ok();
    }
    case Kind::kBroadcast:
      tmp.assign(At(ops[static_cast<std::size_t>(a.peer)]->send), At(ops[static_cast<std::size_t>(a.peer)]->send) + bytes);
      for (const CollectiveOp* o : ops)
        if (bytes && o->recv) std::memcpy(At(o->recv), tmp.data(), bytes);
      return Status::Ok();
    case Kind::kAllGather:
      // In place is allowed (send = recv + rank * bytes): gather first.
      tmp.resize(bytes * static_cast<std::uint64_t>(n));
      for (int r = 0; r < n; ++r)
        if (bytes) std::memcpy(tmp.data() + static_cast<std::uint64_t>(r) * bytes, At(ops[static_cast<std::size_t>(r)]->send), bytes);
      for (const CollectiveOp* o : ops)
        if (!tmp.empty() && o->recv) std::memcpy(At(o->recv), tmp.data(), tmp.size());
      return Status::Ok();
    case Kind::kReduceScatter: {
      tmp.resize(bytes * static_cast<std::uint64_t>(n));
      for (int block = 0; block < n; ++block) {
        in.clear();
        for (const CollectiveOp* o : ops) in.push_back(At(o->send) + static_cast<std::uint64_t>(block) * bytes);
        PHOS_RETURN_IF_ERROR(Reduce(a.datatype, in, ops, a.redop, a.count,
                                    tmp.data() + static_cast<std::uint64_t>(block) * bytes));
      }
      for (int r = 0; r < n; ++r)
        if (bytes && ops[static_cast<std::size_t>(r)]->recv)
          std::memcpy(At(ops[static_cast<std::size_t>(r)]->recv), tmp.data() + static_cast<std::uint64_t>(r) * bytes, bytes);
      return Status::Ok();
    }
    case Kind::kSend:
    case Kind::kRecv: break;
  }
  return Status::Internal("not a collective");
}

bool IsCollective(Kind k) { return wire::NcclIsCollective(static_cast<std::uint8_t>(k)); }

/// nccl_wire's check of one op (the same phosd ran on the app's call): its
/// send and receive extents, or why it is malformed.
const char* CheckOp(const CollectiveOp& op, int nranks, int rank, std::uint64_t* send_bytes,
                    std::uint64_t* recv_bytes) {
  wire::NcclOp w{static_cast<std::uint8_t>(op.kind), op.datatype, op.redop, 0, op.peer, op.send, op.recv, op.count,
                 op.scalar};
  w.scalar = static_cast<std::uint8_t>(op.scalar_on_device ? wire::NcclScalar::kDevice : wire::NcclScalar::kHost);
  return wire::CheckNcclOp(w, nranks, rank, send_bytes, recv_bytes);
}

/// The most one op moves between phosds (one message of the peer plane).
constexpr std::uint64_t kMaxFabricBytes = 16ull << 20;

/// Ships rank `rank`'s part of a group to the other phosds: each
/// collective's op and send bytes to all of them, each Send to its
/// receiver's. Runs on the stream worker before the group waits, with the
/// group's ranges pinned; `c.where` is read-only once formed.
Status Ship(SimCommunicator& c, int rank, const std::vector<CollectiveOp>& ops, std::uint64_t first_seq) {
  std::uint64_t seq = first_seq;
  for (const CollectiveOp& op : ops) {
    const bool collective = IsCollective(op.kind);
    const bool remote_send = op.kind == Kind::kSend && c.IsRemote(op.peer);
    if (!collective && !remote_send) continue;
    std::uint64_t send_bytes = 0, recv_bytes = 0;
    if (const char* why = CheckOp(op, c.nranks, rank, &send_bytes, &recv_bytes); why != nullptr) {
      return Status::InvalidArgument(why);
    }
    if (send_bytes > kMaxFabricBytes) {
      return Status::NotSupported("the sim moves at most " + std::to_string(kMaxFabricBytes >> 20) +
                                  " MiB per NCCL op between phosds; this " + Describe(op) + " sends " +
                                  std::to_string(send_bytes) + " bytes");
    }
    FabricMessage m;
    m.kind = collective ? FabricMessage::Kind::kCollective : FabricMessage::Kind::kSend;
    m.comm = c.id;
    m.nranks = c.nranks;
    m.from_rank = rank;
    m.to_rank = op.peer;
    m.seq = collective ? seq++ : 0;
    m.op = op;
    if (op.redop == CollectiveOp::kPreMulSum && op.scalar_on_device) {
      m.op.scalar = 0;
      std::memcpy(&m.op.scalar, At(op.scalar), wire::NcclTypeBytes(op.datatype));
      m.op.scalar_on_device = false;
    }
    m.data.assign(reinterpret_cast<const std::uint8_t*>(At(op.send)),
                  reinterpret_cast<const std::uint8_t*>(At(op.send)) + send_bytes);
    if (collective) {
      for (const std::string& e : c.remotes) {
        PHOS_RETURN_IF_ERROR(c.fabric->Send(e, m).WithContext("rank " + std::to_string(rank) + "'s part of " +
                                                                Describe(op) + " for the phosd at " + e));
      }
    } else {
      const std::string& e = c.where[static_cast<std::size_t>(op.peer)];
      PHOS_RETURN_IF_ERROR(c.fabric->Send(e, m).WithContext("rank " + std::to_string(rank) + "'s Send to rank " +
                                                            std::to_string(op.peer) + " at the phosd at " + e));
    }
  }
  return Status::Ok();
}

}  // namespace

// ---- SimCommRank ----

// A formed rank keeps its rendezvous record (etcd_fabric.h says why).
SimCommRank::~SimCommRank() = default;

int SimCommRank::nranks() const { return comm_->nranks; }

void SimCommRank::Abort(const std::string& why) {
  ended_here_.store(true, std::memory_order_release);
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(comm_->mu);
    first = comm_->AbortLocked(why);
  }
  if (first) comm_->TellAbort(why);
}

Status SimCommRank::AsyncError() const {
  std::lock_guard<std::mutex> lock(comm_->mu);
  return comm_->errors[static_cast<std::size_t>(rank_)];
}

std::uint64_t SimCommRank::ReserveCollectives(std::uint64_t count) {
  pending_.fetch_add(1, std::memory_order_acq_rel);
  std::lock_guard<std::mutex> lock(comm_->mu);
  const std::uint64_t first = next_seq_;
  next_seq_ += count;
  return first;
}

Status SimCommRank::RunGroup(SimAddressSpace* memory, std::uint64_t owner, const std::vector<CollectiveOp>& ops,
                             std::uint64_t first_seq, const std::shared_ptr<const std::atomic<bool>>& cancelled) {
  SimCommunicator& c = *comm_;
  const std::atomic<bool>* stop = cancelled.get();
  Status s;
  // Every range this rank's ops touch stays mapped until the group is
  // done: peers read and write them while this rank waits.
  std::deque<SimAddressSpace::Pin> pins;
  for (const CollectiveOp& op : ops) {
    std::uint64_t send_bytes = 0, recv_bytes = 0;
    if (const char* why = CheckOp(op, c.nranks, rank_, &send_bytes, &recv_bytes); why != nullptr) {
      s = Status::InvalidArgument(why);
      break;
    }
    const std::pair<std::uint64_t, std::uint64_t> ranges[] = {
        {op.send, send_bytes}, {op.recv, recv_bytes},
        {op.redop == CollectiveOp::kPreMulSum && op.scalar_on_device ? op.scalar : 0, wire::NcclTypeBytes(op.datatype)}};
    for (const auto& [addr, bytes] : ranges) {
      if (addr == 0 || bytes == 0) continue;
      DevicePtr start = 0;
      std::uint64_t span = 0;
      s = memory->PinOwnedRange(addr, bytes, owner, &pins.emplace_back(), &start, &span);
      if (!s.ok()) break;
    }
    if (!s.ok()) break;
  }
  // 0. Ranks on other phosds get this rank's parts first (mu not held:
  //    this is network I/O).
  if (s.ok() && !c.remotes.empty()) s = Ship(c, rank_, ops, first_seq);
  std::vector<std::shared_ptr<SimCommunicator::Deposit>> sent;
  std::unique_lock<std::mutex> lock(c.mu);
  if (s.ok() && !c.aborted.empty()) s = Status::Unavailable(c.aborted);
  // 1. Sends to ranks here: deposits the peers copy out of.
  for (const CollectiveOp& op : ops) {
    if (!s.ok()) break;
    if (op.kind != Kind::kSend || c.IsRemote(op.peer)) continue;
    auto d = std::make_shared<SimCommunicator::Deposit>();
    d->addr = op.send;
    d->bytes = op.count * wire::NcclTypeBytes(op.datatype);
    c.mail[{rank_, op.peer}].push_back(d);
    sent.push_back(std::move(d));
  }
  if (!sent.empty()) c.cv.notify_all();
  // 2. Collectives in order. The first local rank to find every part there
  //    computes it (with mu released; nobody else touches the slot until
  //    `done`) while the others wait.
  std::uint64_t seq = first_seq;
  for (const CollectiveOp& op : ops) {
    if (!s.ok()) break;
    if (!IsCollective(op.kind)) continue;
    SimCommunicator::Slot& slot = c.slots[seq];
    if (slot.ops.empty()) slot.ops.assign(static_cast<std::size_t>(c.nranks), nullptr);
    slot.ops[static_cast<std::size_t>(rank_)] = &op;
    ++slot.arrived;
    c.cv.notify_all();
    s = c.Wait(lock, stop, [&slot, &c] { return slot.done || (slot.arrived == c.nranks && !slot.computing); });
    if (s.ok() && !slot.done) {
      slot.computing = true;
      const std::vector<const CollectiveOp*> all = slot.ops;
      lock.unlock();
      Status r = Compute(all, seq);
      lock.lock();
      slot.result = r;
      slot.done = true;
      c.cv.notify_all();
    }
    if (!s.ok()) {
      // A rank computing with this rank's op and buffers: they must outlive
      // that (it ends by itself). Otherwise the op is withdrawn, so no rank
      // starts computing with it once this rank's group is gone.
      while (slot.computing && !slot.done) c.cv.wait(lock);
      if (!slot.done) {
        slot.ops[static_cast<std::size_t>(rank_)] = nullptr;
        --slot.arrived;
      }
      if (++slot.left == c.local_ranks) c.slots.erase(seq);
      break;
    }
    s = slot.result;
    if (++slot.left == c.local_ranks) c.slots.erase(seq);
    ++seq;
  }
  // 3. Receives, each from its peer's oldest deposit.
  for (const CollectiveOp& op : ops) {
    if (!s.ok()) break;
    if (op.kind != Kind::kRecv) continue;
    auto& queue = c.mail[{op.peer, rank_}];
    s = c.Wait(lock, stop, [&queue] { return !queue.empty(); });
    if (s.ok() && !c.aborted.empty()) s = Status::Unavailable(c.aborted);  // its sender may be gone
    if (!s.ok()) break;
    std::shared_ptr<SimCommunicator::Deposit> d = queue.front();
    queue.pop_front();
    const std::uint64_t want = op.count * wire::NcclTypeBytes(op.datatype);
    if (d->bytes != want) {
      s = Status::InvalidArgument("rank " + std::to_string(rank_) + " receives " + std::to_string(want) +
                                  " bytes from rank " + std::to_string(op.peer) + ", which sent " +
                                  std::to_string(d->bytes));
    } else if (want != 0) {
      d->copying = true;
      lock.unlock();  // the sender keeps its buffer pinned until `taken`
      std::memcpy(At(op.recv), At(d->addr), want);
      lock.lock();
    }
    d->copying = false;
    d->taken = true;
    c.cv.notify_all();
  }
  // 4. This rank's sends must have been copied before its buffers may change.
  if (s.ok()) {
    s = c.Wait(lock, stop, [&sent] {
      return std::all_of(sent.begin(), sent.end(), [](const auto& d) { return d->taken; });
    });
  }
  bool tell = false;
  std::string why;
  if (!s.ok()) {
    // A receiver still copying out of this rank's buffers finishes first.
    while (std::any_of(sent.begin(), sent.end(), [](const auto& d) { return d->copying; })) c.cv.wait(lock);
    Status& e = c.errors[static_cast<std::size_t>(rank_)];
    if (e.ok()) e = s;
    // A rank that gives up leaves its peers waiting for it forever: end the
    // communicator for all (NCCL's peers see ncclRemoteError).
    why = "rank " + std::to_string(rank_) + " failed in a collective: " + s.message();
    tell = c.AbortLocked(why);
  }
  lock.unlock();
  if (tell) c.TellAbort(why);
  pending_.fetch_sub(1, std::memory_order_acq_rel);
  if (s.ok() || ended_here_.load(std::memory_order_acquire)) return Status::Ok();
  return Status(s.code(), "an NCCL group of rank " + std::to_string(rank_) +
                              " did not complete, its buffers hold no result: " + s.message())
      .WithApiError(CUDA_ERROR_LAUNCH_FAILED);
}

// ---- SimCommRegistry ----

Status SimCommRegistry::Join(const CommunicatorId& id, int nranks, int rank, int device,
                             const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) {
  (void)device;
  if (nranks < 1 || nranks > wire::kMaxNcclRanks || rank < 0 || rank >= nranks) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  }
  // With other phosds: meet every rank first, wherever it is.
  std::vector<std::string> where;
  if (fabric_ != nullptr) PHOS_RETURN_IF_ERROR(fabric_->Rendezvous(id, nranks, rank, cancelled, &where));
  std::shared_ptr<SimCommunicator> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<SimCommunicator>& slot = forming_[id];
    if (!slot) slot = std::make_shared<SimCommunicator>(id, nranks, fabric_);
    c = slot;
    std::lock_guard<std::mutex> cl(c->mu);
    if (c->nranks != nranks) {
      return Status::InvalidArgument("rank " + std::to_string(rank) + " says the communicator has " +
                                     std::to_string(nranks) + " ranks; the ranks that joined before said " +
                                     std::to_string(c->nranks));
    }
    if (c->joined[static_cast<std::size_t>(rank)]) {
      return Status::InvalidArgument("rank " + std::to_string(rank) +
                                     " of this communicator has joined already (two processes passed one rank)");
    }
    if (!where.empty() && c->where.empty()) {
      // The first local rank past the rendezvous: the ranks elsewhere count
      // as joined (they joined there).
      c->where = where;
      c->local_ranks = 0;
      for (int r = 0; r < nranks; ++r) {
        const std::string& e = where[static_cast<std::size_t>(r)];
        if (e.empty()) {
          ++c->local_ranks;
          continue;
        }
        c->joined[static_cast<std::size_t>(r)] = true;
        ++c->joined_count;
        if (std::find(c->remotes.begin(), c->remotes.end(), e) == c->remotes.end()) c->remotes.push_back(e);
      }
    } else if (!where.empty() && c->where != where) {
      return Status::Internal("the ranks of a communicator were told different places for their peers");
    }
    c->joined[static_cast<std::size_t>(rank)] = true;
    ++c->local_joined;
    if (++c->joined_count == nranks) {
      c->formed = true;
      forming_.erase(id);
      if (!c->remotes.empty()) spanning_[id] = c;
      c->cv.notify_all();
    }
    // Formed communicators that ended here are forgotten as new ones form.
    for (auto it = spanning_.begin(); it != spanning_.end();) {
      it = it->second.expired() ? spanning_.erase(it) : std::next(it);
    }
  }
  std::unique_lock<std::mutex> lock(c->mu);
  while (!c->formed) {
    if (cancelled && cancelled()) {
      c->joined[static_cast<std::size_t>(rank)] = false;
      --c->joined_count;
      const bool last = --c->local_joined == 0;
      lock.unlock();
      if (fabric_ != nullptr) fabric_->Leave(id, rank);
      if (last) {
        std::lock_guard<std::mutex> rl(mu_);
        auto it = forming_.find(id);
        if (it != forming_.end() && it->second == c) {
          std::lock_guard<std::mutex> cl(c->mu);
          if (c->local_joined == 0) forming_.erase(it);
        }
      }
      return Status::Unavailable("ncclCommInitRank of rank " + std::to_string(rank) +
                                 " gave up before all " + std::to_string(nranks) + " ranks joined (its process ended)");
    }
    c->cv.wait_for(lock, std::chrono::milliseconds(100));
  }
  *out = std::make_shared<SimCommRank>(c, rank);
  return Status::Ok();
}

Status SimCommRegistry::Deliver(const FabricMessage& m) {
  if (fabric_ == nullptr) return Status::FailedPrecondition("this phosd runs no communicators across phosds (--etcd)");
  if (m.nranks < 1 || m.nranks > wire::kMaxNcclRanks || m.from_rank < 0 || m.from_rank >= m.nranks) {
    return Status::InvalidArgument("a peer's collective message names rank " + std::to_string(m.from_rank) + " of " +
                                   std::to_string(m.nranks));
  }
  std::shared_ptr<SimCommunicator> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = spanning_.find(m.comm); it != spanning_.end()) {
      c = it->second.lock();
      // It formed here and is gone (its ranks here ended): the sender must
      // learn it, or its rank waits forever for parts that never come
      // (its failed send ends the communicator there too, as NCCL's
      // ncclRemoteError). An abort of it needs nothing more.
      if (!c) {
        if (m.kind == FabricMessage::Kind::kAbort) return Status::Ok();
        return Status::Unavailable("the communicator ended on this phosd (its ranks here are gone)");
      }
    }
    if (!c) {
      auto it = forming_.find(m.comm);
      if (it != forming_.end()) {
        c = it->second;
      } else if (m.kind == FabricMessage::Kind::kAbort) {
        return Status::Ok();  // nothing of it here (ended, or never formed here)
      } else if (forming_.size() >= kMaxForming) {
        return Status::OutOfMemory("this phosd has " + std::to_string(forming_.size()) +
                                         " communicators forming, the most it keeps");
      } else {
        // A peer's part may come before this phosd's ranks joined.
        c = forming_[m.comm] = std::make_shared<SimCommunicator>(m.comm, m.nranks, fabric_);
      }
    }
  }
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->nranks != m.nranks) {
    return Status::InvalidArgument("a peer says the communicator has " + std::to_string(m.nranks) +
                                   " ranks; it has " + std::to_string(c->nranks));
  }
  if (m.kind == FabricMessage::Kind::kAbort) {
    c->AbortLocked(m.why.empty() ? "a peer phosd ended the communicator" : m.why);
    return Status::Ok();
  }
  if (!c->where.empty() && !c->IsRemote(m.from_rank)) {
    return Status::InvalidArgument("a peer sent a part of rank " + std::to_string(m.from_rank) +
                                   ", which is a rank of this phosd");
  }
  // Ended here: the sender's rank must not wait for this phosd's parts.
  if (!c->aborted.empty()) return Status::Unavailable("the communicator ended on this phosd: " + c->aborted);
  // The part, checked as phosd checks a local rank's op; its bytes stand
  // in for the sender's buffer.
  auto part = std::make_unique<SimCommunicator::Slot::Remote>();
  part->op = m.op;
  part->op.scalar_on_device = false;
  part->op.send = 1;  // placeholders: CheckNcclOp refuses NULL buffers
  part->op.recv = 1;
  std::uint64_t send_bytes = 0, recv_bytes = 0;
  const bool collective = m.kind == FabricMessage::Kind::kCollective;
  if (collective != IsCollective(m.op.kind) || (!collective && m.op.kind != Kind::kSend)) {
    return Status::InvalidArgument("a peer's message does not match its op's kind");
  }
  if (const char* why = CheckOp(part->op, m.nranks, m.from_rank, &send_bytes, &recv_bytes); why != nullptr) {
    return Status::InvalidArgument(std::string("a peer's part of ") + Describe(m.op) + ": " + why);
  }
  if (m.data.size() != send_bytes) {
    return Status::InvalidArgument("a peer's part of " + Describe(m.op) + " carries " + std::to_string(m.data.size()) +
                                   " bytes, not " + std::to_string(send_bytes));
  }
  part->data = m.data;
  part->op.send = reinterpret_cast<std::uint64_t>(part->data.data());
  part->op.recv = 0;  // each phosd writes only its own ranks' results
  if (!collective) {
    if (m.op.peer < 0 || m.op.peer >= c->nranks || c->IsRemote(m.op.peer) || m.to_rank != m.op.peer) {
      return Status::InvalidArgument("a peer's Send is for rank " + std::to_string(m.op.peer) +
                                     ", which is not a rank of this phosd");
    }
    auto d = std::make_shared<SimCommunicator::Deposit>();
    d->owned = std::move(part->data);
    d->addr = reinterpret_cast<std::uint64_t>(d->owned.data());
    d->bytes = send_bytes;
    d->taken = true;  // nobody waits for it to be taken: the sender holds no buffer
    c->mail[{m.from_rank, m.op.peer}].push_back(std::move(d));
    c->cv.notify_all();
    return Status::Ok();
  }
  // A rank runs at most one group (1024 collectives) ahead of the slowest
  // rank: more pending slots than this is a peer gone wrong.
  if (c->slots.count(m.seq) == 0 && c->slots.size() >= SimCommRegistry::kMaxPendingCollectives) {
    return Status::OutOfMemory("a peer sent parts of " + std::to_string(c->slots.size()) +
                               " collectives this phosd's ranks have not reached; the most it holds");
  }
  SimCommunicator::Slot& slot = c->slots[m.seq];
  if (slot.ops.empty()) slot.ops.assign(static_cast<std::size_t>(c->nranks), nullptr);
  if (slot.ops[static_cast<std::size_t>(m.from_rank)] != nullptr || slot.done || slot.computing) {
    return Status::InvalidArgument("a peer sent rank " + std::to_string(m.from_rank) + "'s part of collective #" +
                                   std::to_string(m.seq) + " twice");
  }
  slot.ops[static_cast<std::size_t>(m.from_rank)] = &part->op;
  slot.remote.push_back(std::move(part));
  ++slot.arrived;
  c->cv.notify_all();
  return Status::Ok();
}

void SimCommRegistry::PeerLost(const std::string& endpoint, const std::string& why) {
  std::vector<std::shared_ptr<SimCommunicator>> hit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, weak] : spanning_) {
      if (auto c = weak.lock()) hit.push_back(std::move(c));
    }
    for (auto& [id, c] : forming_) hit.push_back(c);
  }
  for (const std::shared_ptr<SimCommunicator>& c : hit) {
    std::lock_guard<std::mutex> lock(c->mu);
    if (std::find(c->remotes.begin(), c->remotes.end(), endpoint) == c->remotes.end()) continue;
    c->AbortLocked("the phosd at " + endpoint + ", which held ranks of this communicator, is gone: " + why);
  }
}

}  // namespace phos::backend::sim
