#include "backend/sim/sim_collectives.h"

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
  explicit SimCommunicator(int n) : nranks(n), joined(static_cast<std::size_t>(n), false),
                                    errors(static_cast<std::size_t>(n)) {}
  const int nranks;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> joined;
  int joined_count = 0;
  bool formed = false;
  std::string aborted;          // why, once aborted
  std::vector<Status> errors;   // each rank's first async error
  // Collective #seq: each rank's op (null until it arrived; the op lives in
  // its rank's group, which waits in RunGroup until `done`).
  struct Slot {
    std::vector<const CollectiveOp*> ops;
    int arrived = 0;
    int left = 0;
    bool done = false;
    Status result;
  };
  std::map<std::uint64_t, Slot> slots;
  // Sends from .first to .second, oldest first.
  struct Deposit {
    std::uint64_t addr = 0;
    std::uint64_t bytes = 0;
    bool copying = false;  // a receiver copies out of it with mu released
    bool taken = false;
  };
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Deposit>>> mail;

  void AbortLocked(const std::string& why) {
    if (aborted.empty()) {
      aborted = why;
      for (Status& e : errors)
        if (e.ok()) e = Status::Unavailable(why);
    }
    cv.notify_all();
  }

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
        if (bytes) std::memcpy(At(ops[static_cast<std::size_t>(a.peer)]->recv), tmp.data(), bytes);
      } else {
        for (const CollectiveOp* o : ops)
          if (bytes) std::memcpy(At(o->recv), tmp.data(), bytes);
      }
      return Status::Ok();
    }
    case Kind::kBroadcast:
      tmp.assign(At(ops[static_cast<std::size_t>(a.peer)]->send), At(ops[static_cast<std::size_t>(a.peer)]->send) + bytes);
      for (const CollectiveOp* o : ops)
        if (bytes) std::memcpy(At(o->recv), tmp.data(), bytes);
      return Status::Ok();
    case Kind::kAllGather:
      // In place is allowed (send = recv + rank * bytes): gather first.
      tmp.resize(bytes * static_cast<std::uint64_t>(n));
      for (int r = 0; r < n; ++r)
        if (bytes) std::memcpy(tmp.data() + static_cast<std::uint64_t>(r) * bytes, At(ops[static_cast<std::size_t>(r)]->send), bytes);
      for (const CollectiveOp* o : ops)
        if (!tmp.empty()) std::memcpy(At(o->recv), tmp.data(), tmp.size());
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
        if (bytes) std::memcpy(At(ops[static_cast<std::size_t>(r)]->recv), tmp.data() + static_cast<std::uint64_t>(r) * bytes, bytes);
      return Status::Ok();
    }
    case Kind::kSend:
    case Kind::kRecv: break;
  }
  return Status::Internal("not a collective");
}

bool IsCollective(Kind k) { return wire::NcclIsCollective(static_cast<std::uint8_t>(k)); }

}  // namespace

// ---- SimCommRank ----

SimCommRank::~SimCommRank() = default;

int SimCommRank::nranks() const { return comm_->nranks; }

void SimCommRank::Abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(comm_->mu);
  comm_->AbortLocked(why);
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

