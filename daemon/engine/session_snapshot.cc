#include "engine/session_snapshot.h"

#include "common/hex.h"
#include "image.pb.h"

#include <algorithm>
#include <map>
#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace phos::engine {

namespace {

void CaptureObjects(const session::SessionState& st, SessionObjects* o) {
  for (const auto& [id, image] : st.module_images) o->modules.push_back({id, image});
  for (const auto& [id, h] : st.streams) {
    SessionObjects::Stream s{id, 0, 0, st.device};
    if (auto f = st.stream_flags.find(id); f != st.stream_flags.end()) {
      s.flags = f->second.flags;
      s.priority = f->second.priority;
    }
    if (auto d = st.stream_devices.find(id); d != st.stream_devices.end()) s.device = d->second;
    o->streams.push_back(s);
  }
  for (const auto& [id, h] : st.events) {
    auto f = st.event_flags.find(id);
    auto d = st.event_devices.find(id);
    o->events.push_back({id, f == st.event_flags.end() ? 0u : f->second,
                         d == st.event_devices.end() ? st.device : d->second});
  }
  for (const auto& [id, f] : st.functions) {
    SessionObjects::Function r{id, f.module_id, f.access ? f.access->name : std::string(), {}};
    r.attributes.assign(f.attributes.begin(), f.attributes.end());
    o->functions.push_back(std::move(r));
  }
  for (const auto& [addr, bytes] : st.globals) {
    SessionObjects::Global g{addr, bytes, 0, {}, false, st.device};
    if (auto sym = st.global_symbols.find(addr); sym != st.global_symbols.end()) {
      g.module_id = sym->second.module_id;
      g.name = sym->second.name;
      g.address_private = !sym->second.address_to_app;
      g.device = sym->second.device;
    }
    o->globals.push_back(std::move(g));
  }
  for (const auto& [handle, obj] : st.texture_objects) o->textures.push_back({handle, obj});  // std::map: ascending
  o->device_heap = st.device_heap;
  o->device = st.device;
  for (const auto& [device, ctx] : st.other_contexts) o->other_devices.push_back(device);  // std::map: ascending
  o->buffer_devices.insert(st.buffer_devices.begin(), st.buffer_devices.end());
  o->device_aliases = st.device_aliases;
  for (const auto& [id, c] : st.comms) {  // std::map: ascending
    o->communicators.push_back({id, c.unique_id, c.rank->nranks(), c.rank->rank()});
  }
  auto by_id = [](const auto& a, const auto& b) { return a.id < b.id; };
  // Modules in the order the app loaded them (a fresh restore reloads them
  // in this order: backends place module variables by allocation order).
  auto loaded = [&st](std::uint32_t id) {
    auto it = st.module_load_order.find(id);
    return it == st.module_load_order.end() ? UINT64_MAX : it->second;
  };
  std::sort(o->modules.begin(), o->modules.end(),
            [&](const auto& a, const auto& b) { return std::make_pair(loaded(a.id), a.id) < std::make_pair(loaded(b.id), b.id); });
  std::sort(o->streams.begin(), o->streams.end(), by_id);
  std::sort(o->events.begin(), o->events.end(), by_id);
  std::sort(o->functions.begin(), o->functions.end(), by_id);
}

}  // namespace

Status QuiesceAllDevices(session::SessionState& st, const char* refusal) {
  auto sync = [&](int device, backend::Context* ctx) -> Status {
    if (Status s = ctx->Synchronize(); !s.ok()) {
      return Status::FailedPrecondition("the session's context on GPU " + std::to_string(device) +
                                        " has a sticky error (" + s.message() + "); " + refusal);
    }
    return Status::Ok();
  };
  PHOS_RETURN_IF_ERROR(sync(st.device, session::HomeContext(st)));
  for (const auto& [device, ctx] : st.other_contexts) PHOS_RETURN_IF_ERROR(sync(device, ctx));
  return Status::Ok();
}

int SessionObjects::DeviceOf(std::uint64_t address) const {
  if (auto b = buffer_devices.find(address); b != buffer_devices.end()) return b->second;
  auto g = std::lower_bound(globals.begin(), globals.end(), address,
                            [](const Global& x, std::uint64_t a) { return x.address < a; });
  if (g != globals.end() && g->address == address) return g->device;
  return device;
}

