// session::BufferMap: the map, its byte total and the republish flag move
// together whatever changes the map (the handlers, restores, teardown).
#include "session/buffer_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>

namespace phos::session {
namespace {

std::uint64_t SumOf(const std::map<std::uint64_t, std::uint64_t>& m) {  // read as the map it is
  std::uint64_t s = 0;
  for (const auto& [a, b] : m) s += b;
  return s;
}

TEST(BufferMap, TotalAndChangeFlagFollowEveryChange) {
  BufferMap m;
  EXPECT_FALSE(m.TakeChanged());
  m.Add(0x1000, 100);
  m.Add(0x2000, 50);
  EXPECT_EQ(m.bytes(), 150u);
  EXPECT_TRUE(m.TakeChanged());
  EXPECT_FALSE(m.TakeChanged()) << "the flag is taken once";
  m.Add(0x1000, 30);  // re-recorded at the same address: replaces
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.bytes(), 80u);
  EXPECT_EQ(m.bytes(), SumOf(m));
  EXPECT_TRUE(m.TakeChanged());
  auto next = m.Erase(m.find(0x1000));
  EXPECT_EQ(next, m.find(0x2000));
  EXPECT_EQ(m.bytes(), 50u);
  EXPECT_TRUE(m.TakeChanged());
  EXPECT_EQ(m.lower_bound(0x1800)->first, 0x2000u);
  m.Clear();
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.bytes(), 0u);
  EXPECT_TRUE(m.TakeChanged());
}

}  // namespace
}  // namespace phos::session
