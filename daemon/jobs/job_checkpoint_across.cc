// The barrier of a job checkpoint across phosds lives in etcd, under
// /phos/v1/cuts/<cut>/ (docs/protocols.md "Jobs across phosds"):
//   request          CutRequest, the coordinator's lease
//   state/<phosd>    CutState of each participant, its own lease (gone when it dies)
//   capture          the coordinator saw every rank held at one cut
//   committed        the job image is committed
//   abort            why the cut failed (every participant releases and cleans up)
// Every participant (the coordinator's own part included) runs TakePart;
// the coordinator also runs Coordinate, which decides. Both poll the
// prefix every 20 ms (and wake at once on a change of their own ranks).
#include "jobs/job_checkpoint_across.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "cluster/etcd_fabric.h"
#include "common/version.h"
#include "image/commit_dir.h"
#include "image/image_layout.h"
#include "image/job_manifest.h"
#include "peer.pb.h"
#include "peer/peer_client.h"

namespace phos::jobs {
namespace {

using engine::Clock;
using engine::MicrosSince;
using peer::v1::CutRequest;
using peer::v1::CutState;
constexpr auto kPoll = std::chrono::milliseconds(20);

std::string CutPrefix(const std::string& cut) { return std::string(cluster::kEtcdRoot) + "cuts/" + cut + "/"; }

std::string NewCutId() {
  std::random_device rd;
  const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// One read of the cut's keys (one etcd revision: a consistent view).
struct CutView {
  bool has_request = false;
  CutRequest request;
  bool capture = false;
  bool committed = false;
  std::string abort;
  std::map<std::string, CutState> states;  // by participant endpoint
};

/// The cut's keys `kvs` (as one List or WaitPrefix gave them) as a view.
Status ParseCut(const std::string& cut, const std::vector<cluster::KeyValue>& kvs, CutView* v) {
  *v = CutView{};
  const std::string prefix = CutPrefix(cut);
  for (const cluster::KeyValue& kv : kvs) {
    const std::string name = kv.key.substr(prefix.size());
    if (name == "request") {
      if (!v->request.ParseFromString(kv.value)) return Status::Corruption("cut " + cut + ": a malformed request");
      v->has_request = true;
    } else if (name == "capture") {
      v->capture = true;
    } else if (name == "committed") {
      v->committed = true;
    } else if (name == "abort") {
      v->abort = kv.value.empty() ? "aborted" : kv.value;
    } else if (name.rfind("state/", 0) == 0) {
      CutState st;
      if (!st.ParseFromString(kv.value)) return Status::Corruption("cut " + cut + ": a malformed state of " + name);
      v->states[name.substr(6)] = std::move(st);
    }
  }
  return Status::Ok();
}

Status ReadCut(cluster::EtcdClient& etcd, const std::string& cut, CutView* v) {
  std::vector<cluster::KeyValue> kvs;
  PHOS_RETURN_IF_ERROR(etcd.List(CutPrefix(cut), &kvs));
  return ParseCut(cut, kvs, v);
}

/// The other participants' states (not `self`'s).
std::map<std::string, CutState> Others(const CutView& v, const std::string& self) {
  std::map<std::string, CutState> out = v.states;
  out.erase(self);
  return out;
}

void Publish(cluster::ClusterMember* member, const std::string& cut, const CutState& st) {
  const std::string key = CutPrefix(cut) + "state/" + member->endpoint();
  if (Status s = member->etcd().Put(key, st.SerializeAsString(), member->lease()); !s.ok()) {
    spdlog::warn("job cut {}: cannot publish this phosd's state: {}", cut, s.message());
  }
}

/// The rank directories this participant wrote under `staged`.
void RemoveOwn(const std::string& staged, const std::vector<std::unique_ptr<Member>>& members) {
  std::error_code ec;
  for (const auto& m : members) std::filesystem::remove_all(staged + "/rank-" + std::to_string(m->rank), ec);
  std::filesystem::remove(staged, ec);  // only if empty: others may still be there
}

/// --test-pause-cut-before-capture: waits until `file` exists (a test's
/// go-ahead) or phosd stops. Tests only; polls, as nothing signals a file.
void PauseForTest(const std::string& file, const std::string& cut, const std::function<bool()>& cancelled) {
  spdlog::warn("job cut {}: paused before capturing until {} exists (--test-pause-cut-before-capture)", cut, file);
  std::error_code ec;
  while (!std::filesystem::exists(file, ec) && !(cancelled && cancelled())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  spdlog::info("job cut {}: going on", cut);
}

}  // namespace

Status TakePartInCut(session::SessionServer* server, const std::string& cut, const JobCheckpointOptions& base) {
  cluster::ClusterMember* member = base.cluster.member;
  if (member == nullptr) return Status::FailedPrecondition("this phosd has no --etcd");
  CutView view;
  PHOS_RETURN_IF_ERROR(ReadCut(member->etcd(), cut, &view));
  if (!view.has_request) return Status::NotFound("job cut " + cut + " has no request in etcd (it ended?)");
  const CutRequest req = view.request;
  CutState state;
  auto fail = [&](Status s) {
    state.set_error(s.message());
    state.set_held(false);
    Publish(member, cut, state);
    spdlog::warn("job cut {}: {}", cut, s.message());
    return s;
  };
  // The request, checked before any rank is held.
  JobCheckpointOptions opts = base;
  if (!engine::ParseMode(req.mode(), &opts.rank.mode)) {
    return fail(Status::Corruption("cut " + cut + ": unknown mode '" + req.mode() + "' in its request"));
  }
  // This phosd's sessions of the job: those holding ranks of its
  // communicators, and everything they share communicators with here.
  std::vector<backend::CommunicatorId> ids;
  for (const std::string& c : req.communicators()) {
    backend::CommunicatorId id{};
    if (c.size() != id.size()) return fail(Status::Corruption("cut " + cut + ": a malformed communicator id"));
    std::memcpy(id.data(), c.data(), id.size());
    ids.push_back(id);
  }
  Book& book = server->communicators();
  std::set<std::uint64_t> job;
  for (std::uint64_t s : book.SessionsHolding(ids)) {
    for (std::uint64_t t : book.JobOf(s)) job.insert(t);
  }
  const Book::Communicators first = book.Snapshot(job);
  std::vector<std::unique_ptr<Member>> members;
  if (Status m = MembersOf(server, job, first, &members); !m.ok()) return fail(m);
  spdlog::info("job cut {}: {} ranks of this phosd take part (coordinator {})", cut, members.size(),
               req.coordinator());
  const auto release_all = [&] {
    for (auto& m : members) Release(*m);
  };
  // 1. Run to the cut: the targets are the maxima over every phosd's
  //    published counts and this phosd's live ones (job_checkpoint.cc's
  //    ReachCut, with the other phosds' ranks read from etcd).
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<std::uint64_t>(req.timeout_ms(), 1000));
  std::string published;
  std::string behind;
  for (;;) {
    if (Status r = ReadCut(member->etcd(), cut, &view); !r.ok()) {
      release_all();
      return fail(r.WithContext("reading the cut from etcd"));
    }
    if (!view.abort.empty() || !view.has_request) {
      release_all();
      const std::string why = !view.abort.empty() ? view.abort : "the coordinator's request is gone (it died?)";
      spdlog::warn("job cut {}: aborted: {}", cut, why);
      state.set_done(true);
      Publish(member, cut, state);
      return Status::Unavailable("job cut " + cut + " aborted: " + why);
    }
    if (view.capture) break;
    if (base.cluster.cancelled && base.cluster.cancelled()) {
      release_all();
      return fail(Status::Unavailable("this phosd is stopping"));
    }
    std::uint64_t version = 0;
    const Book::Communicators local = book.Snapshot(job, &version);
    Book::Communicators merged = local;
    if (Status m = MergeCounts(Others(view, member->endpoint()), &merged); !m.ok()) {
      release_all();
      return fail(m);
    }
    const Targets t = TargetsOf(merged);
    bool all = true;
    for (auto& m : members) {
      if (Status p = Poll(*m); !p.ok()) {
        release_all();
        return fail(p);
      }
      std::string why;
      const bool at = AtTargets(local, t, m->id, &why);
      if (at && !m->gated) Hold(*m);
      if (!at && m->parked) Release(*m);
      if (!at) behind = why;
      all = all && at && m->parked;
    }
    if (all) {
      std::uint64_t now = 0;
      (void)book.Snapshot(job, &now);
      all = now == version;  // nothing changed since the counts were read
    }
    PutCounts(local, job, &state);
    state.set_held(all);
    if (std::string bytes = state.SerializeAsString(); bytes != published) {
      Publish(member, cut, state);
      published = bytes;
    }
    if (Clock::now() >= deadline) {
      release_all();
      return fail(Status::Unavailable("this phosd's ranks did not reach the cut in time" +
                                      (behind.empty() ? std::string() : " (" + behind + ")")));
    }
    book.WaitForChange(version, kPoll);
  }
  // 2. Every rank of the job is held at the cut: capture this phosd's.
  if (!base.test_pause_before_capture.empty()) PauseForTest(base.test_pause_before_capture, cut, base.cluster.cancelled);
  const std::string staged = req.dir() + ".tmp";
  std::error_code ec;
  std::filesystem::create_directories(staged, ec);
  std::vector<JobRankResult> ranks;
  Status captured = ec ? Status::IoError("cannot create " + staged + ": " + ec.message())
                       : CaptureMembers(members, staged, opts, &ranks);
  if (ec) release_all();
  if (!captured.ok()) {
    RemoveOwn(staged, members);
    return fail(captured);
  }
  state.set_held(false);
  state.set_captured(true);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const JobRankResult& r = ranks[i];
    image::v1::JobManifest::RankImage described;
    DescribeRank(r, &described);
    auto* out = state.add_ranks();
    out->set_rank(r.rank);
    out->set_pid(r.pid);
    out->set_dir(r.dir);
    *out->mutable_cmdline() = described.cmdline();
    out->set_gpu_bytes(r.result.gpu.bytes);
    out->set_held_us(members[i]->held_us.load());
  }
  Publish(member, cut, state);
  // 3. The coordinator commits or aborts.
  Status decided = member->etcd().WaitPrefix(
      CutPrefix(cut),
      [&](const std::vector<cluster::KeyValue>& kvs) {
        return ParseCut(cut, kvs, &view).ok() && (view.committed || !view.abort.empty() || !view.has_request);
      },
      Clock::now() + std::chrono::minutes(10), base.cluster.cancelled,
      "job cut " + cut + " waiting for the coordinator");
  Status outcome;
  if (decided.ok() && view.committed) {
    // On another machine (no shared file system) the coordinator's commit
    // did not move this phosd's ranks: commit them here the same way.
    if (std::filesystem::exists(staged, ec) && !std::filesystem::exists(req.dir(), ec)) {
      outcome = image::CommitDirectory(staged, req.dir(), image::CommitSync::kDirectory);
    }
    spdlog::info("job cut {}: committed ({} ranks of this phosd)", cut, members.size());
    // --kill: this phosd ends its ranks (the coordinator reports the sum).
    if (req.kill()) {
      std::uint32_t ended = 0;
      if (Status k = EndRanks(base.end_ranks, ranks, &ended); !k.ok()) {
        state.set_end_error(k.message());
        spdlog::warn("job cut {}: committed, but this phosd's ranks were not all ended: {}", cut, k.message());
      }
      state.set_ended(ended);
      if (base.on_killed_part) base.on_killed_part(req.dir());
    }
  } else {
    RemoveOwn(staged, members);
    outcome = Status::Unavailable("job cut " + cut + " aborted: " +
                                  (!decided.ok() ? decided.message()
                                                 : !view.abort.empty() ? view.abort : "the coordinator is gone"));
  }
  state.set_done(true);
  Publish(member, cut, state);
  return outcome;
}

Status CheckpointJobAcrossPhosds(session::SessionServer* server, const Book::Communicators& comms,
                                 const JobCheckpointOptions& options, engine::Progress* progress,
                                 JobCheckpointResult* result) {
  cluster::ClusterMember* member = options.cluster.member;
  const auto t0 = Clock::now();
  const std::string self = member->endpoint();
  // The participants: every phosd that joined a rank of the job's
  // communicators (their rendezvous records).
  CutRequest req;
  std::set<std::string> participants;
  for (const auto& [id, c] : comms) {
    req.add_communicators(id.data(), id.size());
    std::vector<cluster::KeyValue> kvs;
    PHOS_RETURN_IF_ERROR(member->etcd().List(cluster::CommunicatorPrefix(id), &kvs));
    if (static_cast<int>(kvs.size()) != c.nranks) {
      return Status::FailedPrecondition("etcd knows " + std::to_string(kvs.size()) + " of the " +
                                        std::to_string(c.nranks) + " ranks of a communicator of the job");
    }
    for (const cluster::KeyValue& kv : kvs) participants.insert(kv.value.substr(0, kv.value.find(' ')));
  }
  if (options.check_participants) PHOS_RETURN_IF_ERROR(options.check_participants(participants));
  for (const std::string& p : participants) req.add_participants(p);
  req.set_coordinator(self);
  req.set_mode(engine::ModeName(options.rank.mode));
  req.set_dir(std::filesystem::absolute(options.dir).string());
  req.set_timeout_ms(static_cast<std::uint64_t>(options.cut_timeout.count()));
  req.set_kill(options.kill);
  const std::string staged = req.dir() + ".tmp";
  std::error_code ec;
  std::filesystem::remove_all(staged, ec);
  const std::string cut = NewCutId();
  const std::string prefix = CutPrefix(cut);
  PHOS_RETURN_IF_ERROR(member->etcd().Put(prefix + "request", req.SerializeAsString(), member->lease()));
  spdlog::info("job cut {}: {} phosds, {} communicators, into {}", cut, participants.size(), comms.size(), req.dir());
  // Every other participant starts its part; this phosd runs its own.
  std::future<Status> own = std::async(std::launch::async, [server, cut, options] {
    return TakePartInCut(server, cut, options);
  });
  auto abort = [&](const Status& why) {
    (void)member->etcd().Put(prefix + "abort", why.message(), member->lease());
    (void)own.get();
    // Let the participants release their ranks and clean up (bounded).
    (void)member->etcd().WaitPrefix(
        prefix,
        [&](const std::vector<cluster::KeyValue>& kvs) {
          CutView v;
          if (!ParseCut(cut, kvs, &v).ok()) return true;
          for (const auto& [e, st] : v.states) {
            if (!st.done() && st.error().empty()) return false;
          }
          return true;
        },
        Clock::now() + std::chrono::seconds(10), nullptr, "participants cleaning up");
    std::filesystem::remove_all(staged, ec);
    (void)member->etcd().DeletePrefix(prefix);
    return why.WithContext("job checkpoint across " + std::to_string(participants.size()) +
                           " phosds failed; nothing was committed, earlier job images are untouched, every rank still alive runs on");
  };
  for (const std::string& p : participants) {
    if (p == self) continue;
    if (Status s = peer::RequestJoinCut(p, options.cluster.peer_token, cut); !s.ok()) {
      return abort(s.WithContext("asking the phosd at " + p + " to take part"));
    }
  }
  progress->SetPhase("cut", "bringing the ranks on " + std::to_string(participants.size()) + " phosds to one cut");
  // Decide: capture once every rank is held at one cut; commit once every
  // participant captured. A participant whose state vanished (its lease
  // ended: it died) or that failed aborts the cut.
  // Reaching the cut is bounded by the cut timeout (a phosd that never
  // reports fails it); the captures and commit then get ten minutes.
  const auto cut_deadline = Clock::now() + options.cut_timeout + std::chrono::seconds(5);
  auto deadline = cut_deadline;
  std::set<std::string> seen;
  Targets cut_targets;
  Book::Communicators cut_counts;  // every rank's counts at the cut (the manifest's sizes)
  bool capturing = false;
  for (;;) {
    CutView v;
    if (Status r = ReadCut(member->etcd(), cut, &v); !r.ok()) return abort(r);
    for (const auto& [e, st] : v.states) {
      seen.insert(e);
      if (!st.error().empty()) {
        // A participant's failure is often the effect of another's death
        // (its ranks' collectives with the dead one's failed, so they
        // exited) that etcd notices only when the lease ends: name a
        // participant that no longer answers first, it is the likelier cause.
        std::string cause;
        for (const std::string& p : participants) {
          if (p == e || p == self) continue;
          if (Status ping = peer::PingPeer(p, options.cluster.peer_token, 1000); !ping.ok()) {
            cause += "the phosd at " + p + " does not answer (" + ping.message() + "); ";
          }
        }
        return abort(Status::Unavailable(cause + "the phosd at " + e + ": " + st.error()));
      }
    }
    for (const std::string& e : seen) {
      if (v.states.count(e) == 0) {
        return abort(Status::Unavailable("the phosd at " + e + " left etcd mid-checkpoint (it died?)"));
      }
    }
    const bool all_reported = std::all_of(participants.begin(), participants.end(),
                                          [&](const std::string& e) { return v.states.count(e) != 0; });
    if (!capturing && all_reported &&
        std::all_of(v.states.begin(), v.states.end(), [](const auto& s) { return s.second.held(); })) {
      Book::Communicators all;
      if (Status m = MergeCounts(v.states, &all); !m.ok()) return abort(m);
      const Targets t = TargetsOf(all);
      std::string why;
      if (AllAtTargets(all, t, &why)) {
        if (Status c = member->etcd().Put(prefix + "capture", "1", member->lease()); !c.ok()) return abort(c);
        capturing = true;
        cut_counts = all;
        deadline = Clock::now() + std::chrono::minutes(10);
        cut_targets = t;
        result->cut_us = MicrosSince(t0);
        spdlog::info("job cut {}: every rank held at one cut after {} us", cut, result->cut_us);
        progress->SetPhase("capture", "checkpointing the ranks on " + std::to_string(participants.size()) +
                                          " phosds at the cut");
      }
    }
    if (capturing && all_reported &&
        std::all_of(v.states.begin(), v.states.end(), [](const auto& s) { return s.second.captured(); })) {
      // 3. Commit: the manifest lists every rank and the phosd holding it.
      progress->SetPhase("commit", "writing the job manifest");
      image::v1::JobManifest jm;
      jm.set_format_version(image::kImageFormatVersion);
      jm.set_phos_version(VersionString());
      jm.set_created_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
      jm.set_mode(req.mode());
      jm.set_job_name(options.job_name);
      jm.set_cut_us(result->cut_us);
      std::vector<std::pair<int, const peer::v1::CutRank*>> order;
      std::map<int, std::string> where;
      for (const auto& [e, st] : v.states) {
        for (const auto& r : st.ranks()) {
          order.emplace_back(r.rank(), &r);
          where[r.rank()] = e;
        }
      }
      std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [rank, r] : order) {
        auto* out = jm.add_ranks();
        out->set_dir(r->dir());
        out->set_pid(r->pid());
        *out->mutable_cmdline() = r->cmdline();
        out->set_phosd(where[rank]);  // the coordinator's own too: --phosd-map can name every phosd
        JobRankResult jr;
        jr.rank = rank;
        jr.pid = static_cast<pid_t>(r->pid());
        jr.dir = r->dir();
        result->ranks.push_back(jr);
        result->bytes += r->gpu_bytes();
        result->stall_us = std::max(result->stall_us, r->held_us());
      }
      for (const auto& [cid, k] : cut_targets.collectives) {
        auto* c = jm.add_cut();
        c->set_unique_id(cid.data(), cid.size());
        c->set_nranks(cut_counts[cid].nranks);
        c->set_collectives(k);
      }
      Status w = image::WriteJobManifest(staged, jm);
      if (w.ok()) w = image::CommitDirectory(staged, req.dir(), image::CommitSync::kDirectory);
      if (!w.ok()) return abort(w.WithContext("committing the job image " + req.dir()));
      (void)member->etcd().Put(prefix + "committed", "1", member->lease());
      if (options.kill) progress->SetPhase("kill", "job image committed; every phosd ends its ranks");
      Status mine = own.get();
      // The participants move their own ranks where no file system is
      // shared, then say they are done (bounded: the image is committed).
      CutView finished;
      (void)member->etcd().WaitPrefix(
          prefix,
          [&](const std::vector<cluster::KeyValue>& kvs) {
            if (!ParseCut(cut, kvs, &finished).ok()) return true;
            for (const auto& [e, st] : finished.states) {
              if (!st.done()) return false;
            }
            return true;
          },
          Clock::now() + std::chrono::seconds(30), nullptr, "participants finishing");
      std::string not_ended;
      if (options.kill) {
        for (const std::string& e : participants) {
          auto it = finished.states.find(e);
          if (it == finished.states.end() || !it->second.done()) {
            not_ended += "; the phosd at " + e + " did not say it ended its ranks";
          } else if (!it->second.end_error().empty()) {
            not_ended += "; the phosd at " + e + ": " + it->second.end_error();
          }
          if (it != finished.states.end()) result->killed += it->second.ended();
        }
      }
      (void)member->etcd().DeletePrefix(prefix);
      if (!mine.ok()) spdlog::warn("job cut {}: this phosd's part ended with: {}", cut, mine.message());
      spdlog::info("job cut {}: {} committed ({} ranks on {} phosds, {} bytes, cut after {} us, longest stall {} us)",
                   cut, req.dir(), result->ranks.size(), participants.size(), result->bytes, result->cut_us,
                   result->stall_us);
      if (!not_ended.empty()) {
        return Status::Unavailable("the job image " + req.dir() + " is committed, but its ranks were not all ended" +
                                   not_ended);
      }
      return Status::Ok();
    }
    if (Clock::now() >= deadline) {
      std::string missing;
      for (const std::string& e : participants) {
        if (v.states.count(e) == 0 || !v.states.at(e).held()) missing += " " + e;
      }
      return abort(Status::Unavailable(
          capturing ? "the captures did not finish in time"
                    : "the ranks did not reach one cut within " + std::to_string(options.cut_timeout.count()) +
                          " ms (phosds not held at it:" + missing + ")"));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace phos::jobs
