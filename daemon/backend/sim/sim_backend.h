// The sim Backend: N modelled H100s sharing one reserved device address
// range (docs/backends.md). CreateSimBackend (backend_factory.h) makes one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/sim/sim_shared.h"

namespace phos::backend::sim {

/// The properties of one modelled device (an H100 SXM; the name says
/// "phos sim").
DeviceProperties ModelDeviceProperties(const SimOptions& options, int ordinal);

class SimBackend final : public Backend {
 public:
  explicit SimBackend(std::shared_ptr<SimShared> shared);

  std::string name() const override { return "sim"; }
  std::string detail() const override;
  int device_count() const override { return shared_->options.device_count; }
  Status GetDeviceProperties(int device, DeviceProperties* out) const override;
  Status GetDeviceAttribute(int device, int attribute, std::int64_t* out) const override;
  bool MapsHostMemoryForKernels() const override { return true; }
  bool ImplementsConditionalHandles() const override { return true; }  // interp: ExecGraphSetConditional
  Status GetMemoryInfo(int device, std::uint64_t* free_bytes,
                       std::uint64_t* total_bytes) const override;
  Status CreateContext(int device, std::unique_ptr<Context>* out) override;
  Status DeliverCollective(const FabricMessage& message) override { return shared_->comms.Deliver(message); }
  void PeerLost(const std::string& endpoint, const std::string& why) override {
    shared_->comms.PeerLost(endpoint, why);
  }

 private:
  Status CheckDevice(int device) const;

  // Immutable after construction; the pointee is shared with every context.
  const std::shared_ptr<SimShared> shared_;
};

}  // namespace phos::backend::sim
