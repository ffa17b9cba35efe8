// ReadNsPids (daemon/common/proc_nspid.h): the NSpid list of a process in
// our pid namespace, of pid 1 of a new pid namespace (root only: skips
// otherwise), and of a pid that does not exist.
#include "common/proc_nspid.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace phos {
namespace {

// In a container, our own namespace may itself be nested below the host's:
// /proc then shows ids from the namespace of its mount, whose first entry is
// the pid as we see it. These checks hold either way.
TEST(ReadNsPidsTest, OwnProcessHasOneIdItsPid) {
  std::vector<long> ids;
  ASSERT_TRUE(ReadNsPids(getpid(), &ids).ok());
  if (ids.empty()) GTEST_SKIP() << "skipped: this kernel has no NSpid line";
  EXPECT_EQ(ids.front(), getpid());
  EXPECT_EQ(ids.size(), 1u) << "we are in our own /proc's namespace";
}

TEST(ReadNsPidsTest, PidOneOfANewNamespaceHasTwoIds) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child makes the namespace; its own child is pid 1 there.
    close(ready[0]);
    if (unshare(CLONE_NEWPID) != 0) _exit(2);
    const pid_t init = fork();
    if (init == 0) {
      pause();
      _exit(0);
    }
    if (init < 0) _exit(3);
    const int host_pid = init;
    if (write(ready[1], &host_pid, sizeof host_pid) != sizeof host_pid) _exit(4);
    waitpid(init, nullptr, 0);
    _exit(0);
  }
  close(ready[1]);
  int init = 0;
  const bool made = read(ready[0], &init, sizeof init) == sizeof init;
  close(ready[0]);
  if (!made) {
    int st = 0;
    waitpid(child, &st, 0);
    GTEST_SKIP() << "skipped: cannot create a pid namespace here (needs root), child status " << st;
  }
  std::vector<long> ids;
  Status s = ReadNsPids(init, &ids);
  kill(init, SIGKILL);
  int st = 0;
  waitpid(child, &st, 0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  if (ids.empty()) GTEST_SKIP() << "skipped: this kernel has no NSpid line";
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids.front(), init);
  EXPECT_EQ(ids.back(), 1);
}

TEST(ReadNsPidsTest, AMissingPidIsNotFound) {
  const pid_t gone = fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  std::vector<long> ids{7};
  Status s = ReadNsPids(gone, &ids);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("pid " + std::to_string(gone) + " does not exist"), std::string::npos) << s.ToString();
  EXPECT_TRUE(ids.empty());
}

}  // namespace
}  // namespace phos
