// The counts a job checkpoint's cut is chosen from (docs/protocols.md "Job
// checkpoints", "Jobs across phosds"): the targets every rank must have
// enqueued, whether ranks are at them, and the counts other phosds publish
// in etcd (peer::v1::CutState) merged with this phosd's — bytes from other
// machines, checked as they are merged (fuzzed: cut_state_fuzz). A library
// of its own (phos_job_cut_counts) so the fuzzer needs no more of phosd.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "common/status.h"
#include "peer.pb.h"
#include "session/communicator_book.h"

namespace phos::jobs {

using Book = session::CommunicatorBook;

/// What every rank must have enqueued at the cut: per communicator, the
/// most collectives any rank enqueued, and per (sender, receiver) the most
/// messages either side enqueued.
struct Targets {
  std::map<backend::CommunicatorId, std::uint64_t> collectives;
  std::map<backend::CommunicatorId, std::map<std::pair<int, int>, std::uint64_t>> messages;
};

Targets TargetsOf(const Book::Communicators& comms);

/// Whether every rank session `id` holds (in `comms`) has enqueued exactly
/// the targets; else `*behind` says how far one is.
bool AtTargets(const Book::Communicators& comms, const Targets& t, std::uint64_t id, std::string* behind);

/// The counts of the ranks `job`'s sessions hold in `comms`, as a
/// participant publishes them.
void PutCounts(const Book::Communicators& comms, const std::set<std::uint64_t>& job, peer::v1::CutState* st);

/// `into` plus the ranks `states` publish (as ranks of no local session:
/// session id 0), by participant endpoint. Corruption when they are
/// malformed: an id of another size, sizes that disagree, a rank out of
/// range or published twice.
Status MergeCounts(const std::map<std::string, peer::v1::CutState>& states, Book::Communicators* into);

/// Whether every rank of every communicator in `all` is there and at `t`.
bool AllAtTargets(const Book::Communicators& all, const Targets& t, std::string* why);

}  // namespace phos::jobs
