// A writer process killed with SIGKILL at arbitrary moments leaves a store whose every
// winner is whole: the file passes SQLite's integrity check, every cubin matches its
// sha256, and every entry's job is done with all of its trials. And a read-only store in
// another process reads while that writer writes.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/store/store.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace ktune::store {
namespace {

using ::ktune::testing::IsOkAndHolds;
using ::testing::SizeIs;
using namespace ::ktune::store::testing;  // fixtures

constexpr int kTrials = 20;  // per winner, committed with it
constexpr size_t kCubinBytes = 20 * 1024;
constexpr int kKeys = 8;  // winners replace each other across these keys

// The child's whole life: commit winners until killed, reporting each commit's count on
// `fd` only after CommitWinner returned. Never returns into the test framework.
[[noreturn]] void CommitForever(const std::string& path, int fd) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenSqliteStore(path);
  if (!store.ok()) {
    std::fprintf(stderr, "child: %s\n", store.status().ToString().c_str());
    _exit(2);
  }
  for (int64_t i = 0;; ++i) {
    const EntryKey key = MakeKey(absl::StrCat("n=", i % kKeys));
    absl::StatusOr<int64_t> job = (*store)->CreateJob(MakeJob(key, kTrials));
    absl::Status s = job.status();
    if (s.ok()) {
      // Every field derives from the job id, so the parent can tell a mixed-up entry.
      s = (*store)
              ->CommitWinner(MakeEntry(key, *job, *job, kCubinBytes), MakeTrials(*job, kTrials))
              .status();
    }
    if (!s.ok()) {
      std::fprintf(stderr, "child: %s\n", s.ToString().c_str());
      _exit(3);
    }
    const std::string line = absl::StrCat(i + 1, "\n");
    if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(4);
  }
}

// A forked child running CommitForever, and the count of commits it has reported.
class WriterProcess {
 public:
  explicit WriterProcess(const std::string& path) {
    int fds[2];
    if (pipe(fds) != 0) {
      ADD_FAILURE() << "pipe: " << errno;
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      CommitForever(path, fds[1]);
    }
    close(fds[1]);
    fd_ = fds[0];
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    if (pid_ < 0) ADD_FAILURE() << "fork: " << errno;
  }
  ~WriterProcess() {
    Kill();
    if (fd_ >= 0) close(fd_);
  }

  // Reads what the child reported, waiting up to `timeout` for something new. False once
  // the child is gone (it never exits on its own).
  bool Poll(absl::Duration timeout) {
    pollfd p = {fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) < 0)
      return errno == EINTR;
    char buf[4096];
    while (true) {
      ssize_t n = read(fd_, buf, sizeof(buf));
      if (n == 0) return false;  // EOF: the child died
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      pending_.append(buf, static_cast<size_t>(n));
      size_t end;
      while ((end = pending_.find('\n')) != std::string::npos) {
        int64_t count = 0;
        if (absl::SimpleAtoi(pending_.substr(0, end), &count)) commits_ = count;
        pending_.erase(0, end + 1);
      }
    }
  }

  // Waits until the child has reported at least `n` commits.
  bool WaitForCommits(int64_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (commits_ < n) {
      if (absl::Now() > deadline || !Poll(absl::Milliseconds(100))) return false;
    }
    return true;
  }

  // SIGKILL, mid-write or not, and reap. Counts what was reported before the kill.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      ADD_FAILURE() << "the writer did not die by SIGKILL; status " << status;
    }
    pid_ = -1;
    // The pipe's last writer is gone: read to EOF, where Poll returns false.
    while (Poll(absl::ZeroDuration())) {
    }
  }

  int64_t commits() const { return commits_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_;
  int64_t commits_ = 0;
};

