// RedisUrl: where the fleet tier lives, as `ktuned --remote` and `ktune cache --remote`
// take it: redis://HOST:PORT[/DB] (plaintext) or rediss://HOST:PORT[/DB] (TLS). The port
// defaults to 6379 and the database to 0. A password never travels in the URL (it would
// show in `ps`): it comes from --remote-password-file.
//
// Plain value and a pure parser; thread-safe.
#ifndef KTUNE_SERVER_FLEET_REDIS_URL_H_
#define KTUNE_SERVER_FLEET_REDIS_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune::fleet {

struct RedisUrl {
  bool tls = false;  // rediss://
  std::string host;
  int port = 6379;
  int db = 0;

  // "redis://HOST:PORT/DB" again (rediss:// for TLS), the DB left out when 0.
  std::string ToString() const;
};

// kInvalidArgument naming `flag` and saying what is wrong: another scheme, no host, a port
// outside 1..65535, a database that is not a number in 0..15 (Redis's default count),
// credentials in the URL ("use --remote-password-file").
absl::StatusOr<RedisUrl> ParseRedisUrl(absl::string_view url, absl::string_view flag);

}  // namespace ktune::fleet

#endif  // KTUNE_SERVER_FLEET_REDIS_URL_H_
