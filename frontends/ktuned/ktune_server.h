// ktuned's gRPC server: the Ktune service (ktune.proto) over the tuning queue, the store
// and the compiler, plus gRPC health checking and, when asked, reflection.
//
// The handlers are thin and never block a reaction on tuning or compiling: they validate
// and convert, ask the KernelResolver (server/tuning/kernel_resolver.h) which kernel to
// answer with, and finish their reactors from its callback (at once for store lookups, from
// the TuningQueue or the resolver's threads otherwise). GetKernels resolves each of its keys
// the same way and answers once the last is in (kernel_batch.h). A client deadline that
// passes first gets DEADLINE_EXCEEDED while the job goes on.
//
// Thread-safe. Shutdown() may be called from any thread (a signal-watching one, say).
#ifndef KTUNE_SERVER_SERVICE_KTUNE_SERVER_H_
#define KTUNE_SERVER_SERVICE_KTUNE_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/compile/compile_pool.h"
#include "server/compile/compiler.h"
#include "server/engine/engine.h"
#include "server/fleet/fleet_tier.h"
#include "server/gpu/gpu.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/templates/target.h"

namespace ktune {

struct ServerOptions {
  // "unix:///run/ktune/ktuned.sock" (the socket is made 0600, a folder created for it
  // 0700) or "HOST:PORT" (port 0: any free port, see KtuneServer::port()).
  std::string listen;
  // Must outlive the server. The compiler must be thread-safe (Compiler's contract).
  const TemplateRegistry* registry = nullptr;
  store::Store* store = nullptr;
  Compiler* compiler = nullptr;
  // GPUs are ordinals 0, 1, ... until the factory or the Gpu's Info() fails. No GPU (a
  // null factory, or ordinal 0 failing): compile-only, saying why.
  GpuFactory gpu_factory;
  int max_gpus = 16;
  // Jobs waiting (not running) over all GPUs; past it, RESOURCE_EXHAUSTED.
  int queue_capacity = 64;
  // The compile pool over `compiler` (the engine's; must outlive the server); null: the
  // server makes its own with compile_threads (<= 0: one per core).
  CompilePool* pool = nullptr;
  int compile_threads = 0;
  // Where guided and random jobs compile the rest of their space on idle cores (the
  // engine's; must outlive the server); null: they do not.
  IdlePool* idle = nullptr;
  // Threads for FALLBACK's neighbour search and default-config compiles.
  int fallback_threads = 2;
  // Distinct FALLBACK compiles waiting for one of those threads (identical requests share
  // one); past it, RESOURCE_EXHAUSTED.
  int fallback_queue = 64;
  // Cubin bytes of fresh hits kept in memory (frontends/ktuned/artifact_cache.h); 0: every
  // GetKernel reads the store.
  int64_t artifact_cache_bytes = 256 << 20;
  // When not empty, every Ktune call needs metadata "authorization: Bearer <token>".
  std::string token;
  // Serve a listener others can reach (TCP beyond loopback, unix-abstract) with neither
  // TLS nor a token (frontends/ktuned/listener_guard.h); false: such a listener is
  // kInvalidArgument.
  bool insecure = false;
  int max_message_bytes = 64 << 20;
  // A connection that has not sent its first HTTP/2 frames (after TLS, if any) this long
  // after it was accepted is closed (GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, gRPC's default
  // 120 s), so idle connections cannot pin the descriptors for long.
  absl::Duration first_frame_timeout = absl::Seconds(10);
  // Concurrent calls on one connection (GRPC_ARG_MAX_CONCURRENT_STREAMS); gRPC 1.51 has no
  // cap on the number of connections.
  int max_concurrent_streams = 256;
  // How often the server probes its own listener from outside
  // (frontends/ktuned/listener_probe.h); zero: never. After three failed probes in a row
  // health turns NOT_SERVING for good and on_listener_dead is called.
  absl::Duration listener_probe_interval = absl::ZeroDuration();
  // Called once, from the probe's thread, with why the listener is dead (ktuned exits so
  // that its unit restarts it). Must not call Shutdown() or destroy the server itself.
  std::function<void(const std::string& why)> on_listener_dead;
  bool reflection = false;
  // TLS for a TCP listener: the server's certificate chain and private key, PEM text (not
  // file names). Both or neither; empty: plaintext. A unix socket is always plaintext (its
  // file mode guards it): TLS with a unix:// listen address is kInvalidArgument.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // Mutual TLS: when not empty (REQUIRES the two above), every client must present a
  // certificate that chains to one of these CA certificates (PEM); others fail the
  // handshake.
  std::string tls_client_ca_pem;
  // The target for DEFAULT compiles on a compile-only host whose store names no device.
  TargetInfo compile_only_target;
  // The fleet's shared tier behind `store` (ktuned --remote); null: none. Must outlive the
  // server. Lookups read through it, jobs run under its leases and publish their winners,
  // GetDevices reports its counters; an outage never fails a call (fleet_tier.h).
  fleet::FleetTier* fleet = nullptr;
};

class KtuneServer {
 public:
  virtual ~KtuneServer() = default;
  // The port a TCP listener got (0 for a unix socket).
  virtual int port() const = 0;
  // True when no GPU is usable: lookups and FALLBACK compiles only.
  virtual bool compile_only() const = 0;
  // Why there is no usable GPU; empty when there is one.
  virtual std::string compile_only_reason() const = 0;
  // What gRPC health checking says (for "" and "ktune.v1.Ktune" alike): false once the
  // listener probe found the listener dead (ServerOptions::listener_probe_interval); false
  // on a GPU host while none of its GPUs is healthy; always true compile-only, where lookups serve.
  // A GPU turns unhealthy when a call on it fails with kUnavailable or kInternal (a job
  // that cannot start or goes on), healthy again on its next successful call (the next
  // job's Info()). GetDevices reports each GPU's health and why not.
  virtual bool serving() const = 0;
  // Stops accepting calls, cancels queued tuning jobs and stops the running ones (they stay
  // resumable), finishes the calls in flight, and returns. Idempotent.
  virtual void Shutdown() = 0;
  // Blocks until Shutdown has finished.
  virtual void Wait() = 0;
};

// Probes the GPUs, starts the tuning queue and the gRPC server. kInvalidArgument for
// missing options, a TLS setting that does not fit, or an unguarded exposed listener
// without `insecure` (see ServerOptions); kUnavailable when
// it cannot listen on `listen` (or the TLS key and certificate are not usable).
absl::StatusOr<std::unique_ptr<KtuneServer>> StartKtuneServer(ServerOptions options);

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_KTUNE_SERVER_H_
