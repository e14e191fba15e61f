#include "server/gpu/framing.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

absl::Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) return absl::UnavailableError("peer closed the pipe");
      return absl::InternalError(absl::StrCat("write: ", std::strerror(errno)));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Reads exactly `size` bytes before `deadline` (or forever when !has_deadline).
absl::Status ReadAll(int fd, char* data, size_t size, bool has_deadline,
                     std::chrono::steady_clock::time_point deadline) {
  while (size > 0) {
    int wait_ms = -1;
    if (has_deadline) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return absl::DeadlineExceededError("no answer before the deadline");
      // Rounded up: whole milliseconds cut down would end the wait up to 1 ms before the
      // deadline (a 300 ms deadline read 299 ms on a loaded CI machine).
      const int64_t left_us =
          std::chrono::duration_cast<std::chrono::microseconds>(deadline - now).count();
      wait_ms = static_cast<int>(std::min<int64_t>((left_us + 999) / 1000, 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, wait_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (r == 0) continue;  // the deadline check above ends the loop
    ssize_t n = ::read(fd, data, size);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::InternalError(absl::StrCat("read: ", std::strerror(errno)));
    }
    if (n == 0) return absl::UnavailableError("peer exited (end of file)");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& message) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) return absl::InternalError("serialize failed");
  if (bytes.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame of ", bytes.size(), " bytes is too big"));
  }
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  const char header[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                          static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
  if (absl::Status s = WriteAll(fd, header, 4); !s.ok()) return s;
  return WriteAll(fd, bytes.data(), bytes.size());
}

absl::Status ReadFrame(int fd, google::protobuf::MessageLite* message, int64_t timeout_ms) {
  const bool has_deadline = timeout_ms >= 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  unsigned char header[4];
  if (absl::Status s = ReadAll(fd, reinterpret_cast<char*>(header), 4, has_deadline, deadline);
      !s.ok()) {
    return s;
  }
  const uint32_t n = header[0] | (header[1] << 8) | (header[2] << 16) |
                     (static_cast<uint32_t>(header[3]) << 24);
  if (n > kMaxFrameBytes) {
    return absl::DataLossError(absl::StrCat("frame of ", n, " bytes is over the limit"));
  }
  // The body in steps of at most 1 MiB, the buffer growing with what has arrived: a header
  // alone (4 bytes, then end of file) used to allocate and zero the whole length it
  // claims, up to kMaxFrameBytes (found by fuzz/framing).
  constexpr uint32_t kStep = 1u << 20;
  std::string bytes;
  while (bytes.size() < n) {
    const size_t have = bytes.size();
    const size_t step = std::min<size_t>(kStep, n - have);
    bytes.resize(have + step);
    if (absl::Status s = ReadAll(fd, bytes.data() + have, step, has_deadline, deadline); !s.ok()) {
      return s;
    }
  }
  if (!message->ParseFromString(bytes)) return absl::DataLossError("frame does not parse");
  return absl::OkStatus();
}

}  // namespace ktune
