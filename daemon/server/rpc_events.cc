#include "server/rpc_events.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>

namespace phos::server {

void WriteProgress(grpc::ServerWriter<v1::OperationEvent>* writer, const engine::ProgressSnapshot& p) {
  v1::OperationEvent ev;
  v1::Progress* out = ev.mutable_progress();
  out->set_phase(p.phase);
  out->set_message(p.message);
  out->set_bytes_done(p.bytes_done);
  out->set_bytes_total(p.bytes_total);
  out->set_elapsed_ms(p.elapsed_ms);
  out->set_bytes_per_second(p.bytes_per_second);
  writer->Write(ev);
}

phos::Status StreamUntilDone(std::future<phos::Status>& done, const engine::Progress& progress,
                             grpc::ServerWriter<v1::OperationEvent>* writer, const std::function<void()>& on_wake) {
  std::uint64_t seen = 0;
  for (;;) {
    const bool ready = done.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
    if (on_wake) on_wake();
    engine::ProgressSnapshot snap = progress.Snapshot();
    if (snap.version != seen) {
      seen = snap.version;
      WriteProgress(writer, snap);
    }
    if (ready) return done.get();
    // Wakes at each progress update; at most 50 ms between checks of done.
    progress.WaitForChange(seen, std::chrono::milliseconds(50));
  }
}

grpc::Status FailOperation(grpc::ServerWriter<v1::OperationEvent>* writer, const std::string& rpc,
                           const phos::Status& s) {
  const grpc::StatusCode code = ToGrpcCode(s);
  spdlog::warn("rpc={} failed: {}", rpc, s.ToString());
  v1::OperationEvent ev;
  ev.mutable_failed()->set_code(static_cast<int32_t>(code));
  ev.mutable_failed()->set_message(s.message());
  writer->Write(ev);
  return grpc::Status(code, s.message());
}

}  // namespace phos::server
