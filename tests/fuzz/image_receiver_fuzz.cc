// libFuzzer target for the destination's laying out of a migrated image
// around its pre-copy (daemon/image/image_receiver.h, PlaceExtent): a
// source on the network chooses the pre-copied copies, the gpu.img stream
// (references into those copies and streamed bytes, in any mix) and the
// manifest whose extents say which buffer is where. Since dirtiness is per
// chunk, one buffer's bytes may arrive in several places and the receiver
// assembles them by copying within the file — no input may crash phosd,
// read or write outside the file, or grow it without bound, and an image
// it commits must have every extent inside its gpu.img.
//
// The input is read in three parts (each value little-endian):
//   copies:   count (1 byte); each: address (1 byte, x 4 KiB), length
//             (1 byte, x 512 + 1 bytes); bytes made from the copy's id;
//             64-byte checksum chunks; then the store is sealed
//   gpu.img:  count (1 byte); each piece: kind (1 byte): even = reference
//             {copy id (1 byte), copy offset (2 bytes), length (2 bytes)},
//             odd = streamed bytes {length - 1 (2 bytes)} of a fixed pattern
//   manifest: count (1 byte); each buffer: device address (1 byte, x 4 KiB),
//             extent offset (1 byte: (v + 1) x 4 KiB), bytes (2 bytes);
//             4 KiB chunks, gpu.img as long as the stream was (a manifest
//             the source's own checks would refuse is refused here too)
// Files under /dev/shm, removed after every input.
#include <xxhash.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "image/file_util.h"
#include "image/image_layout.h"
#include "image/image_receiver.h"
#include "image/manifest_file.h"
#include "image/precopy_store.h"

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  uint64_t Take(size_t k) {  // 0 once the input is used up
    uint64_t v = 0;
    for (size_t i = 0; i < k && n > 0; ++i, ++p, --n) v |= static_cast<uint64_t>(*p) << (8 * i);
    return v;
  }
};

constexpr uint64_t kChunk = 64;
constexpr uint64_t kLimit = 1 << 20;

phos::peer::v1::FileData Data(const std::string& path, uint64_t offset) {
  phos::peer::v1::FileData d;
  d.set_path(path);
  d.set_offset(offset);
  return d;
}

