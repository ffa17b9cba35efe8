// RetryBackoff (common/retry_backoff.h): the pools' shared retry schedule.
#include "common/retry_backoff.h"

#include <gtest/gtest.h>

namespace phos {
namespace {

using namespace std::chrono_literals;
using Clock = RetryBackoff::Clock;

TEST(RetryBackoffTest, DoublesFromInitialUpToMax) {
  RetryBackoff b;
  const Clock::time_point t{};
  EXPECT_FALSE(b.Waiting(t));
  EXPECT_EQ(b.Fail(t, 100ms, 350ms), 1);
  EXPECT_EQ(b.delay(), 100ms);
  EXPECT_EQ(b.retry_at(), t + 100ms);
  EXPECT_EQ(b.Fail(t, 100ms, 350ms), 2);
  EXPECT_EQ(b.delay(), 200ms);
  EXPECT_EQ(b.Fail(t, 100ms, 350ms), 3);
  EXPECT_EQ(b.delay(), 350ms);
  EXPECT_EQ(b.Fail(t, 100ms, 350ms), 4);
  EXPECT_EQ(b.delay(), 350ms);
}

TEST(RetryBackoffTest, WaitsOnlyUntilRetryTime) {
  RetryBackoff b;
  const Clock::time_point t = Clock::now();
  b.Fail(t, 100ms, 1000ms);
  EXPECT_TRUE(b.Waiting(t));
  EXPECT_TRUE(b.Waiting(t + 99ms));
  EXPECT_FALSE(b.Waiting(t + 100ms));
}

TEST(RetryBackoffTest, SuccessStartsOver) {
  RetryBackoff b;
  const Clock::time_point t{};
  b.Fail(t, 100ms, 1000ms);
  b.Fail(t, 100ms, 1000ms);
  EXPECT_EQ(b.Succeed(), 2);
  EXPECT_EQ(b.failures(), 0);
  EXPECT_FALSE(b.Waiting(t));
  EXPECT_EQ(b.Succeed(), 0);
  EXPECT_EQ(b.Fail(t, 100ms, 1000ms), 1);
  EXPECT_EQ(b.delay(), 100ms);
}

}  // namespace
}  // namespace phos
