// The sim's cuBLAS: one routine (backend/blas_call.h) computed on the CPU
// with OpenBLAS, on the simulated device memory (whose device addresses are
// addresses in phosd). Float, double and their complex types go straight to
// cblas; half and bfloat16 matrices are widened to float, multiplied with
// sgemm and rounded back to nearest-even (docs/backends.md "cuBLAS on the
// sim": the accumulation is float's, as CUBLAS_COMPUTE_32F; a 16F compute
// type accumulates in float too, and rounds only the result).
//
// Called from a stream's worker with the call's ranges pinned; pure
// otherwise (no state), so any number of streams may run routines at once.
#pragma once

#include <cstdint>
#include <functional>

#include "backend/blas_call.h"
#include "common/status.h"

namespace phos::backend::sim {

/// Computes `call`. NotSupported, naming the routine and types, for a type
/// combination the sim does not compute; InvalidArgument for a dimension
/// beyond OpenBLAS's 32-bit indices.
Status RunBlas(const BlasCall& call);

/// A pointer-array batched gemm (BlasOp::kGemmBatched): reads the three
/// arrays (their ranges already pinned), pins each member's matrices with
/// `pin` — which must refuse memory outside the caller's context (the
/// session's isolation: the handler could not check ranges it did not
/// know) and keep them pinned until it is destroyed — and computes each.
using PinRangeFn = std::function<Status(std::uint64_t ptr, std::uint64_t bytes)>;
Status RunBlasBatched(const BlasCall& call, const PinRangeFn& pin);

/// OK when RunBlas computes `call`'s routine and type combination, else
/// the NotSupported RunBlas would return (checked when the call is
/// enqueued, so the refusal is the call's own error, not its stream's).
Status CheckSimBlas(const BlasCall& call);

/// The symmetric, Hermitian and triangular routines and dgmm
/// (sim_blas_symmetric.cc; RunBlas sends them there), and the type
/// combinations they compute.
Status RunSymmetricBlas(const BlasCall& call);
bool SymmetricBlasTypesComputed(const BlasCall& call);
/// The batched LU routines (sim_blas_lu.cc; RunBlasBatched sends them
/// there) and whether the sim computes `call`'s.
Status RunLuBatched(const BlasCall& call, const PinRangeFn& pin);
Status CheckSimLu(const BlasCall& call);
/// The banded and packed level-2 routines (sim_blas_banded.cc).
Status RunBandedBlas(const BlasCall& call);
bool BandedBlasTypesComputed(const BlasCall& call);

/// One-time set-up (OpenBLAS's own threads: one, as each stream already
/// has its worker). Idempotent, thread-safe.
void InitSimBlas();

}  // namespace phos::backend::sim
