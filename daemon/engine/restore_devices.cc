#include "engine/restore_devices.h"

#include <set>
#include <string>

namespace phos::engine {

Status PlanRestoreDevices(const backend::Backend& backend, const image::v1::SessionHandles& handles,
                          const std::map<int, int>& device_map, RestoreDevices* out) {
  *out = RestoreDevices{};
  std::map<int, int> taken;  // phosd GPU -> the image GPU going there
  auto place = [&](int image_device) -> Status {
    auto mapped = device_map.find(image_device);
    const int device = mapped == device_map.end() ? image_device : mapped->second;
    const std::string from =
        mapped == device_map.end() ? std::string() : " (mapped from the image's GPU " + std::to_string(image_device) + ")";
    if (device < 0 || device >= backend.device_count()) {
      return Status::FailedPrecondition("the image used GPU " + std::to_string(image_device) + "; this phosd has " +
                                        std::to_string(backend.device_count()) + " GPU(s) (GPU " +
                                        std::to_string(device) + from +
                                        " is not one; --device-map OLD=NEW puts it on another); the session is "
                                        "unchanged");
    }
    if (mapped != device_map.end() && device != image_device && image_device < backend.device_count()) {
      // The driver's own checkpoints restore onto a GPU of the same kind only.
      backend::DeviceProperties now, was;
      PHOS_RETURN_IF_ERROR(backend.GetDeviceProperties(device, &now));
      if (backend.GetDeviceProperties(image_device, &was).ok() && was.name != now.name) {
        return Status::FailedPrecondition("--device-map " + std::to_string(image_device) + "=" +
                                          std::to_string(device) + ": GPU " + std::to_string(device) + " is a " +
                                          now.name + ", GPU " + std::to_string(image_device) + " a " + was.name +
                                          "; a restore needs a GPU of the same kind");
      }
    }
    if (auto t = taken.find(device); t != taken.end()) {
      return Status::FailedPrecondition("the image's GPUs " + std::to_string(t->second) + " and " +
                                        std::to_string(image_device) + " would both go to GPU " +
                                        std::to_string(device) + "; each GPU of the process needs a GPU of its own "
                                        "(--device-map OLD=NEW,...)");
    }
    taken[device] = image_device;
    out->to[image_device] = device;
    return Status::Ok();
  };
  PHOS_RETURN_IF_ERROR(place(handles.device()));
  out->home = out->to.at(handles.device());
  for (int d : handles.other_devices()) PHOS_RETURN_IF_ERROR(place(d));
  for (const auto& [from, to] : device_map) {
    if (!out->to.count(from)) out->unused[from] = to;
  }
  return Status::Ok();
}

std::map<int, int> RestoredAliases(const image::v1::SessionHandles& handles, const RestoreDevices& plan) {
  std::map<int, int> was;  // app ordinal -> the image's phosd ordinal
  for (const auto& a : handles.device_aliases()) was[a.app()] = a.phosd();
  std::map<int, int> out;
  auto add = [&](int app) {
    auto w = was.find(app);
    const int now = plan.Of(w == was.end() ? app : w->second);
    if (now != app) out[app] = now;
  };
  for (const auto& [app, phosd] : was) add(app);
  std::set<int> aliased;  // phosd GPUs some app ordinal already means
  for (const auto& [app, phosd] : was) aliased.insert(phosd);
  for (const auto* placed : {&plan.to, &plan.unused}) {
    for (const auto& [image_device, device] : *placed) {
      if (!was.count(image_device) && !aliased.count(image_device)) add(image_device);
    }
  }
  return out;
}

}  // namespace phos::engine
