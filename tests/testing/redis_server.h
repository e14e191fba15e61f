// RedisServer: a private redis-server for one test, on a free port of 127.0.0.1, with no
// persistence, its files in the test's folder; killed when the object goes. Stop() and
// Start() again (same port) make an outage; Pause() (SIGSTOP) makes a server that accepts
// and never answers. Tests that need one skip when redis-server is not installed
// (deploy/install-deps.sh installs it):
//
//   if (!RedisServer::Installed()) GTEST_SKIP() << RedisServer::kSkipMessage;
//
// Not thread-safe; one test thread drives it.
#ifndef KTUNE_TESTS_TESTING_REDIS_SERVER_H_
#define KTUNE_TESTS_TESTING_REDIS_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/file.h"
#include "tests/testing/subprocess.h"

namespace ktune::testing {

class RedisServer {
 public:
  static constexpr char kSkipMessage[] =
      "redis-server is not installed (deploy/install-deps.sh installs it)";
  static std::string Binary() {
    for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
      if (access(p, X_OK) == 0) return p;
    }
    return "";
  }
  static bool Installed() { return !Binary().empty(); }

  // A free TCP port on 127.0.0.1 (free when asked; the kernel does not hand it out again
  // at once).
  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

  // Starts one in `dir` (made if missing) with `extra` arguments (e.g. {"--requirepass",
  // "s3cret"}). `port`: 0 for a free one.
  explicit RedisServer(const std::string& dir, std::vector<std::string> extra = {}, int port = 0)
      : dir_(dir), extra_(std::move(extra)), port_(port == 0 ? FreePort() : port) {
    EXPECT_TRUE(MakeDirs(dir_).ok());
    Start();
  }
  ~RedisServer() { Stop(); }

  int port() const { return port_; }
  std::string url() const { return absl::StrCat("redis://127.0.0.1:", port_); }

  // (Re)starts it on its port and waits until it accepts connections. The data of an
  // earlier run is gone (no persistence): a restarted Redis is an empty one.
  void Start() {
    std::vector<std::string> args = {"--port",       absl::StrCat(port_), "--bind", "127.0.0.1",
                                     "--save",       "",                  "--appendonly", "no",
                                     "--dir",        dir_,                "--protected-mode",
                                     "no"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    process_ = std::make_unique<Subprocess>(Binary(), args, dir_);
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (absl::Now() < end && !Accepts()) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_TRUE(Accepts()) << "redis-server did not start:\n" << process_->Stdout();
  }
  // Kills it (SIGKILL) and waits until it is gone.
  void Stop() {
    if (process_ == nullptr) return;
    process_->Signal(SIGCONT);
    process_->Signal(SIGKILL);
    process_->Wait(absl::Seconds(10));
    process_.reset();
  }
  void Pause() { process_->Signal(SIGSTOP); }
  void Resume() { process_->Signal(SIGCONT); }

 private:
  bool Accepts() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  }

  const std::string dir_;
  const std::vector<std::string> extra_;
  const int port_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_REDIS_SERVER_H_
