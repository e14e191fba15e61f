#include "server/fleet/redis_connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/status_macros.h"

namespace ktune::fleet {
namespace {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
struct ReaderFree {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

// OpenSSL's queued errors as text, emptying its queue.
std::string SslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "no detail" : out;
}

RedisReply Convert(const redisReply& r) {
  RedisReply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(Convert(*r.element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

absl::Status ErrorReply(const std::string& command, absl::string_view text) {
  const std::string msg = absl::StrCat("redis ", command, ": ", text);
  if (absl::StartsWith(text, "OOM")) return absl::ResourceExhaustedError(msg);
  if (absl::StartsWith(text, "NOAUTH") || absl::StartsWith(text, "WRONGPASS") ||
      absl::StartsWith(text, "ERR invalid password") || absl::StartsWith(text, "NOPERM")) {
    return absl::PermissionDeniedError(msg);
  }
  return absl::FailedPreconditionError(msg);
}

class RedisConnectionImpl final : public RedisConnection {
 public:
  RedisConnectionImpl(const RedisConnectOptions& o) : options_(o) {}
  ~RedisConnectionImpl() override {
    ssl_.reset();  // before the socket it writes its close_notify to (it does not here)
    if (fd_ >= 0) close(fd_);
  }

  absl::Status Open() {
    reader_.reset(redisReaderCreate());
    if (reader_ == nullptr) return absl::ResourceExhaustedError("redisReaderCreate failed");
    deadline_ = absl::Now() + options_.timeout;
    KTUNE_RETURN_IF_ERROR(Dial());
    if (options_.url.tls) KTUNE_RETURN_IF_ERROR(Handshake());
    if (!options_.password.empty()) {
      KTUNE_RETURN_IF_ERROR(Command({"AUTH", options_.password}).status());
    }
    if (options_.url.db != 0) {
      KTUNE_RETURN_IF_ERROR(Command({"SELECT", absl::StrCat(options_.url.db)}).status());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<RedisReply> Command(const std::vector<std::string>& argv) override {
    if (broken_) return absl::UnavailableError(Where("the connection is broken"));
    deadline_ = absl::Now() + options_.timeout;
    const std::string name = argv.empty() ? "" : argv[0];
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    char* cmd = nullptr;
    const int len = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), ptrs.data(),
                                           lens.data());
    if (len < 0) return absl::ResourceExhaustedError("redisFormatCommandArgv failed");
    std::string wire(cmd, len);
    redisFreeCommand(cmd);
    if (absl::Status s = SendAll(wire); !s.ok()) return Break(s);
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
        return Break(absl::UnavailableError(Where("unparsable reply")));
      }
      if (raw != nullptr) {
        std::unique_ptr<redisReply, ReplyFree> reply(static_cast<redisReply*>(raw));
        if (reply->type == REDIS_REPLY_ERROR) {
          return ErrorReply(name, absl::string_view(reply->str, reply->len));
        }
        return Convert(*reply);
      }
      char buf[16384];
      absl::StatusOr<size_t> n = Receive(buf, sizeof buf);
      if (!n.ok()) return Break(n.status());
      if (redisReaderFeed(reader_.get(), buf, *n) != REDIS_OK) {
        return Break(absl::UnavailableError(Where("unparsable reply")));
      }
    }
  }

  bool broken() const override { return broken_; }

 private:
  std::string Where(absl::string_view what) const {
    return absl::StrCat("redis ", options_.url.ToString(), ": ", what);
  }

  absl::Status Break(absl::Status s) {
    broken_ = true;
    return s;
  }

  // Waits until fd_ is ready for `events`, or the call's deadline.
  absl::Status Wait(short events, absl::string_view doing) {
    for (;;) {
      const int64_t ms = absl::ToInt64Milliseconds(deadline_ - absl::Now());
      if (ms <= 0) {
        return absl::DeadlineExceededError(
            Where(absl::StrCat("timed out after ", absl::FormatDuration(options_.timeout),
                               " while ", doing)));
      }
      pollfd p{fd_, events, 0};
      const int r = poll(&p, 1, static_cast<int>(ms));
      if (r > 0) return absl::OkStatus();
      if (r < 0 && errno != EINTR) {
        return absl::UnavailableError(Where(absl::StrCat("poll: ", std::strerror(errno))));
      }
    }
  }

  // TCP connect to the first address that answers, non-blocking under the deadline.
  // getaddrinfo itself blocks: give an address, or a resolver that answers quickly.
  absl::Status Dial() {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = absl::StrCat(options_.url.port);
    if (int e = getaddrinfo(options_.url.host.c_str(), port.c_str(), &hints, &found); e != 0) {
      return absl::UnavailableError(Where(absl::StrCat("cannot resolve host: ", gai_strerror(e))));
    }
    absl::Status last = absl::UnavailableError(Where("no address"));
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      fd_ = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ < 0) continue;
      int one = 1;
      setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      last = ConnectOne(a);
      if (last.ok()) break;
      close(fd_);
      fd_ = -1;
    }
    freeaddrinfo(found);
    return last;
  }

