// The INTEGRITY_CHECK answer's building blocks (integrity_check.h): MD2 on
// RFC 1319's test suite, HMAC-MD2 by its definition, the constant answers,
// and that the hashed answer depends on every input. That the CUDA runtime
// accepts it is shown end to end by the statically linked test programs
// (IntegrationTest.StaticRuntime*).
#include "interposer/client/integrity_check.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace phos::client {
namespace {

std::string Hex(const uint8_t* d, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", d[i]);
    s += b;
  }
  return s;
}

std::string Md2Hex(const std::string& text) {
  uint8_t d[16];
  Md2(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), d);
  return Hex(d, 16);
}

TEST(IntegrityCheck, Md2MatchesRfc1319) {
  EXPECT_EQ(Md2Hex(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(Md2Hex("a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(Md2Hex("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(Md2Hex("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(Md2Hex("abcdefghijklmnopqrstuvwxyz"), "4e8ddff3650292ab5a4108c3aa47940b");
  EXPECT_EQ(Md2Hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "da33def2a42df13975352846c30338cd");
  EXPECT_EQ(Md2Hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(IntegrityCheck, HmacMd2IsTheDefinition) {
  uint8_t key[16];
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i * 7 + 3);
  const std::string msg = "the runtime's inputs";
  uint8_t mac[16];
  HmacMd2(key, std::span(reinterpret_cast<const uint8_t*>(msg.data()), msg.size()), mac);
  // MD2((K ^ opad) || MD2((K ^ ipad) || m)), the key being one MD2 block.
  std::vector<uint8_t> inner(16), outer(16);
  for (int i = 0; i < 16; ++i) inner[i] = key[i] ^ 0x36, outer[i] = key[i] ^ 0x5c;
  inner.insert(inner.end(), msg.begin(), msg.end());
  uint8_t h[16];
  Md2(inner, h);
  outer.insert(outer.end(), h, h + 16);
  uint8_t want[16];
  Md2(outer, want);
  EXPECT_EQ(Hex(mac, 16), Hex(want, 16));
}

IntegrityInputs Inputs(uint32_t version) {
  IntegrityInputs in{};
  in.driver_version = 13000;
  in.version = version;
  in.process = 1234;
  in.thread = 0xf79c1000u;
  in.cudart_table = reinterpret_cast<const void*>(0x7ffff6958240ull);
  in.integrity_table = reinterpret_cast<const void*>(0x7ffff6958220ull);
  in.function = reinterpret_cast<const void*>(0x7ffff2aaf4a0ull);
  in.unix_seconds = 0x682b9cee;
  return in;
}

TEST(IntegrityCheck, VersionsEndingIn0And1GetConstants) {
  uint64_t out[2];
  IntegrityAnswer(Inputs(13000), {}, out);
  EXPECT_EQ(out[0], 0x3341181C03CB675Cull);
  EXPECT_EQ(out[1], 0x8ED383AA1F4CD1E8ull);
  IntegrityAnswer(Inputs(13001), {}, out);
  EXPECT_EQ(out[0], 0x1841181C03CB675Cull);
  EXPECT_EQ(out[1], 0x8ED383AA1F4CD1E8ull);
}

TEST(IntegrityCheck, TheHashedAnswerDependsOnEveryInput) {
  const IntegrityDevice dev{{0x9a, 0xfe, 0x2b, 0x8a}, 0, 2, 0};
  uint64_t base[2];
  IntegrityAnswer(Inputs(13002), {&dev, 1}, base);
  uint64_t again[2];
  IntegrityAnswer(Inputs(13002), {&dev, 1}, again);
  EXPECT_EQ(base[0], again[0]);  // deterministic
  EXPECT_EQ(base[1], again[1]);
  const auto differs = [&](const IntegrityInputs& in, const IntegrityDevice& d) {
    uint64_t out[2];
    IntegrityAnswer(in, {&d, 1}, out);
    return out[0] != base[0] || out[1] != base[1];
  };
  IntegrityInputs in = Inputs(13002);
  in.process++;
  EXPECT_TRUE(differs(in, dev));
  in = Inputs(13002);
  in.unix_seconds++;
  EXPECT_TRUE(differs(in, dev));
  in = Inputs(13002);
  in.function = reinterpret_cast<const void*>(0x7ffff2aaf4a8ull);
  EXPECT_TRUE(differs(in, dev));
  IntegrityDevice other = dev;
  other.pci_bus = 3;
  EXPECT_TRUE(differs(Inputs(13002), other));
  uint64_t none[2];
  IntegrityAnswer(Inputs(13002), {}, none);
  EXPECT_TRUE(none[0] != base[0] || none[1] != base[1]);
}

}  // namespace
}  // namespace phos::client
