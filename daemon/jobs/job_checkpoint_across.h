// Job checkpoints of jobs whose ranks run on several phosds, with the
// barrier in etcd (docs/protocols.md "Jobs across phosds"). Internal to
// phos_jobs: CheckpointJob calls the coordinator when the job has ranks
// elsewhere; TakePartInCut (job_checkpoint.h) is every phosd's part.
#pragma once

#include <set>

#include "jobs/job_cut.h"

namespace phos::jobs {

/// Coordinates checkpoint of the job `job` (this phosd's sessions of it)
/// whose communicators `comms` have ranks on other phosds.
Status CheckpointJobAcrossPhosds(session::SessionServer* server, const std::set<std::uint64_t>& job,
                                 const Book::Communicators& comms, const JobCheckpointOptions& options,
                                 engine::Progress* progress, JobCheckpointResult* result);

}  // namespace phos::jobs
