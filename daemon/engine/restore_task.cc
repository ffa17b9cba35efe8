#include "engine/restore_task.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <vector>

#include "common/hex.h"
#include "engine/chunk_loader.h"

namespace phos::engine {

namespace {
using Clock = std::chrono::steady_clock;

bool Overlaps(std::uint64_t a, std::uint64_t an, std::uint64_t b, std::uint64_t bn) {
  return a < b + bn && b < a + an;
}

using RangeMap = std::map<std::uint64_t, std::uint64_t>;

}  // namespace

RangeMap RestoreTask::ImageReservedRanges() const {
  RangeMap m;
  for (const auto& r : snap_.reserved_ranges) m[r.address] = r.bytes;
  return m;
}

bool RestoreTask::Kept(const session::SessionState& st, const RangeMap& image_buffers, const RangeMap& image_reserved,
                       std::uint64_t address, std::uint64_t bytes) const {
  auto in_image = image_buffers.find(address);
  auto in_session = st.buffers.find(address);
  if (in_image == image_buffers.end() || in_image->second != bytes || in_session == st.buffers.end() ||
      in_session->second != bytes || ImageDeviceOf(st, address) != session::DeviceOfBuffer(st, address)) {
    return false;
  }
  // A mapping of a reserved range stays only if its range stays too.
  return session::HoldingRange(st.reserved_ranges, address, bytes) ==
         session::HoldingRange(image_reserved, address, bytes);
}

Status RestoreTask::Prepare(const std::string& dir, bool verify_all) {
  result_.dir = dir;
  progress_->SetPhase("open", "reading " + dir + "/manifest");
  // Reads in flight while a chunk is verified and another copied to the
  // device (ChunkLoader).
  image::ImageReaderOptions ro;
  ro.io.queue_depth = kReadQueueDepth;
  PHOS_RETURN_IF_ERROR(image::ImageReader::Open(dir, ro, &reader_));
  const auto& m = reader_->manifest();
  result_.source_pid = static_cast<std::uint64_t>(m.pid());
  if (!m.has_session()) {
    return Status::Corruption(dir + " has no session index in its manifest: it was not written by a phos "
                              "checkpoint and cannot be restored into a session");
  }
  PHOS_RETURN_IF_ERROR(DecodeSnapshot(m.session(), &snap_).WithContext(dir + "/manifest"));
  if (m.first_use_order_size() > 0) snap_.first_use.assign(m.first_use_order().begin(), m.first_use_order().end());
  // The extents and the metadata must describe the same ranges.
  std::set<std::pair<std::uint64_t, std::uint64_t>> listed;
  for (const auto& b : snap_.buffers) listed.insert({b.address, b.bytes});
  for (const auto& g : snap_.globals) listed.insert({g.address, g.bytes});
  if (listed.size() != static_cast<std::size_t>(m.buffers_size())) {
    return Status::Corruption(dir + ": the manifest lists " + std::to_string(m.buffers_size()) +
                              " extents but its session metadata " + std::to_string(listed.size()));
  }
  std::uint64_t total = 0;
  for (const auto& e : m.buffers()) {
    if (!listed.count({e.device_address(), e.bytes()})) {
      return Status::Corruption(dir + ": extent " + Hex(e.device_address()) +
                                " is not in the image's session metadata");
    }
    total += e.bytes();
  }
  for (int i = 0; i < m.buffers_size(); ++i) extent_by_address_[m.buffers(i).device_address()] = static_cast<std::size_t>(i);
  PHOS_RETURN_IF_ERROR(ReadImageDevices(m, snap_, &image_devices_).WithContext(dir + "/manifest"));
  result_.bytes = total;
  result_.buffers = static_cast<std::uint32_t>(snap_.buffers.size());
  result_.globals = static_cast<std::uint32_t>(snap_.globals.size());
  if (!verify_all) {
    spdlog::debug("restore: {} was verified by the caller; each chunk is verified as it loads", dir);
    return Status::Ok();
  }
  // Every checksum before anything touches the session.
  progress_->SetPhase("verify", "verifying every chunk of " + dir + "/gpu.img", total);
  std::uint64_t reported = 0;
  PHOS_RETURN_IF_ERROR(reader_->VerifyAll([&](std::uint64_t done, std::uint64_t) {
    progress_->AddBytes(done - reported);
    reported = done;
  }));
  return Status::Ok();
}

Status RestoreTask::CheckFits(const session::SessionState& st) const {
  for (const auto& g : snap_.globals) {
    auto it = st.globals.find(g.address);
    if (it == st.globals.end() || it->second != g.bytes) {
      return Status::FailedPrecondition(
          "the image holds module global " + Hex(g.address) + " (" + std::to_string(g.bytes) +
          " bytes) that this session has not loaded at that address; restore into the process the image "
          "was taken from (same program, same modules)");
    }
  }
  // Buffers that stay: in the session and in the image with the same size
  // (and the same reserved range, if any: Kept).
  std::map<std::uint64_t, std::uint64_t> image_buffers;
  for (const auto& b : snap_.buffers) image_buffers[b.address] = b.bytes;
  const RangeMap image_reserved = ImageReservedRanges();
  for (const auto& r : snap_.reserved_ranges) {
    auto same = st.reserved_ranges.find(r.address);
    if (same != st.reserved_ranges.end() && same->second == r.bytes) continue;  // kept
    for (const auto& [ga, gn] : st.globals) {
      if (Overlaps(r.address, r.bytes, ga, gn)) {
        return Status::FailedPrecondition("cannot reserve the image's address range " + Hex(r.address) +
                                          ": module global " + Hex(ga) + " occupies part of it");
      }
    }
    for (const auto& [ka, kn] : st.buffers) {
      if (Kept(st, image_buffers, image_reserved, ka, kn) && Overlaps(r.address, r.bytes, ka, kn)) {
        return Status::FailedPrecondition("cannot reserve the image's address range " + Hex(r.address) +
                                          ": buffer " + Hex(ka) + " of the session occupies part of it");
      }
    }
  }
  for (const auto& b : snap_.buffers) {
    if (Kept(st, image_buffers, image_reserved, b.address, b.bytes)) continue;
    for (const auto& [ga, gn] : st.globals) {
      if (Overlaps(b.address, b.bytes, ga, gn)) {
        return Status::FailedPrecondition("cannot map buffer " + Hex(b.address) + " of the image: module global " +
                                          Hex(ga) + " occupies that range");
      }
    }
    for (const auto& [ka, kn] : st.buffers) {
      if (Kept(st, image_buffers, image_reserved, ka, kn) && Overlaps(b.address, b.bytes, ka, kn)) {
        return Status::FailedPrecondition("cannot map buffer " + Hex(b.address) + " of the image: buffer " +
                                          Hex(ka) + " of the session occupies that range");
      }
    }
  }
  return Status::Ok();
}

Status RestoreTask::Undefined(const Status& s) {
  return s.WithContext("restore failed part-way; the session's device state is undefined (restore a good "
                       "image again or restart the app)");
}

int RestoreTask::ImageDeviceOf(const session::SessionState& st, std::uint64_t address) const {
  auto it = image_devices_.ranges.find(address);
  return it == image_devices_.ranges.end() ? st.device : it->second;
}

Status RestoreTask::MatchDevices(session::SessionState& st) const {
  if (!session::UsesSeveralDevices(st) && image_devices_.others.empty()) return Status::Ok();
  // The image names phosd's GPUs of the process it was taken from; rolled
  // back in place, each range goes back to its GPU in this session.
  if (image_devices_.home >= 0 && image_devices_.home != st.device) {
    return Status::FailedPrecondition("the image's process had its home on GPU " +
                                      std::to_string(image_devices_.home) + ", this session on GPU " +
                                      std::to_string(st.device) +
                                      "; restore the whole process from a process image (--device-map) instead");
  }
  for (int d : image_devices_.others) {
    PHOS_RETURN_IF_ERROR(session::AddDeviceContext(st, d).WithContext("the image's process used GPU " +
                                                                      std::to_string(d)));
  }
  return Status::Ok();
}

Status RestoreTask::MapBuffers(session::SessionState& st) {
  if (!reader_) return Status::FailedPrecondition("restore: Prepare() was not called");
  progress_->SetPhase("quiesce", "waiting for the session's GPU work to finish");
  PHOS_RETURN_IF_ERROR(QuiesceAllDevices(st, "restore refused, the session is unchanged"));
  if (Status s = CheckFits(st); !s.ok()) return s.WithContext("restore refused, the session is unchanged");
  if (Status s = MatchDevices(st); !s.ok()) return s.WithContext("restore refused, the session is unchanged");
  session::ReapRetained(st, true);

  // From here on the session changes.
  std::map<std::uint64_t, std::uint64_t> image_buffers;
  for (const auto& b : snap_.buffers) image_buffers[b.address] = b.bytes;
  const RangeMap image_reserved = ImageReservedRanges();
  progress_->SetPhase("map", "making the session's buffers match the image");
  for (auto it = st.buffers.begin(); it != st.buffers.end();) {
    if (Kept(st, image_buffers, image_reserved, it->first, it->second)) {
      ++it;
      continue;
    }
    // In its own GPU's context (the home one unless recorded).
    backend::Context* owner = session::ContextOf(st, session::DeviceOfBuffer(st, it->first));
    if (Status s = owner->Free(it->first); !s.ok()) return Undefined(s.WithContext("freeing " + Hex(it->first)));
    st.buffer_devices.erase(it->first);
    it = st.buffers.Erase(it);
    ++result_.freed;
  }
  // Reserved ranges (cuMemAddressReserve): the session's that the image
  // lacks go (their mappings went above), the image's come back at their
  // addresses before the buffers mapped inside them.
  for (auto it = st.reserved_ranges.begin(); it != st.reserved_ranges.end();) {
    auto in_image = image_reserved.find(it->first);
    if (in_image != image_reserved.end() && in_image->second == it->second) {
      ++it;
      continue;
    }
    if (Status s = st.ctx->ReleaseAddressRange(it->first); !s.ok()) {
      return Undefined(s.WithContext("releasing the reserved range " + Hex(it->first)));
    }
    it = st.reserved_ranges.erase(it);
  }
  for (const auto& [addr, bytes] : image_reserved) {
    if (st.reserved_ranges.count(addr)) continue;
    if (Status s = session::ReserveAddressRangeAt(st, addr, bytes); !s.ok()) {
      return Undefined(s.WithContext("reserving " + std::to_string(bytes) + " bytes of address space at " +
                                     Hex(addr) + " (the address may be taken)"));
    }
  }
  for (const auto& [addr, bytes] : image_buffers) {
    if (st.buffers.count(addr)) continue;
    // On the GPU the image has it on (MatchDevices made the contexts).
    if (Status s = session::AllocateBufferAt(st, ImageDeviceOf(st, addr), addr, bytes); !s.ok()) return Undefined(s);
    ++result_.allocated;
  }
  return Status::Ok();
}

Status RestoreTask::LoadExtents(backend::Context* ctx, const std::vector<std::size_t>& extents) {
  if (extents.empty()) return Status::Ok();
  const auto& m = reader_->manifest();
  backend::StreamHandle stream = 0;
  Status s = ctx->CreateStream(0, 0, &stream);
  if (s.ok()) {
    // Stop-the-world: as many reads in flight as the staging buffers allow.
    ChunkLoader loader(*reader_, ctx, stream, [](const std::function<void()>& f) { f(); return true; }, progress_,
                       kReadQueueDepth);
    for (std::size_t i : extents) {
      const auto& e = m.buffers(static_cast<int>(i));
      const std::uint64_t chunks = static_cast<std::uint64_t>(e.chunk_xxh3_size());
      auto moved = relocated_.find(e.device_address());
      const std::uint64_t base = moved == relocated_.end() ? e.device_address() : moved->second;
      std::uint64_t next = 0;
      s = loader.Load(i, base, 0, chunks, {}, &next);
      if (!s.ok()) {
        s = s.WithContext("loading extent " + Hex(e.device_address()));
        break;
      }
    }
    loader.Finish();
  }
  if (stream != 0) {
    Status d = ctx->DestroyStream(stream);
    if (!d.ok()) spdlog::warn("restore: cannot destroy the engine's stream: {}", d.ToString());
  }
  return s;
}

int RestoreTask::SessionDeviceOfExtent(const session::SessionState& st, std::size_t i) const {
  const std::uint64_t image_address = reader_->manifest().buffers(static_cast<int>(i)).device_address();
  auto moved = relocated_.find(image_address);
  const std::uint64_t at = moved == relocated_.end() ? image_address : moved->second;
  if (auto g = st.global_symbols.find(at); g != st.global_symbols.end()) return g->second.device;
  return session::DeviceOfBuffer(st, at);
}

Status RestoreTask::LoadExtentsOnTheirDevices(session::SessionState& st, const std::vector<std::size_t>& extents) {
  // Each extent in its GPU's context (all in the home one for a process
  // of one GPU).
  std::map<int, std::vector<std::size_t>> by_device;
  for (std::size_t i : extents) by_device[SessionDeviceOfExtent(st, i)].push_back(i);
  for (const auto& [device, on_device] : by_device) {
    backend::Context* ctx = session::ContextOf(st, device);
    if (ctx == nullptr) return Status::Internal("no context of the session on GPU " + std::to_string(device));
    PHOS_RETURN_IF_ERROR(LoadExtents(ctx, on_device));
    PHOS_RETURN_IF_ERROR(ctx->Synchronize());
  }
  return Status::Ok();
}

Status RestoreTask::Apply(session::SessionState& st) {
  const auto t0 = Clock::now();
  auto stall = [&] {
    result_.stall_us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  };
  if (Status s = MapBuffers(st); !s.ok()) {
    stall();
    return s;
  }
  std::vector<std::size_t> all(static_cast<std::size_t>(reader_->manifest().buffers_size()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  progress_->SetPhase("copy", "copying the image to the device", result_.bytes);
  Status s = LoadExtentsOnTheirDevices(st, all);
  stall();
  return s.ok() ? s : Undefined(s);
}

}  // namespace phos::engine