SessionSnapshot CaptureSnapshot(const session::SessionState& st) {
  SessionSnapshot s;
  for (const auto& [addr, bytes] : st.buffers) s.buffers.push_back({addr, bytes});
  for (const auto& [addr, bytes] : st.globals) s.globals.push_back({addr, bytes});
  for (const auto& [addr, bytes] : st.reserved_ranges) s.reserved_ranges.push_back({addr, bytes});
  for (const auto& [id, h] : st.streams) s.streams.push_back(id);
  for (const auto& [id, h] : st.events) s.events.push_back(id);
  for (const auto& [id, h] : st.modules) s.modules.push_back(id);
  for (const auto& [id, f] : st.functions) s.functions.emplace_back(id, f.module_id);
  std::sort(s.streams.begin(), s.streams.end());
  std::sort(s.events.begin(), s.events.end());
  std::sort(s.modules.begin(), s.modules.end());
  std::sort(s.functions.begin(), s.functions.end());
  CaptureObjects(st, &s.objects);
  return s;
}

void EncodeSnapshot(const SessionSnapshot& s, image::v1::SessionIndex* out) {
  out->Clear();
  for (const auto& b : s.buffers) {
    auto* r = out->add_buffers();
    r->set_address(b.address);
    r->set_bytes(b.bytes);
  }
  for (const auto& g : s.globals) {
    auto* r = out->add_globals();
    r->set_address(g.address);
    r->set_bytes(g.bytes);
  }
  for (const auto& r : s.reserved_ranges) {
    auto* rr = out->add_reserved_ranges();
    rr->set_address(r.address);
    rr->set_bytes(r.bytes);
  }
  for (auto id : s.streams) out->add_streams(id);
  for (auto id : s.events) out->add_events(id);
  for (auto id : s.modules) out->add_modules(id);
  for (const auto& [f, m] : s.functions) {
    auto* r = out->add_functions();
    r->set_id(f);
    r->set_module_id(m);
  }
}

Status DecodeSnapshot(const image::v1::SessionIndex& index, SessionSnapshot* out) {
  *out = SessionSnapshot{};
  auto ranges = [](const auto& records, const char* what, std::vector<DeviceRange>* to) -> Status {
    for (const auto& r : records) {
      if (r.bytes() == 0 || r.address() + r.bytes() < r.address()) {
        return Status::Corruption(std::string("session index: ") + what + " " + Hex(r.address()) + " has " +
                                  std::to_string(r.bytes()) + " bytes");
      }
      to->push_back({r.address(), r.bytes()});
    }
    return Status::Ok();
  };
  PHOS_RETURN_IF_ERROR(ranges(index.buffers(), "buffer", &out->buffers));
  PHOS_RETURN_IF_ERROR(ranges(index.globals(), "global", &out->globals));
  PHOS_RETURN_IF_ERROR(ranges(index.reserved_ranges(), "reserved range", &out->reserved_ranges));
  // Reserved ranges do not overlap, and each buffer lies wholly inside one
  // or outside all of them (a mapping never straddles a range's edge): a
  // restore reserves first and then maps, so an index breaking this cannot
  // be restored.
  std::map<std::uint64_t, std::uint64_t> reserved;
  for (const auto& r : out->reserved_ranges) {
    auto next = reserved.lower_bound(r.address);
    if ((next != reserved.end() && next->first < r.address + r.bytes) ||
        (next != reserved.begin() && std::prev(next)->first + std::prev(next)->second > r.address)) {
      return Status::Corruption("session index: reserved range " + Hex(r.address) + " overlaps another");
    }
    reserved.emplace(r.address, r.bytes);
  }
  for (const auto& b : out->buffers) {
    auto r = reserved.lower_bound(b.address + b.bytes);  // the first range starting at or past the buffer's end
    if (r == reserved.begin()) continue;
    --r;  // the last range starting before the buffer's end
    const bool overlaps = r->first + r->second > b.address;
    const bool inside = b.address >= r->first && b.bytes <= r->second - (b.address - r->first);
    if (overlaps && !inside) {
      return Status::Corruption("session index: buffer " + Hex(b.address) + " straddles the edge of reserved range " +
                                Hex(r->first));
    }
  }
  out->streams.assign(index.streams().begin(), index.streams().end());
  out->events.assign(index.events().begin(), index.events().end());
  out->modules.assign(index.modules().begin(), index.modules().end());
  for (const auto& f : index.functions()) out->functions.emplace_back(f.id(), f.module_id());
  return Status::Ok();
}

}  // namespace phos::engine
