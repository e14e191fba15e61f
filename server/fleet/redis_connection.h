// RedisConnection: one connection to a Redis server, plain TCP or TLS, with a deadline on
// every call. The fleet tier's only way to Redis.
//
// hiredis formats the commands and parses the replies (redisFormatCommandArgv and its
// reader); the socket I/O is ours, non-blocking under poll(2), so that every connect, send
// and receive honours the timeout (hiredis 0.14's blocking context has none for TLS, and no
// TLS at all), and TLS is OpenSSL's, which ktune links already. redis_connection.cc is the
// only file in ktune that includes <hiredis/hiredis.h>.
//
// Thread-compatible: one thread at a time (the tier holds a mutex around it). After an I/O
// error or a timeout the connection is broken(): a reply may be half read, so the caller
// drops it and connects anew.
#ifndef KTUNE_SERVER_FLEET_REDIS_CONNECTION_H_
#define KTUNE_SERVER_FLEET_REDIS_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/fleet/redis_url.h"

namespace ktune::fleet {

// A reply, as plain values. An error reply is never a RedisReply: Command returns it as a
// status.
struct RedisReply {
  enum class Type { kNil, kInteger, kString, kStatus, kArray };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string str;  // kString and kStatus
  std::vector<RedisReply> elements;  // kArray
};

struct RedisConnectOptions {
  RedisUrl url;
  // AUTH after connecting when not empty.
  std::string password;
  // rediss://: PEM file of the CAs the server's certificate must chain to; empty: the
  // system's default CAs. The certificate must name the URL's host either way.
  std::string ca_file;
  // The most each step may take: the TCP connect with the TLS handshake, then AUTH, then
  // SELECT, then each command (sending it and reading its whole reply). Name resolution
  // (getaddrinfo) is not bounded: give an address, or a host the resolver answers at once.
  absl::Duration timeout = absl::Milliseconds(500);
};

class RedisConnection {
 public:
  virtual ~RedisConnection() = default;

  // Sends `argv` as one command and returns its reply. Error replies: kResourceExhausted
  // for Redis's OOM (the server is full), kPermissionDenied for NOAUTH/WRONGPASS, else
  // kFailedPrecondition; each names the command and quotes Redis. kDeadlineExceeded when
  // the timeout passes, kUnavailable for a closed or failing socket; after those two
  // broken() is true.
  virtual absl::StatusOr<RedisReply> Command(const std::vector<std::string>& argv) = 0;
  virtual bool broken() const = 0;
};

// Connects (TCP, then TLS for rediss://), then AUTH and SELECT as the options say.
// kUnavailable naming the URL when nothing answers or the handshake fails,
// kDeadlineExceeded past the timeout, kPermissionDenied for a refused password,
// kInvalidArgument for a TLS CA file that cannot be read.
absl::StatusOr<std::unique_ptr<RedisConnection>> ConnectRedis(const RedisConnectOptions& options);

}  // namespace ktune::fleet

#endif  // KTUNE_SERVER_FLEET_REDIS_CONNECTION_H_
