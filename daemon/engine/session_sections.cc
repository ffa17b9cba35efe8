#include "engine/session_sections.h"

#include <spdlog/spdlog.h>

#include <map>
#include <set>
#include <string>

#include "common/hex.h"

namespace phos::engine {

void EncodeTextureObject(std::uint64_t handle, const session::SessionState::TextureObject& obj,
                         image::v1::TextureObjectRecord* r) {
  const wire::TextureDesc& d = obj.desc;
  r->set_handle(handle);
  r->set_surface(obj.surface);
  r->set_base(d.base);
  r->set_pitch(d.pitch);
  r->set_slice_pitch(d.slice_pitch);
  r->set_width(d.width);
  r->set_height(d.height);
  r->set_depth(d.depth);
  r->set_layers(d.layers);
  r->set_flags(d.flags);
  r->set_dims(d.dims);
  r->set_channels(d.channels);
  r->set_channel_bytes(d.channel_bytes);
  r->set_kind(static_cast<std::uint32_t>(d.kind));
  r->set_resource(static_cast<std::uint32_t>(d.resource));
  for (wire::AddressMode m : d.address) r->add_address_modes(static_cast<std::uint32_t>(m));
  for (float b : d.border) r->add_border(b);
  r->set_mip_levels(d.levels);
  r->set_mip_linear(d.mip_linear != 0);
  r->set_min_mip_level(d.min_level);
  r->set_max_mip_level(d.max_level);
}

Status DecodeTextureObject(const image::v1::TextureObjectRecord& r, wire::TextureDesc* d) {
  auto narrow = [](std::uint32_t v, std::uint32_t max) { return v <= max; };
  if (r.handle() == 0 || r.address_modes_size() != 3 || r.border_size() != 4 || !narrow(r.dims(), 255) ||
      !narrow(r.channels(), 255) || !narrow(r.channel_bytes(), 255) || !narrow(r.kind(), 255) ||
      !narrow(r.resource(), 255) || !narrow(r.mip_levels(), 255) || !narrow(r.min_mip_level(), 255) ||
      !narrow(r.max_mip_level(), 255)) {
    return Status::Corruption("texture object record " + std::to_string(r.handle()) + " is malformed");
  }
  *d = wire::TextureDesc{};
  d->base = r.base();
  d->pitch = r.pitch();
  d->slice_pitch = r.slice_pitch();
  d->width = r.width();
  d->height = r.height();
  d->depth = r.depth();
  d->layers = r.layers();
  d->flags = r.flags();
  d->dims = static_cast<std::uint8_t>(r.dims());
  d->channels = static_cast<std::uint8_t>(r.channels());
  d->channel_bytes = static_cast<std::uint8_t>(r.channel_bytes());
  d->kind = static_cast<wire::ChannelKind>(r.kind());
  d->resource = static_cast<wire::ResourceKind>(r.resource());
  for (int i = 0; i < 3; ++i) {
    if (r.address_modes(i) > 255) return Status::Corruption("texture object record: bad address mode");
    d->address[i] = static_cast<wire::AddressMode>(r.address_modes(i));
  }
  for (int i = 0; i < 4; ++i) d->border[i] = r.border(i);
  d->levels = static_cast<std::uint8_t>(r.mip_levels());
  d->mip_linear = r.mip_linear() ? 1 : 0;
  d->min_level = static_cast<std::uint8_t>(r.min_mip_level());
  d->max_level = static_cast<std::uint8_t>(r.max_mip_level());
  // The session checks the rest (wire::CheckTextureDesc) when it recreates it.
  return Status::Ok();
}

void SetSessionSections(const SessionSnapshot& snap, image::v1::Manifest* manifest) {
  EncodeSnapshot(snap, manifest->mutable_session());
  manifest->clear_first_use_order();
  for (std::uint64_t a : snap.first_use) manifest->add_first_use_order(a);
  const SessionObjects& o = snap.objects;
  image::v1::SessionHandles h;
  h.set_version(1);
  for (const auto& s : o.streams) {
    auto* r = h.add_streams();
    r->set_id(s.id);
    r->set_flags(s.flags);
    r->set_priority(s.priority);
    if (s.device != o.device) r->set_device(s.device);
  }
  for (const auto& e : o.events) {
    auto* r = h.add_events();
    r->set_id(e.id);
    r->set_flags(e.flags);
    if (e.device != o.device) r->set_device(e.device);
  }
  for (const auto& f : o.functions) {
    auto* r = h.add_functions();
    r->set_id(f.id);
    r->set_module_id(f.module_id);
    r->set_name(f.name);
    for (const auto& [attribute, value] : f.attributes) {
      auto* a = r->add_attributes();
      a->set_attribute(attribute);
      a->set_value(value);
    }
  }
  for (const auto& g : o.globals) {
    auto* r = h.add_globals();
    r->set_address(g.address);
    r->set_bytes(g.bytes);
    r->set_module_id(g.module_id);
    r->set_name(g.name);
    r->set_address_private(g.address_private);
    if (g.device != o.device) r->set_device(g.device);
  }
  for (const auto& t : o.textures) EncodeTextureObject(t.handle, t.object, h.add_textures());
  h.set_device_heap(o.device_heap);
  h.set_device(o.device);
  for (int d : o.other_devices) h.add_other_devices(d);
  for (const auto& [address, device] : o.buffer_devices) {
    auto* r = h.add_buffer_devices();
    r->set_address(address);
    r->set_device(device);
  }
  for (const auto& [app, phosd] : o.device_aliases) {
    auto* r = h.add_device_aliases();
    r->set_app(app);
    r->set_phosd(phosd);
  }
  for (const auto& c : o.communicators) {
    auto* r = h.add_communicators();
    r->set_app_id(c.app_id);
    r->set_unique_id(c.unique_id.data(), c.unique_id.size());
    r->set_nranks(c.nranks);
    r->set_rank(c.rank);
  }
  std::uint64_t module_bytes = 0;
  for (const auto& m : o.modules) module_bytes += m.image ? m.image->size() : 0;
  image::v1::SessionModules modules;
  if (module_bytes <= kMaxStoredModuleBytes) {
    for (const auto& m : o.modules) {
      auto* r = modules.add_modules();
      r->set_id(m.id);
      if (m.image) r->set_image(m.image->data(), m.image->size());
    }
    h.set_modules_saved(true);
  } else {
    spdlog::warn("checkpoint: the session's {} module images ({} bytes) are too large for the manifest "
                 "(limit {}); the image restores in place only, not into a fresh session",
                 o.modules.size(), module_bytes, kMaxStoredModuleBytes);
  }
  manifest->set_streams(h.SerializeAsString());
  manifest->set_modules(h.modules_saved() ? modules.SerializeAsString() : std::string());
}

namespace {

/// The GPUs the records name: ordinals a ring frame can carry (0..255),
/// every object's GPU the home one or one of other_devices, every listed
/// buffer one of the index's.
Status CheckDevices(const image::v1::SessionHandles& h, const SessionSnapshot& snap) {
  auto ordinal = [](int d) { return d >= 0 && d <= 255; };
  if (!ordinal(h.device())) return Status::Corruption("the session's GPU " + std::to_string(h.device()) + " is no GPU");
  std::set<int> devices{h.device()};
  int last = -1;
  for (int d : h.other_devices()) {
    if (!ordinal(d) || d <= last || d == h.device()) {
      return Status::Corruption("other GPU " + std::to_string(d) + " of the session is no GPU, repeated or unsorted");
    }
    last = d;
    devices.insert(d);
  }
  auto known = [&](const auto& r, const std::string& what) -> Status {
    if (r.has_device() && !devices.count(r.device())) {
      return Status::Corruption(what + " is on GPU " + std::to_string(r.device()) + ", which the session did not use");
    }
    return Status::Ok();
  };
  for (const auto& s : h.streams()) PHOS_RETURN_IF_ERROR(known(s, "stream " + std::to_string(s.id())));
  for (const auto& e : h.events()) PHOS_RETURN_IF_ERROR(known(e, "event " + std::to_string(e.id())));
  for (const auto& g : h.globals()) PHOS_RETURN_IF_ERROR(known(g, "global " + Hex(g.address())));
  std::set<std::uint64_t> buffers;
  for (const auto& b : snap.buffers) buffers.insert(b.address);
  std::uint64_t previous = 0;
  for (const auto& b : h.buffer_devices()) {
    if (!buffers.count(b.address()) || (previous != 0 && b.address() <= previous)) {
      return Status::Corruption("the GPU of buffer " + Hex(b.address()) +
                                " is recorded, but it is no buffer of the image, repeated or unsorted");
    }
    previous = b.address();
    if (b.device() == h.device() || !devices.count(b.device())) {
      return Status::Corruption("buffer " + Hex(b.address()) + " is recorded on GPU " + std::to_string(b.device()) +
                                ", not one of the session's other GPUs");
    }
  }
  std::set<int> apps;
  for (const auto& a : h.device_aliases()) {
    if (!ordinal(a.app()) || !ordinal(a.phosd()) || !apps.insert(a.app()).second) {
      return Status::Corruption("GPU alias " + std::to_string(a.app()) + " -> " + std::to_string(a.phosd()) +
                                " is no GPU or repeated");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ReadSessionSections(const image::v1::Manifest& manifest, const SessionSnapshot& snap,
                           image::v1::SessionHandles* handles, image::v1::SessionModules* modules) {
  if (manifest.streams().empty()) {
    return Status::FailedPrecondition("the image has no stream/function/module records (manifest `streams` "
                                      "section; written by an older phosd): it restores in place only");
  }
  if (!handles->ParseFromString(manifest.streams())) {
    return Status::Corruption("the manifest's `streams` section is not a valid SessionHandles");
  }
  if (handles->version() != 1) {
    return Status::FailedPrecondition("session records version " + std::to_string(handles->version()) +
                                      " is newer than this phosd understands (1)");
  }
  if (!handles->modules_saved()) {
    return Status::FailedPrecondition("the image was written without its module images (too large for the "
                                      "manifest): it restores in place only");
  }
  if (!modules->ParseFromString(manifest.modules())) {
    return Status::Corruption("the manifest's `modules` section is not a valid SessionModules");
  }
  // Cross-checks with the handles text: both were written from one snapshot.
  std::set<std::uint32_t> module_ids;
  for (const auto& m : modules->modules()) {
    if (m.id() == 0 || !module_ids.insert(m.id()).second || m.image().empty()) {
      return Status::Corruption("the manifest's `modules` section has a bad or repeated module " +
                                std::to_string(m.id()));
    }
  }
  if (module_ids != std::set<std::uint32_t>(snap.modules.begin(), snap.modules.end())) {
    return Status::Corruption("the manifest's module images do not match the modules in its session metadata");
  }
  std::set<std::pair<std::uint32_t, std::uint32_t>> functions;
  for (const auto& f : handles->functions()) {
    if (!functions.insert({f.id(), f.module_id()}).second || !module_ids.count(f.module_id()) ||
        f.name().empty()) {
      return Status::Corruption("function record " + std::to_string(f.id()) +
                                " is repeated, has no name, or names a module the image lacks");
    }
  }
  if (functions != std::set<std::pair<std::uint32_t, std::uint32_t>>(snap.functions.begin(), snap.functions.end())) {
    return Status::Corruption("the manifest's function records do not match its session metadata");
  }
  std::set<std::uint32_t> ids;
  for (const auto& s : handles->streams()) {
    if (s.id() == 0 || !ids.insert(s.id()).second) return Status::Corruption("bad or repeated stream record");
  }
  if (ids != std::set<std::uint32_t>(snap.streams.begin(), snap.streams.end())) {
    return Status::Corruption("the manifest's stream records do not match its session metadata");
  }
  ids.clear();
  for (const auto& e : handles->events()) {
    if (e.id() == 0 || !ids.insert(e.id()).second) return Status::Corruption("bad or repeated event record");
  }
  if (ids != std::set<std::uint32_t>(snap.events.begin(), snap.events.end())) {
    return Status::Corruption("the manifest's event records do not match its session metadata");
  }
  std::map<std::uint64_t, std::uint64_t> globals;
  for (const auto& g : handles->globals()) {
    if (g.module_id() == 0 || g.name().empty()) {
      return Status::FailedPrecondition("module global " + Hex(g.address()) +
                                        " has no recorded symbol: it cannot be resolved in a fresh session");
    }
    if (!module_ids.count(g.module_id())) {
      return Status::Corruption("global " + Hex(g.address()) + " names module " + std::to_string(g.module_id()) +
                                " the image lacks");
    }
    globals[g.address()] = g.bytes();
  }
  std::map<std::uint64_t, std::uint64_t> listed;
  for (const auto& g : snap.globals) listed[g.address] = g.bytes;
  if (globals != listed) {
    return Status::Corruption("the manifest's global records do not match the globals of its session metadata");
  }
  return CheckDevices(*handles, snap);
}

Status ReadImageDevices(const image::v1::Manifest& manifest, const SessionSnapshot& snap, ImageDevices* out) {
  *out = ImageDevices{};
  if (manifest.streams().empty()) return Status::Ok();  // an image without records: one GPU
  image::v1::SessionHandles handles;
  if (!handles.ParseFromString(manifest.streams())) {
    return Status::Corruption("its session records (streams section) do not parse");
  }
  // The checks a fresh restore makes (every GPU an ordinal, every object's
  // GPU one the session used, every listed buffer one of the image's).
  PHOS_RETURN_IF_ERROR(CheckDevices(handles, snap));
  out->home = handles.device();
  out->others.insert(handles.other_devices().begin(), handles.other_devices().end());
  for (const auto& b : handles.buffer_devices()) out->ranges[b.address()] = b.device();
  std::set<std::uint64_t> globals;
  for (const auto& g : snap.globals) globals.insert(g.address);
  for (const auto& g : handles.globals()) {
    if (!g.has_device() || g.device() == out->home) continue;
    if (!globals.count(g.address())) {
      return Status::Corruption("module variable " + Hex(g.address()) + " is recorded on GPU " +
                                std::to_string(g.device()) + ", but it is no module variable of the image");
    }
    out->ranges[g.address()] = g.device();
  }
  return Status::Ok();
}

}  // namespace phos::engine
