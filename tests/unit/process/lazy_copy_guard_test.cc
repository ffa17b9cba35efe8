// LazyCopyGuard (process/lazy_copy_guard.h): a lazily restored process dies
// with its phosd until its memory has arrived, and not after. "phosd" here
// is a forked owner process that starts the guard and then dies without
// releasing it, as phosd would under kill -9.
#include "process/lazy_copy_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace phos::process {
namespace {

using namespace std::chrono_literals;

/// A child that only waits to be killed (the "copy").
pid_t StartCopy() {
  const pid_t pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  return pid;
}

/// Waits (bounded) for child `pid` to end; its wait status, or -1.
int WaitForEnd(pid_t pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < until) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

/// Ends a copy a test left running, and reaps it.
void EndCopy(pid_t pid) {
  kill(pid, SIGKILL);
  (void)WaitForEnd(pid, 10s);
}

TEST(LazyCopyGuardTest, OwnerDyingUnreleasedKillsTheCopy) {
  const pid_t copy = StartCopy();
  ASSERT_GT(copy, 0);
  const pid_t owner = fork();
  if (owner == 0) {
    LazyCopyGuard guard;
    if (!guard.Start(copy).ok()) _exit(3);
    _exit(0);  // "phosd" dies: no destructor, no Release
  }
  ASSERT_GT(owner, 0);
  int owner_status = 0;
  ASSERT_EQ(waitpid(owner, &owner_status, 0), owner);
  ASSERT_TRUE(WIFEXITED(owner_status) && WEXITSTATUS(owner_status) == 0) << "the owner could not start the guard";
  const int status = WaitForEnd(copy, 30s);
  if (status == -1) EndCopy(copy);
  ASSERT_NE(status, -1) << "the copy outlived its owner's death by 30 s";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "wait status " << status;
}

TEST(LazyCopyGuardTest, ReleasedGuardLeavesTheCopyRunning) {
  const pid_t copy = StartCopy();
  ASSERT_GT(copy, 0);
  {
    LazyCopyGuard guard;
    ASSERT_TRUE(guard.Start(copy).ok());
    EXPECT_GT(guard.guard_pid(), 0);
    // The guard's own exit status says it let the copy be.
    EXPECT_TRUE(guard.Release());
    EXPECT_EQ(guard.guard_pid(), 0);
    EXPECT_FALSE(guard.Release()) << "a second Release has no guard to end";
  }
  EXPECT_EQ(waitpid(copy, nullptr, WNOHANG), 0) << "the copy ended although its guard was released";
  EndCopy(copy);
}

TEST(LazyCopyGuardTest, DestructorReleases) {
  const pid_t copy = StartCopy();
  ASSERT_GT(copy, 0);
  pid_t guard_pid = 0;
  {
    LazyCopyGuard guard;
    ASSERT_TRUE(guard.Start(copy).ok());
    guard_pid = guard.guard_pid();
  }
  // Reaped by the destructor: no child of that pid is left to wait for.
  EXPECT_EQ(waitpid(guard_pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_EQ(waitpid(copy, nullptr, WNOHANG), 0) << "the copy ended although its guard was released";
  EndCopy(copy);
}

// The guard keeps nothing of its owner's open files but its own two: a
// pipe's write end the owner held must not stay open in the guard (a
// listening socket held there would outlive phosd).
TEST(LazyCopyGuardTest, GuardHoldsNoneOfItsOwnersFiles) {
  const pid_t copy = StartCopy();
  ASSERT_GT(copy, 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);  // not close-on-exec: only the guard's own cleanup closes it there
  LazyCopyGuard guard;
  ASSERT_TRUE(guard.Start(copy).ok());
  close(fds[1]);
  // End of file only once no process holds the write end: the guard,
  // alive and blocked, must have closed its copy.
  pollfd p{fds[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1) << "the guard still holds its owner's pipe after 30 s";
  char byte;
  EXPECT_EQ(read(fds[0], &byte, 1), 0);
  close(fds[0]);
  EXPECT_TRUE(guard.Release());
  EndCopy(copy);
}

TEST(LazyCopyGuardTest, StartRefusesAPidThatIsGone) {
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  LazyCopyGuard guard;
  const Status s = guard.Start(gone);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find(std::to_string(gone)), std::string::npos) << s.ToString();
  EXPECT_EQ(guard.guard_pid(), 0);
}

}  // namespace
}  // namespace phos::process