// Everything a killed writer may leave, checked; `reported` commits must all be there.
void ExpectWholeStore(const std::string& path, int64_t reported) {
  EXPECT_THAT(CheckIntegrity(path), IsOkAndHolds("ok"));
  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  ASSERT_OK_AND_ASSIGN(std::vector<EntrySummary> entries, store->ListEntries({}));
  EXPECT_LE(entries.size(), static_cast<size_t>(kKeys));
  for (const EntrySummary& summary : entries) {
    SCOPED_TRACE(summary.key.shape);
    // LookupEntry re-checks the cubin's sha256.
    ASSERT_OK_AND_ASSIGN(Lookup hit, store->LookupEntry(summary.key, "src-aaaa", "13.0"));
    const Entry& e = hit.entry;
    EXPECT_EQ(e.id, summary.id);
    const Entry want = MakeEntry(e.key, e.job_id, e.job_id, kCubinBytes);
    EXPECT_TRUE(e.cubin == want.cubin && e.config == want.config &&
                SameMetrics(e.metrics, want.metrics))
        << "entry " << e.id << " is not one commit's";
    ASSERT_OK_AND_ASSIGN(Job job, store->GetJob(e.job_id));
    EXPECT_EQ(job.state, JobState::kDone);
    EXPECT_EQ(job.done, job.total);
    EXPECT_THAT(store->ListTrials(e.job_id), IsOkAndHolds(SizeIs(kTrials)));
  }
  // A job is done exactly when its winner and trials went in together; one killed
  // mid-commit is still running and has no trials.
  ASSERT_OK_AND_ASSIGN(std::vector<Job> done, store->ListJobs(JobState::kDone));
  for (const Job& job : done) {
    EXPECT_THAT(store->ListTrials(job.id), IsOkAndHolds(SizeIs(kTrials))) << "job " << job.id;
  }
  ASSERT_OK_AND_ASSIGN(std::vector<Job> running, store->ListJobs(JobState::kRunning));
  for (const Job& job : running) {
    EXPECT_THAT(store->ListTrials(job.id), IsOkAndHolds(SizeIs(0))) << "job " << job.id;
  }
  // What the writer reported as committed survived its death.
  EXPECT_GE(static_cast<int64_t>(done.size()), reported);
}

TEST(Crash, KilledWriterLeavesOnlyWholeWinners) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  // Kill after different numbers of commits, and a little later than the report, so the
  // signal lands at different points of a commit.
  const int64_t kKillAfter[] = {1, 12, 40, 5, 90, 3, 25, 60};
  int64_t reported = 0;
  for (size_t round = 0; round < std::size(kKillAfter); ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    {
      WriterProcess writer(path);
      ASSERT_TRUE(writer.WaitForCommits(kKillAfter[round]))
          << "the writer stopped after " << writer.commits() << " commits";
      usleep(static_cast<useconds_t>((round * 373) % 1500));
      writer.Kill();
      reported += writer.commits();
    }
    ExpectWholeStore(path, reported);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Crash, ReadOnlyStoreReadsWhileAnotherProcessWrites) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  WriterProcess writer(path);
  ASSERT_TRUE(writer.WaitForCommits(3));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenSqliteStore(path, [] {
                         StoreOptions o;
                         o.read_only = true;
                         return o;
                       }()));
  const int64_t first_seen = writer.commits();
  int lookups = 0;
  const absl::Time end = absl::Now() + absl::Milliseconds(300);
  while (absl::Now() < end) {
    writer.Poll(absl::ZeroDuration());  // keep the pipe drained so the writer never blocks
    ASSERT_OK_AND_ASSIGN(std::vector<EntrySummary> entries, reader->ListEntries({}));
    ASSERT_FALSE(entries.empty());
    for (const EntrySummary& s : entries) {
      // Keys are never deleted, only replaced, so a listed key always has a whole entry.
      ASSERT_OK(reader->LookupEntry(s.key, "src-aaaa", "13.0").status());
      ++lookups;
    }
  }
  EXPECT_TRUE(writer.WaitForCommits(first_seen + 1));
  EXPECT_GT(lookups, 0);
  writer.Kill();
  const int64_t reported = writer.commits();
  reader.reset();
  ExpectWholeStore(path, reported);
}

}  // namespace
}  // namespace ktune::store