  absl::Status ConnectOne(const addrinfo* a) {
    if (connect(fd_, a->ai_addr, a->ai_addrlen) == 0) return absl::OkStatus();
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(Where(absl::StrCat("connect: ", std::strerror(errno))));
    }
    KTUNE_RETURN_IF_ERROR(Wait(POLLOUT, "connecting"));
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return absl::UnavailableError(Where(absl::StrCat("connect: ", std::strerror(err))));
    }
    return absl::OkStatus();
  }

  absl::Status Handshake() {
    ctx_.reset(SSL_CTX_new(TLS_client_method()));
    if (ctx_ == nullptr) return absl::InternalError(Where("SSL_CTX_new: " + SslErrors()));
    SSL_CTX_set_verify(ctx_.get(), SSL_VERIFY_PEER, nullptr);
    const int loaded = options_.ca_file.empty()
                           ? SSL_CTX_set_default_verify_paths(ctx_.get())
                           : SSL_CTX_load_verify_locations(ctx_.get(), options_.ca_file.c_str(),
                                                           nullptr);
    if (loaded != 1) {
      return absl::InvalidArgumentError(
          Where(absl::StrCat("TLS CA file ", options_.ca_file, ": ", SslErrors())));
    }
    ssl_.reset(SSL_new(ctx_.get()));
    if (ssl_ == nullptr) return absl::InternalError(Where("SSL_new: " + SslErrors()));
    SSL_set_fd(ssl_.get(), fd_);
    SSL_set_tlsext_host_name(ssl_.get(), options_.url.host.c_str());
    SSL_set1_host(ssl_.get(), options_.url.host.c_str());
    for (;;) {
      const int r = SSL_connect(ssl_.get());
      if (r == 1) return absl::OkStatus();
      const int e = SSL_get_error(ssl_.get(), r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        KTUNE_RETURN_IF_ERROR(Wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, "TLS handshake"));
        continue;
      }
      const long verify = SSL_get_verify_result(ssl_.get());
      return absl::UnavailableError(Where(absl::StrCat(
          "TLS handshake failed: ",
          verify != X509_V_OK ? X509_verify_cert_error_string(verify) : SslErrors().c_str())));
    }
  }

  absl::Status SendAll(absl::string_view data) {
    while (!data.empty()) {
      ssize_t n;
      if (ssl_ != nullptr) {
        n = SSL_write(ssl_.get(), data.data(), static_cast<int>(data.size()));
        if (n <= 0) {
          const int e = SSL_get_error(ssl_.get(), static_cast<int>(n));
          if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
            return absl::UnavailableError(Where("TLS write: " + SslErrors()));
          }
          KTUNE_RETURN_IF_ERROR(Wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, "sending"));
          continue;
        }
      } else {
        n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return absl::UnavailableError(Where(absl::StrCat("send: ", std::strerror(errno))));
          }
          KTUNE_RETURN_IF_ERROR(Wait(POLLOUT, "sending"));
          continue;
        }
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Receive(char* buf, size_t size) {
    for (;;) {
      if (ssl_ != nullptr) {
        const int n = SSL_read(ssl_.get(), buf, static_cast<int>(size));
        if (n > 0) return static_cast<size_t>(n);
        const int e = SSL_get_error(ssl_.get(), n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
          KTUNE_RETURN_IF_ERROR(Wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, "waiting for the reply"));
          continue;
        }
        return absl::UnavailableError(Where("the server closed the TLS connection"));
      }
      const ssize_t n = recv(fd_, buf, size, 0);
      if (n > 0) return static_cast<size_t>(n);
      if (n == 0) return absl::UnavailableError(Where("the server closed the connection"));
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return absl::UnavailableError(Where(absl::StrCat("recv: ", std::strerror(errno))));
      }
      KTUNE_RETURN_IF_ERROR(Wait(POLLIN, "waiting for the reply"));
    }
  }

  const RedisConnectOptions options_;
  int fd_ = -1;
  bool broken_ = false;
  absl::Time deadline_;
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx_;
  std::unique_ptr<SSL, SslFree> ssl_;  // after ctx_: freed first
  std::unique_ptr<redisReader, ReaderFree> reader_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RedisConnection>> ConnectRedis(const RedisConnectOptions& options) {
  auto c = std::make_unique<RedisConnectionImpl>(options);
  KTUNE_RETURN_IF_ERROR(c->Open());
  return std::unique_ptr<RedisConnection>(std::move(c));
}

}  // namespace ktune::fleet
