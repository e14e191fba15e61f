// Frame I/O over real pipes: round trips, and each way a read can fail.
#include "server/gpu/framing.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "ktune/v1/worker.pb.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

class Pipe {
 public:
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read_ = fds[0];
    write_ = fds[1];
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  int read_fd() const { return read_; }
  int write_fd() const { return write_; }
  void CloseRead() {
    if (read_ >= 0) ::close(read_);
    read_ = -1;
  }
  void CloseWrite() {
    if (write_ >= 0) ::close(write_);
    write_ = -1;
  }
  void WriteBytes(const std::string& bytes) {
    ASSERT_EQ(::write(write_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

 private:
  int read_ = -1;
  int write_ = -1;
};

std::string Header(uint32_t n) {
  return std::string{static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                     static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
}

TEST(FramingTest, RoundTrip) {
  Pipe p;
  v1::Request request;
  request.mutable_hello()->set_ordinal(3);
  ASSERT_OK(WriteFrame(p.write_fd(), request));
  v1::Request got;
  ASSERT_OK(ReadFrame(p.read_fd(), &got, 1000));
  ASSERT_TRUE(got.has_hello());
  EXPECT_EQ(got.hello().ordinal(), 3);
}

TEST(FramingTest, EmptyMessageRoundTrips) {
  Pipe p;
  ASSERT_OK(WriteFrame(p.write_fd(), v1::Response()));
  v1::Response got;
  got.mutable_ceiling()->set_copy_gbps(1);
  ASSERT_OK(ReadFrame(p.read_fd(), &got, 1000));
  EXPECT_EQ(got.kind_case(), v1::Response::KIND_NOT_SET);
}

TEST(FramingTest, SeveralFramesInOrder) {
  Pipe p;
  for (int i = 0; i < 3; ++i) {
    v1::Request r;
    r.mutable_hello()->set_ordinal(i);
    ASSERT_OK(WriteFrame(p.write_fd(), r));
  }
  for (int i = 0; i < 3; ++i) {
    v1::Request got;
    ASSERT_OK(ReadFrame(p.read_fd(), &got, 1000));
    EXPECT_EQ(got.hello().ordinal(), i);
  }
}

TEST(FramingTest, FrameLargerThanThePipeBuffer) {
  Pipe p;
  v1::Request request;
  std::string cubin(4 << 20, '\0');
  for (size_t i = 0; i < cubin.size(); ++i) cubin[i] = static_cast<char>(i * 131 + 7);
  *request.mutable_measure()->mutable_candidate()->mutable_cubin() = cubin;
  absl::Status written;
  std::thread writer([&] { written = WriteFrame(p.write_fd(), request); });
  v1::Request got;
  absl::Status read = ReadFrame(p.read_fd(), &got, 10000);
  writer.join();
  ASSERT_OK(written);
  ASSERT_OK(read);
  EXPECT_TRUE(got.measure().candidate().cubin() == cubin);
}

TEST(FramingTest, NothingBeforeTheDeadlineIsDeadlineExceeded) {
  Pipe p;
  v1::Response got;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 50),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("deadline")));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(45));
  EXPECT_LT(took, std::chrono::milliseconds(1000));
}

TEST(FramingTest, PartialFrameThenSilenceIsDeadlineExceeded) {
  Pipe p;
  p.WriteBytes(Header(10) + "abc");
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 50),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

TEST(FramingTest, ZeroTimeoutWithNothingIsDeadlineExceeded) {
  Pipe p;
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 0),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

TEST(FramingTest, EndOfFileIsUnavailable) {
  Pipe p;
  p.CloseWrite();
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 1000),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("end of file")));
}

TEST(FramingTest, EndOfFileWithoutDeadlineIsUnavailable) {
  Pipe p;
  p.CloseWrite();
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, -1),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST(FramingTest, PartialHeaderThenEndOfFileIsUnavailable) {
  Pipe p;
  p.WriteBytes(std::string("\x05\x00", 2));
  p.CloseWrite();
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 1000),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST(FramingTest, PartialBodyThenEndOfFileIsUnavailable) {
  Pipe p;
  p.WriteBytes(Header(10) + "abc");
  p.CloseWrite();
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 1000),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST(FramingTest, OversizedLengthIsDataLoss) {
  Pipe p;
  p.WriteBytes(Header(0xffffffffu));
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 1000),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("over the limit")));
}

TEST(FramingTest, JustOverTheLimitIsDataLoss) {
  Pipe p;
  p.WriteBytes(Header(kMaxFrameBytes + 1));
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 1000),
              StatusIs(absl::StatusCode::kDataLoss, ::testing::_));
}

// A header claiming the largest allowed frame, then end of file: the reader used to allocate
// (and zero) the whole claimed length before reading a byte of it (found by fuzz/framing).
// In a child with 64 MiB of address space to spare, that allocation fails and kills it.
TEST(FramingTest, AHeaderAloneDoesNotAllocateWhatItClaims) {
  Pipe p;
  p.WriteBytes(Header(kMaxFrameBytes));
  p.CloseWrite();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit as{};
    getrlimit(RLIMIT_AS, &as);
    // This process's address space now, from /proc/self/statm (pages), plus 64 MiB.
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    as.rlim_cur = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (64 << 20);
    if (pages == 0 || setrlimit(RLIMIT_AS, &as) != 0) _exit(3);
    v1::Response got;
    const absl::Status s = ReadFrame(p.read_fd(), &got, 1000);
    _exit(s.code() == absl::StatusCode::kUnavailable ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the reader died or failed: status " << status;
}

TEST(FramingTest, UnparseableBytesAreDataLoss) {
  Pipe p;
  p.WriteBytes(Header(5) + std::string(5, '\xff'));
  v1::Response got;
  EXPECT_THAT(ReadFrame(p.read_fd(), &got, 1000),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("does not parse")));
}

TEST(FramingTest, WriteToAClosedPipeIsUnavailable) {
  ::signal(SIGPIPE, SIG_IGN);  // as ProcessGpu does: EPIPE instead of death
  Pipe p;
  p.CloseRead();
  v1::Request request;
  request.mutable_hello()->set_ordinal(1);
  EXPECT_THAT(WriteFrame(p.write_fd(), request),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("closed")));
}

TEST(FramingTest, WriteToABadDescriptorIsInternal) {
  v1::Request request;
  request.mutable_hello()->set_ordinal(1);
  EXPECT_THAT(WriteFrame(-1, request), StatusIs(absl::StatusCode::kInternal, HasSubstr("write")));
}

}  // namespace
}  // namespace ktune