void SimCommRank::RunGroup(SimAddressSpace* memory, std::uint64_t owner, const std::vector<CollectiveOp>& ops,
                           std::uint64_t first_seq, const std::shared_ptr<const std::atomic<bool>>& cancelled) {
  SimCommunicator& c = *comm_;
  const std::atomic<bool>* stop = cancelled.get();
  Status s;
  // Every range this rank's ops touch stays mapped until the group is
  // done: peers read and write them while this rank waits.
  std::deque<SimAddressSpace::Pin> pins;
  for (const CollectiveOp& op : ops) {
    wire::NcclOp w{static_cast<std::uint8_t>(op.kind), op.datatype, op.redop, 0, op.peer, op.send, op.recv, op.count,
                   op.scalar};
    w.scalar = static_cast<std::uint8_t>(op.scalar_on_device ? wire::NcclScalar::kDevice : wire::NcclScalar::kHost);
    std::uint64_t send_bytes = 0, recv_bytes = 0;
    if (const char* why = wire::CheckNcclOp(w, c.nranks, rank_, &send_bytes, &recv_bytes); why != nullptr) {
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
  std::vector<std::shared_ptr<SimCommunicator::Deposit>> sent;
  std::unique_lock<std::mutex> lock(c.mu);
  if (s.ok() && !c.aborted.empty()) s = Status::Unavailable(c.aborted);
  // 1. Sends: deposits the peers copy out of.
  for (const CollectiveOp& op : ops) {
    if (!s.ok()) break;
    if (op.kind != Kind::kSend) continue;
    auto d = std::make_shared<SimCommunicator::Deposit>();
    d->addr = op.send;
    d->bytes = op.count * wire::NcclTypeBytes(op.datatype);
    c.mail[{rank_, op.peer}].push_back(d);
    sent.push_back(std::move(d));
  }
  if (!sent.empty()) c.cv.notify_all();
  // 2. Collectives in order.
  std::uint64_t seq = first_seq;
  for (const CollectiveOp& op : ops) {
    if (!s.ok()) break;
    if (!IsCollective(op.kind)) continue;
    SimCommunicator::Slot& slot = c.slots[seq];
    if (slot.ops.empty()) slot.ops.assign(static_cast<std::size_t>(c.nranks), nullptr);
    slot.ops[static_cast<std::size_t>(rank_)] = &op;
    if (++slot.arrived == c.nranks) {
      const std::vector<const CollectiveOp*> all = slot.ops;
      lock.unlock();  // the others wait; nobody else touches this slot until done
      Status r = Compute(all, seq);
      lock.lock();
      slot.result = r;
      slot.done = true;
      c.cv.notify_all();
    } else {
      s = c.Wait(lock, stop, [&slot] { return slot.done; });
      if (!s.ok()) {
        // The last rank may be computing with this rank's op and buffers:
        // they must outlive that (it ends by itself).
        if (slot.arrived == c.nranks) {
          while (!slot.done) c.cv.wait(lock);
          if (++slot.left == c.nranks) c.slots.erase(seq);
        }
        break;
      }
    }
    s = slot.result;
    if (++slot.left == c.nranks) c.slots.erase(seq);
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
  if (!s.ok()) {
    // A receiver still copying out of this rank's buffers finishes first.
    while (std::any_of(sent.begin(), sent.end(), [](const auto& d) { return d->copying; })) c.cv.wait(lock);
    Status& e = c.errors[static_cast<std::size_t>(rank_)];
    if (e.ok()) e = s;
    // A rank that gives up leaves its peers waiting for it forever: end the
    // communicator for all (NCCL's peers see ncclRemoteError).
    c.AbortLocked("rank " + std::to_string(rank_) + " failed in a collective: " + s.message());
  }
  lock.unlock();
  pending_.fetch_sub(1, std::memory_order_acq_rel);
}

// ---- SimCommRegistry ----

Status SimCommRegistry::Join(const CommunicatorId& id, int nranks, int rank, int device,
                             const std::function<bool()>& cancelled, std::shared_ptr<CommRank>* out) {
  (void)device;
  if (nranks < 1 || nranks > wire::kMaxNcclRanks || rank < 0 || rank >= nranks) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  }
  std::shared_ptr<SimCommunicator> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<SimCommunicator>& slot = forming_[id];
    if (!slot) slot = std::make_shared<SimCommunicator>(nranks);
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
    c->joined[static_cast<std::size_t>(rank)] = true;
    if (++c->joined_count == nranks) {
      c->formed = true;
      forming_.erase(id);
      c->cv.notify_all();
    }
  }
  std::unique_lock<std::mutex> lock(c->mu);
  while (!c->formed) {
    if (cancelled && cancelled()) {
      c->joined[static_cast<std::size_t>(rank)] = false;
      const bool last = --c->joined_count == 0;
      lock.unlock();
      if (last) {
        std::lock_guard<std::mutex> rl(mu_);
        auto it = forming_.find(id);
        if (it != forming_.end() && it->second == c) {
          std::lock_guard<std::mutex> cl(c->mu);
          if (c->joined_count == 0) forming_.erase(it);
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

}  // namespace phos::backend::sim
