// Job checkpoints of jobs whose ranks run on several phosds, with the
// barrier in etcd (docs/protocols.md "Jobs across phosds"). Internal to
// phos_jobs: CheckpointJob calls the coordinator when the job has ranks
// elsewhere; TakePartInCut (job_checkpoint.h) is every phosd's part.
#pragma once

#include <set>

#include "jobs/job_cut.h"

namespace phos::jobs {

/// Coordinates the checkpoint of the job whose communicators `comms` (as
/// this phosd's sessions hold them) have ranks on other phosds.
Status CheckpointJobAcrossPhosds(session::SessionServer* server, const Book::Communicators& comms,
                                 const JobCheckpointOptions& options, engine::Progress* progress,
                                 JobCheckpointResult* result);

}  // namespace phos::jobs
