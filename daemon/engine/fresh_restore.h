// Restore of a GPU-only image into a FRESH session: one that has done
// nothing yet (the app restored by CRIU reconnecting as a new session with
// a new context, docs/criu.md "Proposed design for the whole-process
// restore"). Unlike the in-place restore (restore_task.h), which needs the
// session's modules and streams to exist already, this recreates
// everything the app's virtual ids refer to, from the image's session
// sections (session_sections.h), so the app's later calls — with its old
// module/function/stream/event ids and its old device pointers — work:
//
//   caller's thread  claim the session; RestoreTask::Prepare (the image
//                    opened; by default (engine::Verify) NOT every checksum
//                    first: each chunk is verified as it is loaded, and a
//                    bad one fails the restore as below, so the image is
//                    read once); parse and cross-check the
//                    `streams`/`modules` sections. A bad manifest is
//                    refused here, before the session is touched.
//   control task     (stop-the-world, on the session's consumer thread)
//                    refuse a session that holds anything; load every
//                    module with its id (ascending), resolve every function
//                    with its id (kernel access plans as kModuleGetFunction
//                    builds them) and re-apply its attributes, resolve
//                    every global and require it at its recorded address
//                    and size, create streams and events with their flags;
//                    allocate every buffer at its recorded address; copy
//                    every extent (buffers and globals) H2D; synchronise.
//                    Any failure releases what was created (ReleaseAll):
//                    the session is empty again and says so.
//
// Globals cannot be placed: the backend decides where a module's globals
// go. The app holds their old addresses (cudaGetSymbolAddress, the
// interposer's symbol cache), so a global that lands elsewhere refuses the
// restore, naming both addresses. Modules are loaded before buffers are
// allocated so a buffer never takes a global's old place.
//
// Concurrent (options.concurrent, docs/protocols.md "Concurrent restore"):
// the control task recreates the handles and allocates every buffer as
// above, then, instead of copying, hands the mapped session to the
// concurrent restore (concurrent_restore.h, ConcurrentRestore::StartMapped:
// globals loaded synchronously, every buffer ABSENT, the operation
// installed in the EngineHook) and returns: the session resumes at once. A
// loader on the caller's thread fills the buffers in the image's first-use
// order; a call touching an absent buffer waits while that buffer jumps the
// queue; kernels run as read-checked twins with rollback — all shared with
// the in-place concurrent restore (DriveConcurrentRestore). A failure in
// the control task releases what was created (empty again); a failure
// while loading leaves the device state undefined (the error says so), and
// the session ending while loading ends the restore with Unavailable.
//
// Not yet: pinned host segments, library handles (cuBLAS).
//
// Threading: as operations.h — any thread but the session's consumer; one
// operation per session at a time (the engine's claim).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/concurrent_restore.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "session/session.h"

namespace phos::engine {

/// `options.dir`: the image. result: bytes, buffers, allocated (= buffers),
/// globals, source_pid; stop-the-world: stall_us ~ total_us; concurrent:
/// stall_us = the control task, total_us until every buffer was present,
/// counters (absent_waits, twin_launches, restore_rollbacks, ...).
/// `options.concurrent` needs the session's EngineHook.
Status RestoreFresh(session::Session& session, const RestoreOptions& options, Progress* progress,
                    RestoreResult* result);

/// RestoreFresh with the concurrent restore's test hooks (used only when
/// options.concurrent); `load_order` (optional) receives the addresses in
/// the order the loader made them PRESENT.
Status RestoreFreshWithHooks(session::Session& session, const RestoreOptions& options, Progress* progress,
                             RestoreResult* result, const ConcurrentRestoreHooks& hooks,
                             std::vector<std::uint64_t>* load_order = nullptr);

}  // namespace phos::engine
