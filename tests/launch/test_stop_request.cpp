// Note [Preemption]: the first SIGTERM/SIGUSR1 is recorded, not fatal; the second ends the process.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "finetune/launch/stop_request.h"

namespace finetune {
namespace {

TEST(StopRequest, FirstSignalIsRecordedNotFatal) {
  for (const int signal_number : {SIGTERM, SIGUSR1}) {
    StopRequest::install();
    StopRequest::reset_for_testing();
    EXPECT_EQ(StopRequest::signal_received(), 0);
    ASSERT_EQ(::raise(signal_number), 0);
    EXPECT_EQ(StopRequest::signal_received(), signal_number);  // and this process is still here
    EXPECT_STREQ(StopRequest::signal_name(signal_number), signal_number == SIGTERM ? "SIGTERM" : "SIGUSR1");
  }
  StopRequest::reset_for_testing();
  ::signal(SIGTERM, SIG_DFL);  // the rest of the suite runs with the default actions
  ::signal(SIGUSR1, SIG_DFL);
}

TEST(StopRequest, SecondSignalEndsTheProcessAtOnce) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopRequest::reset_for_testing();
    ::raise(SIGTERM);
    if (StopRequest::signal_received() != SIGTERM) ::_exit(3);
    ::raise(SIGUSR1);  // the default action: terminated by SIGUSR1
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGUSR1);
}

}  // namespace
}  // namespace finetune
