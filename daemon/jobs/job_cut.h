// What the job checkpoints on one phosd (job_checkpoint.cc) and across
// phosds (job_checkpoint_across.cc) share: the cut's targets, holding a
// rank between two calls, capturing the held ranks (docs/protocols.md
// "Job checkpoints"). Internal to phos_jobs.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/operation_util.h"
#include "jobs/job_checkpoint.h"
#include "jobs/cut_counts.h"
#include "session/communicator_book.h"

namespace phos::jobs {

/// The rank session `id` holds in the largest of `comms` (-1: none).
int LargestRank(const Book::Communicators& comms, std::uint64_t id);

/// One session of the job while it is checkpointed. `gated`, `parked` and
/// `closing`: the job operation's thread while it brings the job to the cut;
/// from the captures on, Release (the rank's capture and the job thread)
/// takes `mu`.
struct Member {
  std::shared_ptr<session::Session> session;
  std::uint64_t id = 0;
  int rank = 0;                  // its rank in the job's largest communicator (the image's name)
  bool gated = false;            // a CloseGate was posted and not undone
  bool parked = false;           // ... and it ran: the consumer holds between two calls
  std::future<Status> closing;   // that control task
  engine::Clock::time_point gated_at{};
  std::atomic<std::uint64_t> held_us{0};
  std::mutex mu;                 // Release from the capture and from the job thread
};

/// Closes the member's gate (a control task): it stops between two calls.
void Hold(Member& m);
/// Whether the member's consumer is now held; fails when its session ended.
Status Poll(Member& m);
/// Lets the member run again. A CloseGate still queued runs first (else it
/// would close the gate after this opened it).
void Release(Member& m);

/// The members of the job made of `sessions` (sorted by rank); fails when
/// one ended or two are the same rank.
Status MembersOf(session::SessionServer* server, const std::set<std::uint64_t>& sessions,
                 const Book::Communicators& comms, std::vector<std::unique_ptr<Member>>* out);

/// Captures every held member in parallel into `staged`/rank-<R> (each
/// released at its own capture), fills `ranks` (the members' order);
/// releases all at the end. The first failure, naming its rank.
Status CaptureMembers(std::vector<std::unique_ptr<Member>>& members, const std::string& staged,
                      const JobCheckpointOptions& options, std::vector<JobRankResult>* ranks);

/// --kill, once the job image is committed: ends the captured `ranks` of
/// this phosd through `end_ranks` (JobCheckpointOptions::end_ranks);
/// `ended` counts them.
Status EndRanks(const std::function<Status(const std::vector<pid_t>&)>& end_ranks,
                const std::vector<JobRankResult>& ranks, std::uint32_t* ended);

/// A new communicator generation (never 0) for one job restore: its ranks
/// meet each other, never the original job or another copy of it.
std::uint64_t NewCommGeneration();

/// The job manifest's entry of a captured rank.
void DescribeRank(const JobRankResult& r, image::v1::JobManifest::RankImage* out);

}  // namespace phos::jobs
