#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace phos {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = Status::NotSupported("cuGraphLaunch");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotSupported);
  EXPECT_EQ(s.ToString(), "NotSupported: cuGraphLaunch");
}

TEST(StatusTest, FromErrnoAppendsStrerror) {
  Status s = Status::FromErrno("open /x", ENOENT);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(s.message(), "open /x: No such file or directory");
}

TEST(StatusTest, WithContextPrefixesErrorsOnly) {
  EXPECT_TRUE(Status::Ok().WithContext("ctx").ok());
  EXPECT_EQ(Status::NotFound("pid 7").WithContext("checkpoint").message(), "checkpoint: pid 7");
}

Status FailsThenNotReached(bool* reached) {
  PHOS_RETURN_IF_ERROR(Status::Internal("boom"));
  *reached = true;
  return Status::Ok();
}

TEST(StatusTest, ReturnIfErrorReturnsEarly) {
  bool reached = false;
  EXPECT_EQ(FailsThenNotReached(&reached).code(), Status::Code::kInternal);
  EXPECT_FALSE(reached);
}

}  // namespace
}  // namespace phos
