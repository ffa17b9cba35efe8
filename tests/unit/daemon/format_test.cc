#include "cli/format.h"

#include <gtest/gtest.h>

namespace phos::cli {
namespace {

TEST(FormatTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(80ull << 30), "80.0 GiB");
}

TEST(FormatTest, HumanDuration) {
  EXPECT_EQ(HumanDuration(999), "0s");
  EXPECT_EQ(HumanDuration(61000), "1m 1s");
  EXPECT_EQ(HumanDuration(93784000), "1d 2h 3m 4s");
}

TEST(FormatTest, TableAlignsColumns) {
  std::string t = FormatTable({"A", "BB"}, {{"xxx", "y"}, {"z", "wwww"}});
  EXPECT_EQ(t, "A    BB\nxxx  y\nz    wwww\n");
}

}  // namespace
}  // namespace phos::cli
