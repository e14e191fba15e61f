#include "server/base/piped_child.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

// Everything the child writes to its stdout until it exits; then reaps it.
std::string ReadAllAndReap(const PipedChild& c, int* status) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(c.from, buf, sizeof(buf))) > 0;) out.append(buf, n);
  ::close(c.from);
  ::waitpid(c.pid, status, 0);
  return out;
}

TEST(PipedChildTest, StdinAndStdoutArePipesToTheParent) {
  PipedChildOptions o;
  o.program = "/bin/cat";
  ASSERT_OK_AND_ASSIGN(PipedChild c, StartPipedChild(o));
  ASSERT_EQ(::write(c.to, "hello", 5), 5);
  ::close(c.to);  // end of file: cat exits
  int status = 0;
  EXPECT_EQ(ReadAllAndReap(c, &status), "hello");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(PipedChildTest, ArgsEnvironmentAndProcessGroup) {
  const std::vector<std::string> env = {"KTUNE_PIPED_TEST=seen"};
  PipedChildOptions o;
  o.program = "/bin/sh";
  o.args = {"-c", "echo \"$1 $KTUNE_PIPED_TEST $(cut -d ' ' -f5 /proc/$$/stat) $$\"", "sh",
            "first"};
  o.env = &env;
  o.own_process_group = true;
  ASSERT_OK_AND_ASSIGN(PipedChild c, StartPipedChild(o));
  ::close(c.to);
  int status = 0;
  const std::string out = ReadAllAndReap(c, &status);
  // "first seen PGID PID", with PGID == PID.
  std::vector<std::string> words;
  for (size_t i = 0, j; i < out.size(); i = j + 1) {
    j = out.find_first_of(" \n", i);
    if (j == std::string::npos) j = out.size();
    if (j > i) words.push_back(out.substr(i, j - i));
  }
  ASSERT_EQ(words.size(), 4u) << out;
  EXPECT_EQ(words[0], "first");
  EXPECT_EQ(words[1], "seen");
  EXPECT_EQ(words[2], words[3]);
}

TEST(PipedChildTest, AMissingProgramIsNotFoundAndNamed) {
  PipedChildOptions o;
  o.program = "/no/such/program";
  EXPECT_THAT(StartPipedChild(o), StatusIs(absl::StatusCode::kNotFound,
                                           HasSubstr("starting /no/such/program")));
}

}  // namespace
}  // namespace ktune
