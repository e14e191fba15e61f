#include "server/fleet/redis_url.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ktune::fleet {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view url, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " ", url, ": ", why,
                   " (expected redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB])"));
}

}  // namespace

std::string RedisUrl::ToString() const {
  const bool v6 = absl::StrContains(host, ':');
  return absl::StrCat(tls ? "rediss://" : "redis://", v6 ? "[" : "", host, v6 ? "]" : "", ":",
                      port, db != 0 ? absl::StrCat("/", db) : "");
}

absl::StatusOr<RedisUrl> ParseRedisUrl(absl::string_view url, absl::string_view flag) {
  RedisUrl out;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "rediss://")) {
    out.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "redis://")) {
    return Bad(flag, url, "not a redis:// or rediss:// URL");
  }
  if (absl::StrContains(rest, '@')) {
    return Bad(flag, url, "credentials do not go in the URL; use --remote-password-file");
  }
  absl::string_view hostport = rest;
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    hostport = rest.substr(0, slash);
    absl::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &out.db) || out.db < 0 || out.db > 15)) {
      return Bad(flag, url, absl::StrCat("database \"", db, "\" is not a number in 0..15"));
    }
  }
  absl::string_view port;
  if (absl::ConsumePrefix(&hostport, "[")) {  // [IPv6]:PORT
    size_t close = hostport.find(']');
    if (close == absl::string_view::npos) return Bad(flag, url, "unclosed [ in the host");
    out.host = std::string(hostport.substr(0, close));
    absl::string_view after = hostport.substr(close + 1);
    if (!after.empty() && !absl::ConsumePrefix(&after, ":")) {
      return Bad(flag, url, "junk after the host");
    }
    port = after;
  } else if (size_t colon = hostport.rfind(':'); colon != absl::string_view::npos) {
    out.host = std::string(hostport.substr(0, colon));
    port = hostport.substr(colon + 1);
  } else {
    out.host = std::string(hostport);
  }
  if (out.host.empty()) return Bad(flag, url, "no host");
  if (!port.empty() && (!absl::SimpleAtoi(port, &out.port) || out.port < 1 || out.port > 65535)) {
    return Bad(flag, url, absl::StrCat("port \"", port, "\" is not a number in 1..65535"));
  }
  return out;
}

}  // namespace ktune::fleet
