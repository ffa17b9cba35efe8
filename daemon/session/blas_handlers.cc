// cuBLAS routines (calls.def's cuBLAS section; docs/interposer.md
// "cuBLAS"). libphos.so keeps the app's handles and sends each routine with
// everything it needs (stream in the frame, pointer mode and scalars in the
// request), so phosd holds no cuBLAS state of the app and a checkpoint has
// none to save: the context's backend runs the routine (the cuda backend on
// its pooled handle, the sim on OpenBLAS).
//
// The access set comes from the routine's specification
// (protocol/blas_spec.h): exact ranges, no speculation, no twin.
#include <array>
#include <cstring>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "protocol/blas_spec.h"
#include "session/access_spec.h"
#include "session/handlers.h"

namespace phos::session {
namespace {

using wire::WireStatus;

backend::BlasOp ToBackendOp(wire::BlasShape shape) {
  switch (shape) {
    case wire::BlasShape::kGemm: return backend::BlasOp::kGemm;
    case wire::BlasShape::kGemmBatched: return backend::BlasOp::kGemmBatched;
    case wire::BlasShape::kGemvBatched: return backend::BlasOp::kGemvBatched;
    case wire::BlasShape::kTrsmBatched: return backend::BlasOp::kTrsmBatched;
    case wire::BlasShape::kGetrfBatched: return backend::BlasOp::kGetrfBatched;
    case wire::BlasShape::kGetrsBatched: return backend::BlasOp::kGetrsBatched;
    case wire::BlasShape::kGetriBatched: return backend::BlasOp::kGetriBatched;
    case wire::BlasShape::kGemv: return backend::BlasOp::kGemv;
    case wire::BlasShape::kGeam: return backend::BlasOp::kGeam;
    case wire::BlasShape::kTrsm: return backend::BlasOp::kTrsm;
    case wire::BlasShape::kGer: return backend::BlasOp::kGer;
    case wire::BlasShape::kSyrk: return backend::BlasOp::kSyrk;
    case wire::BlasShape::kAxpy: return backend::BlasOp::kAxpy;
    case wire::BlasShape::kScal: return backend::BlasOp::kScal;
    case wire::BlasShape::kCopy: return backend::BlasOp::kCopy;
    case wire::BlasShape::kSwap: return backend::BlasOp::kSwap;
    case wire::BlasShape::kRot: return backend::BlasOp::kRot;
    case wire::BlasShape::kDot: return backend::BlasOp::kDot;
    case wire::BlasShape::kNrm2: return backend::BlasOp::kNrm2;
    case wire::BlasShape::kAsum: return backend::BlasOp::kAsum;
    case wire::BlasShape::kIamax: return backend::BlasOp::kIamax;
    case wire::BlasShape::kIamin: return backend::BlasOp::kIamin;
    case wire::BlasShape::kLtMatmul: return backend::BlasOp::kLtMatmul;
    case wire::BlasShape::kSymm: return backend::BlasOp::kSymm;
    case wire::BlasShape::kSyr2k: return backend::BlasOp::kSyr2k;
    case wire::BlasShape::kSyrkx: return backend::BlasOp::kSyrkx;
    case wire::BlasShape::kTrmm: return backend::BlasOp::kTrmm;
    case wire::BlasShape::kSymv: return backend::BlasOp::kSymv;
    case wire::BlasShape::kTrmv: return backend::BlasOp::kTrmv;
    case wire::BlasShape::kTrsv: return backend::BlasOp::kTrsv;
    case wire::BlasShape::kSyr: return backend::BlasOp::kSyr;
    case wire::BlasShape::kSyr2: return backend::BlasOp::kSyr2;
    case wire::BlasShape::kDgmm: return backend::BlasOp::kDgmm;
    case wire::BlasShape::kGbmv: return backend::BlasOp::kGbmv;
    case wire::BlasShape::kSbmv: return backend::BlasOp::kSbmv;
    case wire::BlasShape::kTbmv: return backend::BlasOp::kTbmv;
    case wire::BlasShape::kTbsv: return backend::BlasOp::kTbsv;
    case wire::BlasShape::kSpmv: return backend::BlasOp::kSpmv;
    case wire::BlasShape::kSpr: return backend::BlasOp::kSpr;
    case wire::BlasShape::kSpr2: return backend::BlasOp::kSpr2;
    case wire::BlasShape::kTpmv: return backend::BlasOp::kTpmv;
    case wire::BlasShape::kTpsv: return backend::BlasOp::kTpsv;
  }
  return backend::BlasOp::kGemm;
}

backend::BlasCall ToBackendCall(wire::BlasShape shape, const wire::BlasRequest& r) {
  backend::BlasCall c;
  c.op = ToBackendOp(shape);
  c.type_a = r.type_a;
  c.type_b = r.type_b;
  c.type_c = r.type_c;
  c.compute = r.compute;
  c.scalar_type = r.scalar_type;
  c.op_a = r.op_a;
  c.op_b = r.op_b;
  c.conjugate = (r.flags & wire::kBlasConjugate) != 0;
  c.side_right = (r.flags & wire::kBlasSideRight) != 0;
  c.upper = (r.flags & wire::kBlasUpper) != 0;
  c.unit_diag = (r.flags & wire::kBlasUnitDiag) != 0;
  c.real_alpha = (r.flags & wire::kBlasRealAlpha) != 0;
  c.real_beta = (r.flags & wire::kBlasRealBeta) != 0;
  c.index64 = (r.flags & wire::kBlasIndex64) != 0;
  c.m = r.m;
  c.n = r.n;
  c.k = r.k;
  c.batch = shape == wire::BlasShape::kGemm || shape == wire::BlasShape::kGemv ||
                    shape == wire::BlasShape::kLtMatmul || shape == wire::BlasShape::kGemmBatched ||
                    shape == wire::BlasShape::kGemvBatched || shape == wire::BlasShape::kTrsmBatched ||
                    shape == wire::BlasShape::kGetrfBatched || shape == wire::BlasShape::kGetrsBatched ||
                    shape == wire::BlasShape::kGetriBatched
                ? r.batch
                : 1;
  c.a = r.a;
  c.b = r.b;
  c.c = r.c;
  c.lda = r.lda;
  c.ldb = r.ldb;
  c.ldc = r.ldc;
  c.stride_a = r.stride_a;
  c.stride_b = r.stride_b;
  c.stride_c = r.stride_c;
  c.device_scalars = (r.flags & wire::kBlasDeviceScalars) != 0;
  c.alpha_ptr = r.alpha_ptr;
  c.beta_ptr = r.beta_ptr;
  std::memcpy(c.alpha, r.alpha, sizeof c.alpha);
  std::memcpy(c.beta, r.beta, sizeof c.beta);
  c.result = r.result;
  return c;
}

/// Runs a checked routine: its ranges must lie in this session's buffers;
/// its access set is `ops`; a reduction's host result is the reply.
void RunBlas(SessionState& st, const CallContext& call, const std::string& what, const wire::BlasOperands& ops,
             backend::BlasCall bc, Outcome* out) {
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, call.rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  for (uint32_t i = 0; i < ops.count; ++i) {
    if (Status s = CheckDeviceRange(st, ops.op[i].ptr, ops.op[i].bytes); !s.ok()) {
      return out->Fail(Status(s.code(), what + ": " + s.message()));
    }
    bc.ranges[bc.range_count++] = {ops.op[i].ptr, ops.op[i].bytes};
  }
  const bool sync = call.sync();
  if (sync && !bc.device_scalars) bc.host_result = std::make_shared<std::array<unsigned char, 16>>();
  CallView v = ViewOnStream(st, call, stream, sync);
  for (uint32_t i = 0; i < ops.count; ++i) AddOperand(&v, ops.op[i].slot, ops.op[i].ptr, ops.op[i].bytes);
  // A pointer-array batch names its matrices only in device memory: any
  // buffer of the session may be touched (the backend checks each member
  // against this session's memory when it reads the arrays).
  if (ops.unknown) v.kind = AccessKind::kUnknown;
  Status s = st.executor->Run(v, [&] {
    PHOS_RETURN_IF_ERROR(st.ctx->Blas(bc, stream));
    return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok();
  });
  if (!s.ok()) return out->Fail(s);
  if (sync) {
    wire::BlasResultReply reply{};
    if (bc.host_result) std::memcpy(reply.value, bc.host_result->data(), sizeof reply.value);
    out->Set(reply);
  }
}

}  // namespace

void HandleBlas(SessionState& st, const CallContext& call, const wire::BlasRequest& req, Outcome* out) {
  wire::BlasShape shape{};
  if (!wire::BlasShapeOf(call.api(), &shape) || shape == wire::BlasShape::kLtMatmul) {
    return out->Fail(WireStatus::kNotSupported, std::string("no cuBLAS routine for op ") + call.row.op);
  }
  const std::string what = std::string("cuBLAS ") + wire::BlasShapeName(shape);
  wire::BlasOperands ops;
  if (const char* why = wire::CheckBlas(shape, req, &ops); why != nullptr) {
    return out->Fail(WireStatus::kInvalidValue, what + ": " + why);
  }
  RunBlas(st, call, what, ops, ToBackendCall(shape, req), out);
}

namespace {

backend::BlasCall ToBackendLtCall(const wire::BlasLtRequest& req) {
  backend::BlasCall bc = ToBackendCall(wire::BlasShape::kLtMatmul, req.gemm);
  bc.d = req.d;
  bc.ldd = req.ldd;
  bc.stride_d = req.stride_d;
  bc.type_d = req.type_d;
  bc.epilogue = req.epilogue;
  bc.bias = req.bias;
  bc.bias_type = req.bias_type;
  bc.bias_stride = req.bias_stride;
  bc.aux = req.aux;
  bc.aux_ld = req.aux_ld;
  bc.aux_stride = req.aux_stride;
  bc.aux_type = req.aux_type;
  return bc;
}

}  // namespace

void HandleBlasLtMatmul(SessionState& st, const CallContext& call, const wire::BlasLtRequest& req, Outcome* out) {
  const std::string what = "cublasLtMatmul";
  wire::BlasOperands ops;
  if (const char* why = wire::CheckBlasLt(req, &ops); why != nullptr) {
    return out->Fail(WireStatus::kInvalidValue, what + ": " + why);
  }
  RunBlas(st, call, what, ops, ToBackendLtCall(req), out);
}

void HandleBlasProbe(SessionState& st, const CallContext& call, const wire::BlasProbeRequest& req, Outcome* out) {
  (void)call;
  wire::BlasShape shape{};
  if (req.reserved != 0 || !wire::BlasShapeOf(static_cast<wire::ApiId>(req.api), &shape)) {
    return out->Fail(WireStatus::kInvalidValue, "cuBLAS probe: no cuBLAS routine with api id " + std::to_string(req.api));
  }
  const backend::BlasCall bc =
      shape == wire::BlasShape::kLtMatmul ? ToBackendLtCall(req.call) : ToBackendCall(shape, req.call.gemm);
  const Status s = st.ctx->BlasSupports(bc);
  // libphos.so asks once per routine and type combination: one line each.
  if (!s.ok()) spdlog::warn("session {}: refused a cuBLAS routine: {}", st.session_id, s.message());
  out->Fail(s);
}

}  // namespace phos::session
