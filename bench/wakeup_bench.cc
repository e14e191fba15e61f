// wakeup_bench: what one round trip between two threads of this machine costs with no RPC at
// all: one byte each way over a unix socketpair, 20000 times. It is the floor under every
// GetKernel a client makes (a call wakes the daemon's thread, the answer wakes the client's),
// so getkernel_bench's figures read against it (bench/RESULTS.md). On a VM whose idle vCPUs
// sleep, a wakeup costs far more than on one kept busy: run it both ways, e.g.
//   build/bin/wakeup_bench
//   taskset -c 1 sh -c 'while :; do :; done' & build/bin/wakeup_bench; kill %1
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
  constexpr int kRoundTrips = 20000;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    std::perror("socketpair");
    return 1;
  }
  std::thread echo([fd = fds[1]] {
    char b;
    while (read(fd, &b, 1) == 1) {
      if (write(fd, &b, 1) != 1) return;
    }
  });
  std::vector<double> us;
  us.reserve(kRoundTrips);
  char b = 1;
  for (int i = 0; i < kRoundTrips; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (write(fds[0], &b, 1) != 1 || read(fds[0], &b, 1) != 1) {
      std::perror("round trip");
      return 1;
    }
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  close(fds[0]);  // the echo thread's read returns 0
  echo.join();
  close(fds[1]);
  std::sort(us.begin(), us.end());
  std::printf("unix socketpair round trip between two threads, %d times: p50 %.1f us, p99 %.1f us\n",
              kRoundTrips, us[us.size() / 2], us[us.size() * 99 / 100]);
  return 0;
}
