#include "backend/backend_factory.h"

namespace phos::backend {

Status ParseBackendKind(const std::string& text, BackendKind* out) {
  if (text == "auto") *out = BackendKind::kAuto;
  else if (text == "cuda") *out = BackendKind::kCuda;
  else if (text == "sim") *out = BackendKind::kSim;
  else return Status::InvalidArgument("unknown backend '" + text + "' (expected cuda, sim or auto)");
  return Status::Ok();
}

Status CreateBackend(const BackendOptions& options, std::unique_ptr<Backend>* out,
                     std::string* why) {
  switch (options.kind) {
    case BackendKind::kSim:
      *why = "sim backend requested";
      return CreateSimBackend(options.sim, out);
    case BackendKind::kCuda:
      *why = "cuda backend requested";
      return CreateCudaBackend(options.cuda, out);
    case BackendKind::kAuto: {
      Status cuda = CreateCudaBackend(options.cuda, out);
      if (cuda.ok()) {
        *why = "auto: a CUDA driver and GPU are present";
        return cuda;
      }
      *why = "auto: no usable GPU (" + cuda.message() + "), using the sim backend";
      return CreateSimBackend(options.sim, out);
    }
  }
  return Status::Internal("unreachable backend kind");
}

}  // namespace phos::backend
