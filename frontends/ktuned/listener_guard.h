// Who can reach a listen address, and the rule that a listener others can reach is guarded:
// a unix socket path is guarded by its file mode (0600, owner only) and a loopback TCP port
// stays on this host; a TCP port on any other address reaches the network, and a
// unix-abstract socket has no file mode at all (every local user and container sharing the
// network namespace can connect). Those two need TLS or a bearer token, unless the operator
// says --insecure (ServerOptions::insecure), which ktuned then prints at start.
//
// Pure functions; thread-safe.
#ifndef KTUNE_FRONTENDS_KTUNED_LISTENER_GUARD_H_
#define KTUNE_FRONTENDS_KTUNED_LISTENER_GUARD_H_

#include <string>

#include "absl/status/status.h"

namespace ktune {

// OK when `listen` is an address ktuned can serve as given: unix:PATH (unix:///ABS or
// unix:REL, PATH not empty), unix-abstract:NAME (NAME not empty), or HOST:PORT / [V6]:PORT
// (optionally ipv4:/ipv6:/dns: prefixed) with a host and a decimal port 0..65535. gRPC
// itself takes port 99999 as 99999 mod 65536 and reports a bad address as a failure to
// bind; this says what is wrong instead. kInvalidArgument naming the fault otherwise.
absl::Status CheckListenAddress(const std::string& listen);

enum class ListenerReach {
  kOwner,     // unix:PATH: the socket file's owner only
  kLoopback,  // TCP on 127.0.0.0/8, [::1] or localhost: this host
  kAbstract,  // unix-abstract:NAME: every local user, no file mode
  kNetwork,   // any other TCP address (0.0.0.0, [::], a host name, an interface address)
};

// How far `listen` (a gRPC listen address: unix:PATH, unix-abstract:NAME, HOST:PORT,
// [V6]:PORT, optionally ipv4:/ipv6:/dns: prefixed) reaches. Anything it cannot read as one
// of the first three is kNetwork.
ListenerReach ReachOf(const std::string& listen);

// The host part of a TCP listen address (HOST:PORT or [V6]:PORT, optionally ipv4:/ipv6:/dns:
// prefixed), without brackets; the whole address when it has no port.
std::string ListenHost(const std::string& listen);

// True iff `listen` reaches beyond the owner and the host, and neither TLS nor a token
// guards it.
bool IsUnguardedExposure(const std::string& listen, bool tls, bool token);

}  // namespace ktune

#endif  // KTUNE_FRONTENDS_KTUNED_LISTENER_GUARD_H_
