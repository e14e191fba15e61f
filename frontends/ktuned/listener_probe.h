// Whether ktuned's own listener still takes connections, asked from outside as a client
// would.
//
// Why: gRPC 1.51 (Debian 12) stops accepting on a listener for good after one accept()
// error other than EAGAIN/ECONNABORTED (tcp_server_posix.cc's on_read `goto error`), e.g.
// EMFILE when idle connections have used up the descriptors. The socket stays bound, so the
// kernel still completes TCP handshakes into its backlog, but no one reads them: clients
// hang until their deadline and the daemon looks alive. The probe therefore does not stop
// at connect(): it sends the HTTP/2 client preface and waits for the server to react (its
// SETTINGS frame) or, on a TLS listener, a ClientHello (its ServerHello). A dead listener
// never reacts.
//
// ProbeListener is thread-safe. A ListenerWatch runs one thread of its own; destroying it
// stops and joins that thread.
#ifndef KTUNE_FRONTENDS_KTUNED_LISTENER_PROBE_H_
#define KTUNE_FRONTENDS_KTUNED_LISTENER_PROBE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ktune {

// Connects to `listen` (unix:PATH, unix:///PATH, unix-abstract:NAME or HOST:PORT; a
// wildcard host 0.0.0.0 / [::] is probed on loopback) at `port` (the port the server got;
// ignored for unix sockets), sends what a client sends first (the HTTP/2 client preface, or
// with `tls` a TLS ClientHello) and waits at most `timeout` for any answer (bytes, end of
// stream or a reset). OK when the server reacts; kUnavailable naming the step otherwise
// (socket, connect, no answer within the timeout).
absl::Status ProbeListener(const std::string& listen, int port, bool tls,
                           absl::Duration timeout);

struct ListenerWatchOptions {
  std::string listen;
  int port = 0;
  bool tls = false;  // the listener speaks TLS
  // Between probes; each probe waits for its answer at most this long too, within
  // [1 s, 5 s].
  absl::Duration interval = absl::Seconds(10);
  // Consecutive failed probes that make the listener dead (one failure can be a moment of
  // overload; a dead listener fails every time).
  int failures = 3;
};

class ListenerWatch {
 public:
  virtual ~ListenerWatch() = default;
};

// Probes every `interval`. After `failures` failed probes in a row it calls on_dead(why)
// once, from its own thread, and probes no more. on_dead must not destroy the watch.
std::unique_ptr<ListenerWatch> StartListenerWatch(
    ListenerWatchOptions options, std::function<void(const std::string& why)> on_dead);

}  // namespace ktune

#endif  // KTUNE_FRONTENDS_KTUNED_LISTENER_PROBE_H_
