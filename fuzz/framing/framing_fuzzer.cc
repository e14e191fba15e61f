// Fuzzes the worker protocol's framing (server/gpu/framing.h) as both ends read it: the input
// is the byte stream on the pipe, read frame by frame as ktune-worker reads requests and
// as the parent (ProcessGpu) reads responses, until the stream ends or a frame is refused.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_support.h"
#include "ktune/v1/worker.pb.h"
#include "server/gpu/framing.h"

namespace {

// Reads `message`s from a pipe holding `data` until ReadFrame fails.
template <typename Message>
void ReadAll(const uint8_t* data, size_t size) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) std::abort();
  fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);  // the whole input fits: no writer thread needed
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fds[1], data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(fds[1]);
  for (int frames = 0; frames < 1000; ++frames) {
    Message m;
    if (!ktune::ReadFrame(fds[0], &m, /*timeout_ms=*/1000).ok()) break;
  }
  close(fds[0]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  ReadAll<ktune::v1::Request>(data, size);
  ReadAll<ktune::v1::Response>(data, size);
  return 0;
}
