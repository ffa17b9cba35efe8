// The gRPC service (proto/phos.proto) as phosd serves it.
//
// Status and ListSessions are implemented. The long operations arrive with
// later issues; until then each answers UNIMPLEMENTED with a message naming
// the RPC — never a fake success.
#pragma once

#include <chrono>
#include <string>

#include "backend/backend.h"
#include "phos.grpc.pb.h"
#include "server/session_registry.h"

namespace phos::server {

class PhosService final : public v1::Phos::Service {
 public:
  /// `backend` and `sessions` must outlive the service.
  PhosService(backend::Backend* backend, std::string backend_detail, SessionRegistry* sessions,
              std::string socket_path);

  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusReply* reply) override;
  grpc::Status ListSessions(grpc::ServerContext* ctx, const v1::ListSessionsRequest* req,
                            v1::ListSessionsReply* reply) override;

  grpc::Status Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                          grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                       grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status Migrate(grpc::ServerContext* ctx, const v1::MigrateRequest* req,
                       grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status TemplateSave(grpc::ServerContext* ctx, const v1::TemplateSaveRequest* req,
                            grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status TemplateStart(grpc::ServerContext* ctx, const v1::TemplateStartRequest* req,
                             grpc::ServerWriter<v1::OperationEvent>* writer) override;
  grpc::Status WatchOperation(grpc::ServerContext* ctx, const v1::WatchOperationRequest* req,
                              grpc::ServerWriter<v1::OperationEvent>* writer) override;

 private:
  // All members are set at construction and only read afterwards; the
  // pointees are thread-safe (Backend's contract, SessionRegistry's mutex).
  backend::Backend* backend_;
  const std::string backend_detail_;
  SessionRegistry* sessions_;
  const std::string socket_path_;
  const std::chrono::steady_clock::time_point started_;
};

}  // namespace phos::server