// Runs one input; the root directory is removed by the caller.
void Run(const std::string& root, Input in) {
  std::shared_ptr<phos::image::PrecopyStore> store;
  {
    std::unique_ptr<phos::image::PrecopyStore> owned;
    if (!phos::image::PrecopyStore::Open("img", root + "/precopy/img.tmp", kLimit, &owned).ok()) abort();
    store = std::move(owned);
  }
  const uint64_t copies = in.Take(1) % 8;
  for (uint64_t id = 1; id <= copies; ++id) {
    const uint64_t address = in.Take(1) << 12;
    const uint64_t len = in.Take(1) * 512 + 1;
    std::string bytes(len, static_cast<char>('a' + id));
    phos::peer::v1::PrecopyData d;
    d.set_copy_id(id);
    d.set_address(address);
    d.set_bytes(len);
    d.set_chunk_bytes(kChunk);
    for (uint64_t off = 0; off < len; off += kChunk) {
      d.add_chunk_xxh3(XXH3_64bits(bytes.data() + off, std::min(kChunk, len - off)));
    }
    d.set_data(bytes);
    if (!store->Add(d).ok()) return;
  }
  if (!store->Seal().ok()) return;

  phos::image::ImageReceiverOptions o;
  o.incoming_dir = root + "/incoming";
  o.max_bytes = kLimit;
  o.precopy = store;
  phos::peer::v1::ImageBegin begin;
  begin.set_name("img");
  begin.set_total_bytes(kLimit);
  begin.set_file_count(2);
  begin.set_skip_fsync(true);
  std::unique_ptr<phos::image::ImageReceiver> r;
  if (!phos::image::ImageReceiver::Begin(o, begin, &r).ok()) abort();

  const std::string gpu(phos::image::kGpuImgName);
  uint64_t offset = 0;
  XXH3_state_t* carried = XXH3_createState();
  XXH3_64bits_reset(carried);
  bool ok = true;
  const uint64_t pieces = in.Take(1) % 16;
  for (uint64_t k = 0; k < pieces && ok; ++k) {
    phos::peer::v1::FileData d = Data(gpu, offset);
    if (in.Take(1) % 2 == 0) {
      d.mutable_ref()->set_copy_id(in.Take(1) % 9);
      d.mutable_ref()->set_copy_offset(in.Take(2));
      d.mutable_ref()->set_length(in.Take(2));
      ok = r->Data(d).ok();
      if (ok) offset += d.ref().length();
    } else {
      const std::string bytes(in.Take(2) + 1, 'z');
      d.set_data(bytes);
      ok = r->Data(d).ok();
      if (ok) {
        XXH3_64bits_update(carried, bytes.data(), bytes.size());
        offset += bytes.size();
      }
    }
  }
  const uint64_t xxh = XXH3_64bits_digest(carried);
  XXH3_freeState(carried);
  if (!ok) return;
  if (offset == 0) return;  // no gpu.img: nothing to lay out
  phos::peer::v1::FileEnd end;
  end.set_path(gpu);
  end.set_size(offset);
  end.set_xxh3(xxh);
  if (!r->FileEnd(end).ok()) return;

  phos::image::v1::Manifest m;
  m.set_format_version(phos::image::kImageFormatVersion);
  m.set_gpu_img_bytes(offset);
  const uint64_t buffers = in.Take(1) % 8;
  for (uint64_t k = 0; k < buffers; ++k) {
    auto* b = m.add_buffers();
    b->set_device_address(in.Take(1) << 12);
    b->set_extent_offset((in.Take(1) + 1) << 12);
    b->set_bytes(in.Take(2));
    b->set_chunk_bytes(4096);
    for (uint64_t c = 0; c * 4096 < b->bytes(); ++c) b->add_chunk_xxh3(c);
  }
  std::string encoded;
  if (!phos::image::EncodeManifestFile(m, &encoded).ok()) abort();
  phos::peer::v1::FileData md = Data(std::string(phos::image::kManifestName), 0);
  md.set_data(encoded);
  if (!r->Data(md).ok()) return;
  end.set_path(std::string(phos::image::kManifestName));
  end.set_size(encoded.size());
  end.set_xxh3(XXH3_64bits(encoded.data(), encoded.size()));
  if (!r->FileEnd(end).ok()) return;
  phos::peer::v1::ImageEnd done;
  done.set_file_count(2);
  done.set_total_bytes(r->bytes());
  phos::peer::v1::ReceiveImageReply reply;
  if (!r->End(done, &reply).ok()) return;

  // Committed: every extent lies inside gpu.img, whose size the manifest
  // states.
  std::string bytes;
  if (!phos::image::ReadSmallFile(o.incoming_dir + "/img/" + std::string(phos::image::kManifestName), 64ull << 20,
                                  &bytes)
           .ok()) {
    abort();
  }
  phos::image::v1::Manifest laid;
  if (!phos::image::DecodeManifestFile(
           std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), &laid)
           .ok()) {
    abort();
  }
  struct stat st {};
  if (stat((o.incoming_dir + "/img/" + gpu).c_str(), &st) != 0) abort();
  if (static_cast<uint64_t>(st.st_size) != laid.gpu_img_bytes()) abort();
  for (const auto& b : laid.buffers()) {
    if (b.bytes() > 0 && (b.extent_offset() > laid.gpu_img_bytes() ||
                          b.bytes() > laid.gpu_img_bytes() - b.extent_offset())) {
      abort();
    }
  }
  if (laid.gpu_img_bytes() > 4 * kLimit + 4096) abort();  // copies + streamed + assembled, each bounded
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = "/dev/shm/phos-receiver-fuzz-" + std::to_string(getpid());
  (void)phos::image::RemoveTree(root);
  mkdir(root.c_str(), 0700);
  Run(root, Input{data, size});
  (void)phos::image::RemoveTree(root);
  return 0;
}
