#include "frontends/ktuned/listener_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "frontends/ktuned/listener_guard.h"

namespace ktune {
namespace {

// The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 section 3.4):
// what a gRPC client sends first; a plaintext gRPC server answers with its own SETTINGS.
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
constexpr size_t kPrefaceSize = sizeof(kPreface) - 1;

// A TLS ClientHello, made by OpenSSL into a memory BIO: a TLS listener answers it with its
// ServerHello. (The preface would do too, but gRPC logs every such failed handshake as an
// error; a client that goes away mid-handshake it does not.) Nothing of the answer is read.
absl::StatusOr<std::string> TlsClientHello() {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (ssl == nullptr || in == nullptr || out == nullptr) {
    BIO_free(in);
    BIO_free(out);
    return absl::InternalError("SSL_new/BIO_new failed");
  }
  SSL_set_bio(ssl.get(), in, out);  // the SSL owns both now
  SSL_set_connect_state(ssl.get());
  SSL_do_handshake(ssl.get());  // writes the ClientHello, then wants the (never fed) answer
  char* bytes = nullptr;
  const long size = BIO_get_mem_data(out, &bytes);
  if (size <= 0) return absl::InternalError("SSL_do_handshake wrote no ClientHello");
  return std::string(bytes, static_cast<size_t>(size));
}

absl::Status Errno(const std::string& what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Closes the descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Milliseconds left until `end`, for poll(); at least 0.
int MillisLeft(absl::Time end) {
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(end - absl::Now())));
}

// Waits for `events` on fd until `end`. OK when they came.
absl::Status WaitFor(int fd, short events, absl::Time end, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, MillisLeft(end));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::UnavailableError(absl::StrCat(what, ": no answer in time"));
    if (errno != EINTR) return Errno(absl::StrCat(what, ": poll"), errno);
  }
}

// Connects the non-blocking socket `fd` to `addr` by `end`.
absl::Status Connect(int fd, const sockaddr* addr, socklen_t len, absl::Time end,
                     const std::string& where) {
  if (connect(fd, addr, len) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) return Errno("connect " + where, errno);
    if (absl::Status s = WaitFor(fd, POLLOUT, end, "connect " + where); !s.ok()) return s;
    int err = 0;
    socklen_t err_len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
    if (err != 0) return Errno("connect " + where, err);
  }
  return absl::OkStatus();
}

// Sends the first bytes of a client (`hello`) on the connected `fd` and waits for the
// server's reaction.
absl::Status Converse(int fd, const std::string& hello, absl::Time end, const std::string& where) {
  if (send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    // A reset already: the server closed it, so someone is there.
    return errno == ECONNRESET || errno == EPIPE ? absl::OkStatus()
                                                 : Errno("send to " + where, errno);
  }
  if (absl::Status s = WaitFor(fd, POLLIN, end, where + " took the connection but"); !s.ok()) {
    return s;
  }
  char byte;
  if (recv(fd, &byte, 1, MSG_DONTWAIT) < 0 && errno != ECONNRESET) {
    return Errno("recv from " + where, errno);
  }
  return absl::OkStatus();  // a byte, end of stream or a reset: the server reacted
}

// A fresh non-blocking socket of `family`.
absl::Status OpenSocket(int family, Fd* fd) {
  fd->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd->fd < 0) return Errno("socket", errno);
  return absl::OkStatus();
}

absl::Status ProbeUnix(const std::string& listen, const std::string& hello, absl::Time end) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path;
  socklen_t len = sizeof(addr);
  if (absl::StartsWith(listen, "unix-abstract:")) {
    path = listen.substr(14);
    if (path.size() + 1 > sizeof(addr.sun_path)) return absl::InvalidArgumentError("name too long");
    memcpy(addr.sun_path + 1, path.data(), path.size());  // sun_path[0] = 0: abstract
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size());
  } else {
    path = listen.substr(5);
    if (absl::StartsWith(path, "//")) path = path.substr(2);
    if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("path too long");
    memcpy(addr.sun_path, path.data(), path.size());
  }
  Fd fd;
  if (absl::Status s = OpenSocket(AF_UNIX, &fd); !s.ok()) return s;
  if (absl::Status s = Connect(fd.fd, reinterpret_cast<sockaddr*>(&addr), len, end, listen);
      !s.ok()) {
    return s;
  }
  return Converse(fd.fd, hello, end, listen);
}

absl::Status ProbeTcp(const std::string& listen, int port, const std::string& hello,
                      absl::Time end) {
  std::string host = ListenHost(listen);
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int err = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); err != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(err)));
  }
  const std::string where = absl::StrCat(host, ":", port);
  absl::Status last = absl::UnavailableError("resolve " + host + ": no address");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    Fd fd;
    last = OpenSocket(a->ai_family, &fd);
    if (last.ok()) last = Connect(fd.fd, a->ai_addr, a->ai_addrlen, end, where);
    if (last.ok()) {
      last = Converse(fd.fd, hello, end, where);
      break;
    }
  }
  freeaddrinfo(found);
  return last;
}

class ListenerWatchImpl final : public ListenerWatch {
 public:
  ListenerWatchImpl(ListenerWatchOptions o, std::function<void(const std::string&)> on_dead)
      : o_(std::move(o)), on_dead_(std::move(on_dead)), thread_([this] { Run(); }) {}
  ~ListenerWatchImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

 private:
  void Run() {
    const absl::Duration timeout =
        std::clamp(o_.interval, absl::Seconds(1), absl::Seconds(5));
    int failed = 0;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_), o_.interval)) return;
      }
      absl::Status s = ProbeListener(o_.listen, o_.port, o_.tls, timeout);
      failed = s.ok() ? 0 : failed + 1;
      if (failed >= o_.failures) {
        on_dead_(absl::StrCat(failed, " probes in a row failed, the last: ", s.message()));
        return;
      }
    }
  }

  const ListenerWatchOptions o_;
  const std::function<void(const std::string&)> on_dead_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is there
};

}  // namespace

absl::Status ProbeListener(const std::string& listen, int port, bool tls,
                           absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  std::string hello(kPreface, kPrefaceSize);
  if (tls) {
    absl::StatusOr<std::string> client_hello = TlsClientHello();
    if (!client_hello.ok()) return client_hello.status();
    hello = *std::move(client_hello);
  }
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) {
    return ProbeUnix(listen, hello, end);
  }
  return ProbeTcp(listen, port, hello, end);
}

std::unique_ptr<ListenerWatch> StartListenerWatch(
    ListenerWatchOptions options, std::function<void(const std::string& why)> on_dead) {
  return std::make_unique<ListenerWatchImpl>(std::move(options), std::move(on_dead));
}

}  // namespace ktune
