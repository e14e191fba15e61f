// The fleet tier on Redis (remote_tier.h's RemoteTier).
//
// Layout, under a prefix (default "ktune:v1:"):
//   entry:<RemoteKeyString>  hash: time_ns, record (the entry as a one-entry export file,
//                            server/store/export_file.h), publisher, published_unix_ms
//   entries                  set of the RemoteKeyStrings that have a record (for List)
//   lease:<RemoteKeyString>  string: the holder, with a TTL (SET NX PX)
// Publishing, renewing and releasing are Lua scripts (EVAL), each atomic in Redis: the
// compare-and-set on time_ns, and "only the holder may renew or drop a lease".
//
// Thread-safe: one connection, used under a mutex, made again after it breaks.
#ifndef KTUNE_SERVER_FLEET_REDIS_TIER_H_
#define KTUNE_SERVER_FLEET_REDIS_TIER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/fleet/redis_connection.h"
#include "server/fleet/remote_tier.h"

namespace ktune::fleet {

struct RedisTierOptions {
  RedisConnectOptions connect;
  std::string prefix = "ktune:v1:";
};

// The options --remote URL, --remote-password-file FILE and --remote-ca FILE give (the
// latter two may be empty), as ktuned and `ktune cache` take them. kInvalidArgument naming
// the flag for a bad URL, an unreadable or empty password file, or a CA file that cannot be
// read or comes without rediss://. Reads the files; never touches the network.
absl::StatusOr<RedisTierOptions> RedisTierOptionsFromFlags(const std::string& url,
                                                           const std::string& password_file,
                                                           const std::string& ca_file);

// Connects lazily: opening never fails for an unreachable server (a daemon starts and
// serves from its local store while Redis is down); the first call says so.
std::unique_ptr<RemoteTier> NewRedisTier(RedisTierOptions options);

}  // namespace ktune::fleet

#endif  // KTUNE_SERVER_FLEET_REDIS_TIER_H_
