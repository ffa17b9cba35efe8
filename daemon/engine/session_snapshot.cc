#include "engine/session_snapshot.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace phos::engine {

namespace {

void CaptureObjects(const session::SessionState& st, SessionObjects* o) {
  for (const auto& [id, image] : st.module_images) o->modules.push_back({id, image});
  for (const auto& [id, h] : st.streams) {
    SessionObjects::Stream s{id, 0, 0};
    if (auto f = st.stream_flags.find(id); f != st.stream_flags.end()) {
      s.flags = f->second.flags;
      s.priority = f->second.priority;
    }
    o->streams.push_back(s);
  }
  for (const auto& [id, h] : st.events) {
    auto f = st.event_flags.find(id);
    o->events.push_back({id, f == st.event_flags.end() ? 0u : f->second});
  }
  for (const auto& [id, f] : st.functions) {
    SessionObjects::Function r{id, f.module_id, f.access ? f.access->name : std::string(), {}};
    r.attributes.assign(f.attributes.begin(), f.attributes.end());
    o->functions.push_back(std::move(r));
  }
  for (const auto& [addr, bytes] : st.globals) {
    SessionObjects::Global g{addr, bytes, 0, {}};
    if (auto sym = st.global_symbols.find(addr); sym != st.global_symbols.end()) {
      g.module_id = sym->second.module_id;
      g.name = sym->second.name;
    }
    o->globals.push_back(std::move(g));
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

SessionSnapshot CaptureSnapshot(const session::SessionState& st) {
  SessionSnapshot s;
  for (const auto& [addr, bytes] : st.buffers) s.buffers.push_back({addr, bytes});
  for (const auto& [addr, bytes] : st.globals) s.globals.push_back({addr, bytes});
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

std::string EncodeSnapshot(const SessionSnapshot& s) {
  std::ostringstream o;
  o << "phos-session 1\n";
  char line[96];
  for (const auto& b : s.buffers) {
    std::snprintf(line, sizeof line, "buffer 0x%" PRIx64 " %" PRIu64 "\n", b.address, b.bytes);
    o << line;
  }
  for (const auto& g : s.globals) {
    std::snprintf(line, sizeof line, "global 0x%" PRIx64 " %" PRIu64 "\n", g.address, g.bytes);
    o << line;
  }
  for (auto id : s.streams) o << "stream " << id << "\n";
  for (auto id : s.events) o << "event " << id << "\n";
  for (auto id : s.modules) o << "module " << id << "\n";
  for (const auto& [f, m] : s.functions) o << "function " << f << " " << m << "\n";
  for (auto a : s.first_use) {
    std::snprintf(line, sizeof line, "first-use 0x%" PRIx64 "\n", a);
    o << line;
  }
  return o.str();
}

Status DecodeSnapshot(const std::string& text, SessionSnapshot* out) {
  *out = SessionSnapshot{};
  std::istringstream in(text);
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    auto bad = [&] { return Status::Corruption("session metadata line " + std::to_string(n) + " is malformed: '" + line + "'"); };
    if (!header) {
      int version = 0;
      if (kind != "phos-session" || !(ls >> version)) return bad();
      if (version != 1) {
        return Status::FailedPrecondition("session metadata version " + std::to_string(version) +
                                          " is newer than this phosd understands (1)");
      }
      header = true;
      continue;
    }
    if (kind == "buffer" || kind == "global") {
      std::string addr;
      std::uint64_t bytes = 0;
      if (!(ls >> addr >> bytes)) return bad();
      DeviceRange r;
      try {
        r.address = std::stoull(addr, nullptr, 0);
      } catch (...) {
        return bad();
      }
      r.bytes = bytes;
      (kind == "buffer" ? out->buffers : out->globals).push_back(r);
    } else if (kind == "stream" || kind == "event" || kind == "module") {
      std::uint32_t id = 0;
      if (!(ls >> id)) return bad();
      (kind == "stream" ? out->streams : kind == "event" ? out->events : out->modules).push_back(id);
    } else if (kind == "first-use") {
      std::string addr;
      if (!(ls >> addr)) return bad();
      try {
        out->first_use.push_back(std::stoull(addr, nullptr, 0));
      } catch (...) {
        return bad();
      }
    } else if (kind == "function") {
      std::uint32_t f = 0, m = 0;
      if (!(ls >> f >> m)) return bad();
      out->functions.emplace_back(f, m);
    }
    // Unknown kinds: written by a newer phosd; skipped.
  }
  if (!header) return Status::Corruption("session metadata is missing (no 'phos-session' header)");
  return Status::Ok();
}

}  // namespace phos::engine
