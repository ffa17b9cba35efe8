// Host-memory tier: budget, LRU eviction, host-only images, rot detection.
#include <algorithm>

#include <gtest/gtest.h>

#include "image/host_tier.h"
#include "image/image_layout.h"
#include "image/image_writer.h"
#include "image_test_util.h"

namespace phos::image {
namespace {

std::shared_ptr<HostImage> Image(std::size_t bytes, std::uint32_t seed) {
  auto img = std::make_shared<HostImage>();
  img->buffers.push_back(testing::RandomBytes(bytes, seed));
  v1::BufferExtent* e = img->manifest.add_buffers();
  e->set_bytes(bytes);
  e->set_chunk_bytes(4096);
  for (std::size_t off = 0; off < bytes; off += 4096) {
    e->add_chunk_xxh3(Xxh3(img->buffers[0].data() + off, std::min<std::size_t>(4096, bytes - off)));
  }
  return img;
}

TEST(HostTier, BudgetAndLruEviction) {
  const std::uint64_t mib = 1 << 20;
  HostTier tier(3 * mib + 16384);  // three 1 MiB images and their manifests
  ASSERT_TRUE(tier.Put("a", Image(mib, 1)).ok());
  ASSERT_TRUE(tier.Put("b", Image(mib, 2)).ok());
  ASSERT_TRUE(tier.Put("c", Image(mib, 3)).ok());
  EXPECT_EQ(tier.Names(), (std::vector<std::string>{"c", "b", "a"}));
  ASSERT_NE(tier.Get("a"), nullptr);  // a is now most recently used
  std::vector<std::string> evicted;
  ASSERT_TRUE(tier.Put("d", Image(mib, 4), &evicted).ok());
  EXPECT_EQ(evicted, (std::vector<std::string>{"b"}));
  EXPECT_EQ(tier.Get("b"), nullptr);
  EXPECT_NE(tier.Get("a"), nullptr);
  EXPECT_LE(tier.used_bytes(), tier.budget_bytes());
  // Two evictions for a 2 MiB image.
  evicted.clear();
  ASSERT_TRUE(tier.Put("big", Image(2 * mib, 5), &evicted).ok());
  EXPECT_EQ(evicted.size(), 2u);
  EXPECT_LE(tier.used_bytes(), tier.budget_bytes());
}

TEST(HostTier, TooLargeIsRefusedWithoutEvicting) {
  HostTier tier(1 << 20);
  ASSERT_TRUE(tier.Put("a", Image(1000, 1)).ok());
  Status s = tier.Put("huge", Image(2 << 20, 2));
  EXPECT_EQ(s.code(), Status::Code::kOutOfMemory);
  EXPECT_NE(tier.Get("a"), nullptr);
}

TEST(HostTier, ReplaceAndErase) {
  HostTier tier(1 << 20);
  ASSERT_TRUE(tier.Put("a", Image(1000, 1)).ok());
  const std::uint64_t used = tier.used_bytes();
  ASSERT_TRUE(tier.Put("a", Image(1000, 2)).ok());
  EXPECT_EQ(tier.used_bytes(), used);
  EXPECT_TRUE(tier.Erase("a"));
  EXPECT_FALSE(tier.Erase("a"));
  EXPECT_EQ(tier.used_bytes(), 0u);
}

TEST(HostTier, EvictedImageStaysValidForItsHolder) {
  HostTier tier(1 << 20);
  ASSERT_TRUE(tier.Put("a", Image(600000, 1)).ok());
  auto held = tier.Get("a");
  ASSERT_TRUE(tier.Put("b", Image(600000, 2)).ok());  // evicts a
  EXPECT_EQ(tier.Get("a"), nullptr);
  std::vector<std::uint8_t> out(600000);
  EXPECT_TRUE(held->ReadBuffer(0, out.data()).ok());
}

TEST(HostTier, DetectsRot) {
  auto img = Image(10000, 1);
  img->buffers[0][5000] ^= 1;
  std::vector<std::uint8_t> out(10000);
  Status s = img->ReadBuffer(0, out.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("chunk 1"), std::string::npos) << s.message();
}

TEST(HostTier, WriterHostOnly) {
  HostTier tier(16 << 20);
  ImageWriterOptions o;
  o.chunk_bytes = 4096;
  o.write_files = false;
  o.host_tier = &tier;
  o.host_tier_name = "template-a";
  auto buffers = testing::MakeBuffers({1, 4097, 65536}, 9);
  ASSERT_TRUE(testing::WriteImage("template-a", buffers, o).ok());
  EXPECT_FALSE(std::filesystem::exists("template-a"));
  auto img = tier.Get("template-a");
  ASSERT_NE(img, nullptr);
  ASSERT_EQ(img->manifest.buffers_size(), 3);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(img->manifest.buffers(static_cast<int>(i)).device_address(), buffers[i].addr);
    std::vector<std::uint8_t> out(buffers[i].data.size());
    ASSERT_TRUE(img->ReadBuffer(i, out.data()).ok());
    EXPECT_EQ(out, buffers[i].data);
  }
}

}  // namespace
}  // namespace phos::image
