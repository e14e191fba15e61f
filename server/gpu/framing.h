// Length-delimited protobuf messages over file descriptors (pipes to and from
// ktune-worker): a 4-byte little-endian length, then the serialized message.
//
// Functions are thread-compatible: one reader and one writer per descriptor.
#ifndef KTUNE_SERVER_GPU_FRAMING_H_
#define KTUNE_SERVER_GPU_FRAMING_H_

#include <google/protobuf/message_lite.h>

#include <cstdint>

#include "absl/status/status.h"

namespace ktune {

// Messages above this are refused on both ends (a cubin is well under 1 MiB).
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;

// Writes one frame; retries short writes and EINTR. kUnavailable if the peer is gone
// (EPIPE), kInternal on other errors.
absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& message);

// Reads one frame into `message`, waiting at most `timeout_ms` for it to complete
// (negative: forever). kDeadlineExceeded on timeout, kUnavailable on end of file (the peer
// exited), kDataLoss for an oversized frame or bytes that do not parse.
absl::Status ReadFrame(int fd, google::protobuf::MessageLite* message, int64_t timeout_ms);

}  // namespace ktune

#endif  // KTUNE_SERVER_GPU_FRAMING_H_
