#include "frontends/ktuned/listener_guard.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"

namespace ktune {
namespace {

// A TCP address without its gRPC scheme (ipv4:, ipv6:, dns:///, dns:), if any.
absl::string_view WithoutScheme(absl::string_view address) {
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::ConsumePrefix(&address, scheme)) break;
  }
  return address;
}

// The host part of HOST:PORT or [V6]:PORT, without brackets; "" when there is none.
absl::string_view HostOf(absl::string_view address) {
  address = WithoutScheme(address);
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == absl::string_view::npos ? "" : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == absl::string_view::npos ? address : address.substr(0, colon);
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost") || host == "::1") return true;
  if (!absl::ConsumePrefix(&host, "127.")) return false;
  // The rest of a dotted quad: three numbers, each 0..255.
  int parts = 0;
  while (!host.empty()) {
    size_t dot = host.find('.');
    absl::string_view part = host.substr(0, dot);
    if (part.empty() || part.size() > 3) return false;
    int value = 0;
    for (char c : part) {
      if (!absl::ascii_isdigit(c)) return false;
      value = value * 10 + (c - '0');
    }
    if (value > 255) return false;
    ++parts;
    host = dot == absl::string_view::npos ? "" : host.substr(dot + 1);
  }
  return parts == 3;
}

// HOST:PORT or [V6]:PORT with a host and a decimal port 0..65535 (CheckListenAddress).
absl::Status CheckHostPort(absl::string_view rest) {
  if (absl::StrContains(rest, "://")) {
    return absl::InvalidArgumentError(
        "not a listen address (unix:///PATH, unix-abstract:NAME or HOST:PORT)");
  }
  size_t port_at;
  if (absl::StartsWith(rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos || close == 1 || close + 1 >= rest.size() ||
        rest[close + 1] != ':') {
      return absl::InvalidArgumentError("expected [V6ADDRESS]:PORT");
    }
    port_at = close + 2;
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          "no port: expected HOST:PORT, unix:///PATH or unix-abstract:NAME");
    }
    if (colon == 0) return absl::InvalidArgumentError("no host before the port");
    if (rest.substr(0, colon).find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError("an IPv6 address needs brackets: [V6ADDRESS]:PORT");
    }
    port_at = colon + 1;
  }
  const absl::string_view port = rest.substr(port_at);
  const bool digits = !port.empty() && port.size() <= 5 &&
                      std::all_of(port.begin(), port.end(),
                                  [](char c) { return absl::ascii_isdigit(c); });
  int value = 0;
  if (!digits || !absl::SimpleAtoi(port, &value) || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port '", port, "' is not a number from 0 to 65535"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ListenHost(const std::string& listen) { return std::string(HostOf(listen)); }

absl::Status CheckListenAddress(const std::string& listen) {
  absl::string_view rest = listen;
  if (absl::ConsumePrefix(&rest, "unix-abstract:")) {
    if (rest.empty()) return absl::InvalidArgumentError("unix-abstract: needs a name");
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&rest, "unix:")) {
    if (absl::ConsumePrefix(&rest, "//") && !absl::StartsWith(rest, "/")) {
      return absl::InvalidArgumentError("unix:// needs an absolute path (unix:///PATH)");
    }
    if (rest.empty()) return absl::InvalidArgumentError("unix: needs a socket path");
    return absl::OkStatus();
  }
  return CheckHostPort(WithoutScheme(rest));
}

ListenerReach ReachOf(const std::string& listen) {
  if (absl::StartsWith(listen, "unix-abstract:")) return ListenerReach::kAbstract;
  if (absl::StartsWith(listen, "unix:")) return ListenerReach::kOwner;
  return IsLoopbackHost(HostOf(listen)) ? ListenerReach::kLoopback : ListenerReach::kNetwork;
}

bool IsUnguardedExposure(const std::string& listen, bool tls, bool token) {
  const ListenerReach reach = ReachOf(listen);
  const bool exposed = reach == ListenerReach::kAbstract || reach == ListenerReach::kNetwork;
  return exposed && !tls && !token;
}

}  // namespace ktune
