// ktuned: the ktune daemon. Serves ktune.proto on a unix socket (default) or TCP, tunes on
// this host's GPUs through ktune-worker processes, and keeps winners in the SQLite store.
//
//   ktuned [--config FILE] [--listen unix:///PATH | HOST:PORT] [--db FILE] [--templates DIR]
//          [--worker EXE] [--token T] [--max-message-bytes N] [--queue N] [--reflection]
//          [--listener-probe-ms N]
//          [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--insecure]
//          [--remote redis://HOST:PORT[/DB] | rediss://... [--remote-password-file FILE]
//           [--remote-ca PEM] [--remote-lease-ms N] [--remote-timeout-ms N]]
//
// --remote: the fleet's shared tier on Redis behind the local store (server/fleet): lookups
// read through it, tuning jobs take a fleet-wide lease per key and publish their winners.
// Redis being down, slow or full never fails a call (degraded mode, one warning per outage).
//
// --config FILE: one `key = value` per line, keys the long flag names without dashes,
// `#` comments, e.g. `listen = "127.0.0.1:50051"` (CLI11's TOML-like config format; an
// unknown key is an error). Flags on the command line win over the file.
// deploy/ktuned.conf.example lists every key with its default.
//
// TLS is for a HOST:PORT listener only: a unix socket stays plaintext (it is made 0600).
// A listener others can reach (TCP beyond loopback, unix-abstract:) needs TLS or --token;
// --insecure serves it open anyway, and ktuned says so at start.
//
// Descriptors: at start ktuned raises its soft RLIMIT_NOFILE to the hard limit (a flood of
// idle connections that hits EMFILE stops gRPC 1.51's listener for good), and probes its own
// listener every --listener-probe-ms (frontends/ktuned/listener_probe.h): when it stops
// answering, health turns NOT_SERVING and ktuned exits 3, for systemd to restart it.
//
// Exit status: 0 after SIGTERM/SIGINT (the running tune is left resumable), 1 when the
// store, the templates, a TLS file or the listener cannot be set up, 2 for bad flags (or a
// config file that does not parse, TLS flags with a unix socket, an empty --token, or an
// exposed listener with neither TLS nor a token and no --insecure), 3 when the listener
// stopped taking connections.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/engine/engine.h"
#include "server/fleet/fleet_tier.h"
#include "server/fleet/redis_url.h"
#include "frontends/ktuned/ktune_server.h"
#include "frontends/ktuned/listener_guard.h"
#include "frontends/ktuned/tls_pairing.h"

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitListenerDead = 3;
// The least --max-message-bytes: a limit below an artifact's size lets ktuned start and
// then fail every call that returns one. 4 MiB is well above the largest shipped cubin.
constexpr int kMinMessageBytes = 4 << 20;

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "ktuned: %s: %s\n", what.c_str(), s.ToString().c_str());
  return kExitFailed;
}

int Usage(const std::string& what) {
  std::fprintf(stderr, "ktuned: %s\n", what.c_str());
  return kExitUsage;
}

// Reads the PEM file a flag names into *pem; empty path: nothing to read.
absl::Status ReadPem(const char* flag, const std::string& path, std::string* pem) {
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = ktune::ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(flag, " ", path, ": ", text.status().message()));
  }
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM file"));
  }
  *pem = *std::move(text);
  return absl::OkStatus();
}

// Every flag, at its default until parsed.
struct Flags {
  std::string listen = ktune::DefaultDaemonTarget();
  std::string db;
  std::string templates = ktune::DefaultTemplatesDir();
  std::string worker = ktune::DefaultWorkerPath();
  std::string token;
  int max_message_bytes = 64 << 20;
  int queue = 64;
  int fallback_queue = ktune::ServerOptions{}.fallback_queue;
  int64_t artifact_cache_mb = ktune::ServerOptions{}.artifact_cache_bytes >> 20;
  std::string pch = "auto";
  std::string idle_compile = "auto";
  bool reflection = false;
  int listener_probe_ms = 10000;
  bool insecure = false;
  bool token_given = false;  // --token appeared (on the command line or in --config)
  std::string tls_cert, tls_key, tls_client_ca;
  std::string remote, remote_password_file, remote_ca, remote_host_id;
  int64_t remote_lease_ms = absl::ToInt64Milliseconds(ktune::fleet::FleetOptions{}.lease_ttl);
  int64_t remote_timeout_ms = absl::ToInt64Milliseconds(ktune::fleet::FleetOptions{}.timeout);
  bool tls() const { return !tls_cert.empty() || !tls_key.empty() || !tls_client_ca.empty(); }
};

// Parses the command line (and --config FILE) into *f. An exit status when ktuned should
// stop here (--help, or bad usage).
std::optional<int> ParseFlags(int argc, char** argv, Flags* f) {
  CLI::App app("ktuned: the ktune kernel autotuning daemon");
  app.set_config("--config", "", "Read flags from FILE (key = value lines; flags win)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--listen", f->listen, "unix:///PATH or HOST:PORT")->capture_default_str();
  app.add_option("--db", f->db, "SQLite store (default: " + ktune::DefaultDbPath() + ")");
  app.add_option("--templates", f->templates, "Kernel templates folder")->capture_default_str();
  app.add_option("--worker", f->worker, "ktune-worker program")->capture_default_str();
  app.add_option("--token", f->token, "Require 'authorization: Bearer TOKEN' on every call");
  app.add_option("--max-message-bytes", f->max_message_bytes, "Largest gRPC message")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--queue", f->queue, "Most tuning jobs waiting")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--fallback-queue", f->fallback_queue,
                 "Most FALLBACK default compiles waiting (identical requests share one)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--pch", f->pch,
                 "NVRTC precompiled headers: auto (on from " +
                     std::to_string(ktune::kAutoMinThreads) +
                     " compile threads), on or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--idle-compile", f->idle_compile, ktune::IdleCompileHelp())
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--artifact-cache-mb", f->artifact_cache_mb,
                 "Memory for answered artifacts (MiB of cubins; 0: every hit reads the store)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--reflection", f->reflection, "Serve gRPC reflection");
  app.add_option("--listener-probe-ms", f->listener_probe_ms,
                 "Probe the own listener this often; three failures in a row: exit 3 "
                 "(0: never)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--insecure", f->insecure,
               "Serve a listener others can reach (TCP beyond loopback, unix-abstract:) with "
               "neither TLS nor --token");
  app.add_option("--tls-cert", f->tls_cert, "TLS server certificate chain (PEM; TCP only)");
  app.add_option("--tls-key", f->tls_key, "TLS server private key (PEM)");
  app.add_option("--tls-client-ca", f->tls_client_ca,
                 "Require client certificates signed by this CA (PEM): mutual TLS");
  app.add_option("--remote", f->remote,
                 "Fleet tier: redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB] (TLS)");
  app.add_option("--remote-password-file", f->remote_password_file,
                 "File holding the Redis password (AUTH); mode 0600");
  app.add_option("--remote-ca", f->remote_ca,
                 "rediss://: CA certificates (PEM) the Redis server's must chain to "
                 "(default: the system's)");
  app.add_option("--remote-lease-ms", f->remote_lease_ms,
                 "Fleet lease on a key being tuned: expires this long after its holder dies")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--remote-timeout-ms", f->remote_timeout_ms,
                 "Most one call to the fleet tier may take")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--remote-host-id", f->remote_host_id,
                 "This daemon's name in the fleet's leases and records (default: HOSTNAME:PID)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 has its own exit codes per parse error; ktuned keeps one: 2 for bad usage.
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  f->token_given = app.count("--token") > 0;
  return std::nullopt;
}

// --max-message-bytes above its floor, and who may call: an empty --token (it would mean no authentication) is refused, and so is a
// listener others can reach with neither TLS nor a token, unless --insecure. An exit status
// when they do not fit.
std::optional<int> CheckGuard(const Flags& f) {
  if (absl::Status s = ktune::CheckListenAddress(f.listen); !s.ok()) {
    return Usage(absl::StrCat("--listen ", f.listen, ": ", s.message()));
  }
  if (f.max_message_bytes < kMinMessageBytes) {
    return Usage(absl::StrCat("--max-message-bytes: ", f.max_message_bytes,
                              " is below the floor of ", kMinMessageBytes,
                              " (4 MiB): an artifact's cubin must fit in one message"));
  }
  if (f.token_given && f.token.empty()) {
    return Usage("--token: empty; give a token, or leave the flag out for no authentication");
  }
  if (!f.insecure && ktune::IsUnguardedExposure(f.listen, f.tls(), !f.token.empty())) {
    return Usage(absl::StrCat(
        "--listen ", f.listen,
        ktune::ReachOf(f.listen) == ktune::ListenerReach::kAbstract
            ? " is an abstract unix socket, which every local user can reach (no file mode)"
            : " can be reached from other hosts",
        ", and neither TLS (--tls-cert/--tls-key) nor --token guards it; add one, use a "
        "unix:///PATH or loopback address, or give --insecure to serve it open anyway"));
  }
  return std::nullopt;
}

// Checks the TLS flags against each other and reads their files into `options`. An exit
// status when they do not fit or a file cannot be read.
std::optional<int> ReadTls(const Flags& f, ktune::ServerOptions* options) {
  switch (ktune::CheckTlsPairing(absl::StartsWith(f.listen, "unix:"), !f.tls_cert.empty(),
                                 !f.tls_key.empty(), !f.tls_client_ca.empty())) {
    case ktune::TlsMisfit::kUnixSocket:
      return Usage(absl::StrCat("--tls-cert/--tls-key/--tls-client-ca: ", f.listen,
                                " is a unix socket, which stays plaintext (its 0600 mode "
                                "guards it); TLS needs --listen HOST:PORT"));
    case ktune::TlsMisfit::kHalfPair:
      return Usage("--tls-cert and --tls-key go together: give both");
    case ktune::TlsMisfit::kClientCaAlone:
      return Usage("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key too");
    case ktune::TlsMisfit::kNone:
      break;
  }
  for (absl::Status s : {ReadPem("--tls-cert", f.tls_cert, &options->tls_cert_pem),
                         ReadPem("--tls-key", f.tls_key, &options->tls_key_pem),
                         ReadPem("--tls-client-ca", f.tls_client_ca, &options->tls_client_ca_pem)}) {
    if (!s.ok()) return Fail("tls", s);
  }
  return std::nullopt;
}

// Opens the fleet tier that --remote names, if any. An exit status for a bad URL (2) or an
// unreadable password or CA file (1); an unreachable server is not an error (degraded mode).
std::optional<int> OpenFleet(const Flags& f, std::unique_ptr<ktune::fleet::FleetTier>* tier) {
  if (f.remote.empty()) {
    if (!f.remote_password_file.empty() || !f.remote_ca.empty()) {
      return Usage("--remote-password-file and --remote-ca need --remote URL");
    }
    return std::nullopt;
  }
  if (absl::StatusOr<ktune::fleet::RedisUrl> url = ktune::fleet::ParseRedisUrl(f.remote, "--remote");
      !url.ok()) {
    return Usage(std::string(url.status().message()));
  }
  ktune::fleet::FleetOptions o;
  o.host_id = f.remote_host_id;
  o.lease_ttl = absl::Milliseconds(f.remote_lease_ms);
  o.timeout = absl::Milliseconds(f.remote_timeout_ms);
  o.log = [](const std::string& line) { std::fprintf(stderr, "ktuned: fleet: %s\n", line.c_str()); };
  absl::StatusOr<std::unique_ptr<ktune::fleet::FleetTier>> opened =
      ktune::fleet::OpenRedisFleet(f.remote, f.remote_password_file, f.remote_ca, std::move(o));
  if (!opened.ok()) {
    std::fprintf(stderr, "ktuned: %s\n", std::string(opened.status().message()).c_str());
    return kExitFailed;
  }
  *tier = *std::move(opened);
  return std::nullopt;
}

// The fleet tier's counters as one log line.
void LogFleetStats(const ktune::fleet::FleetTier& tier) {
  const ktune::fleet::FleetStats s = tier.stats();
  std::fprintf(stderr,
               "ktuned: fleet %s as %s: %lld hits, %lld misses, %lld published, %lld kept "
               "faster, %lld lease waits, %lld takeovers, %lld refused, %lld errors, %lld "
               "queued, %lld dropped%s\n",
               tier.name().c_str(), tier.host_id().c_str(), static_cast<long long>(s.hits),
               static_cast<long long>(s.misses), static_cast<long long>(s.publishes),
               static_cast<long long>(s.kept_faster), static_cast<long long>(s.lease_waits),
               static_cast<long long>(s.takeovers), static_cast<long long>(s.refused),
               static_cast<long long>(s.errors), static_cast<long long>(s.queued),
               static_cast<long long>(s.dropped), s.degraded ? " (out now)" : "");
}

// Opens the engine (server/engine/engine.h) over the flags' templates, store and worker,
// warning about each template that did not load. An exit status when it cannot be opened.
std::optional<int> OpenEngine(const Flags& f, std::unique_ptr<ktune::Engine>* engine) {
  ktune::EngineOptions o;
  o.templates_dir = f.templates;
  o.db = f.db;
  o.worker = f.worker;
  o.exclusive_store = true;  // one ktuned per store file
  absl::StatusOr<ktune::AutoSwitch> pch = ktune::ParseAutoSwitch("--pch", f.pch);
  if (!pch.ok()) return Fail("flags", pch.status());
  o.pch = *pch;
  absl::StatusOr<ktune::AutoSwitch> idle =
      ktune::ParseAutoSwitch("--idle-compile", f.idle_compile);
  if (!idle.ok()) return Fail("flags", idle.status());
  o.idle_compiles = *idle;
  absl::StatusOr<std::unique_ptr<ktune::Engine>> opened = ktune::OpenEngine(std::move(o));
  if (!opened.ok()) return Fail("engine", opened.status());
  *engine = *std::move(opened);
  std::fprintf(stderr, "ktuned: %d compile threads, idle compiles %s, precompiled headers %s\n",
               (*engine)->pool->threads(), (*engine)->warm != nullptr ? "on" : "off",
               (*engine)->pch_dir ? ("in " + (*engine)->pch_dir->path()).c_str() : "off");
  for (const absl::Status& err : (*engine)->registry->errors()) {
    std::fprintf(stderr, "ktuned: template not loaded: %s\n", std::string(err.message()).c_str());
  }
  if ((*engine)->registry->templates().empty()) {
    return Fail(absl::StrCat("--templates ", f.templates),
                absl::FailedPreconditionError("no template loaded; nothing to serve"));
  }
  return std::nullopt;
}

// The server's options from the flags and the engine, over `options` (its TLS already read).
void FillOptions(const Flags& f, const ktune::Engine& e, ktune::ServerOptions* options) {
  options->listen = f.listen;
  options->registry = e.registry.get();
  options->store = e.store.get();
  options->compiler = e.compiler.get();
  options->pool = e.pool.get();
  options->idle = e.idle.get();
  options->gpu_factory = e.gpu_factory;
  options->queue_capacity = f.queue;
  options->fallback_queue = f.fallback_queue;
  options->artifact_cache_bytes = f.artifact_cache_mb << 20;
  options->token = f.token;
  options->insecure = f.insecure;
  options->max_message_bytes = f.max_message_bytes;
  options->reflection = f.reflection;
  options->listener_probe_interval = absl::Milliseconds(f.listener_probe_ms);
}

// Raises the soft limit on open descriptors to the hard one: every connection holds one,
// and gRPC 1.51's listener dies on the first EMFILE. Says so when it cannot.
void RaiseFdLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  // An unlimited hard limit is not a valid soft one for RLIMIT_NOFILE (fs.nr_open caps it).
  const rlim_t want = r.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : r.rlim_max;
  if (want <= r.rlim_cur) return;
  const rlim_t had = r.rlim_cur;
  r.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
    std::fprintf(stderr, "ktuned: cannot raise the open files limit above %llu\n",
                 static_cast<unsigned long long>(had));
  }
}

// Says where the server listens, then serves until SIGTERM/SIGINT arrives on `signals`.
void Serve(const Flags& f, const std::string& db_path, ktune::KtuneServer& server,
           sigset_t signals) {
  if (server.compile_only()) {
    std::fprintf(stderr, "ktuned: compile-only (lookups and FALLBACK compiles): %s\n",
                 server.compile_only_reason().c_str());
  }
  std::string where = f.listen;
  if (server.port() > 0 && absl::EndsWith(f.listen, ":0")) {
    where = absl::StrCat(f.listen.substr(0, f.listen.size() - 1), server.port());
  }
  if (ktune::IsUnguardedExposure(f.listen, f.tls(), !f.token.empty())) {
    std::fprintf(stderr,
                 "ktuned: WARNING: --insecure: %s is open to anyone who can reach it: no TLS, "
                 "no token\n",
                 where.c_str());
  }
  std::fprintf(stderr, "ktuned: serving on %s%s, store %s\n", where.c_str(),
               f.tls_client_ca.empty() ? (f.tls() ? " (TLS)" : "") : " (mutual TLS)",
               db_path.c_str());
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "ktuned: signal %d: shutting down\n", sig);
    server.Shutdown();
  });
  server.Wait();
  waiter.join();
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil is built with Mutex deadlock detection on, which keeps a lock graph on
  // every Lock (~3 % of a cache hit's CPU, profiled). The tests keep it, and find any lock
  // order inversion there; the daemon does not pay for it on every call.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  RaiseFdLimit();
  Flags flags;
  if (std::optional<int> code = ParseFlags(argc, argv, &flags)) return *code;
  if (std::optional<int> code = CheckGuard(flags)) return *code;
  ktune::ServerOptions options;
  if (std::optional<int> code = ReadTls(flags, &options)) return *code;

  // Signals go to one thread that sigwaits; every other thread inherits them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // After the mask: the tier's publisher thread must not take SIGTERM's default action.
  std::unique_ptr<ktune::fleet::FleetTier> fleet;
  if (std::optional<int> code = OpenFleet(flags, &fleet)) return *code;
  options.fleet = fleet.get();

  std::unique_ptr<ktune::Engine> engine;
  if (std::optional<int> code = OpenEngine(flags, &engine)) return *code;
  FillOptions(flags, *engine, &options);
  std::atomic<bool> listener_dead{false};
  options.on_listener_dead = [&listener_dead](const std::string& why) {
    std::fprintf(stderr, "ktuned: the listener takes no connections (%s): health NOT_SERVING, "
                 "exiting %d\n", why.c_str(), kExitListenerDead);
    listener_dead = true;
    kill(getpid(), SIGTERM);  // to the thread that sigwaits: the usual shutdown
  };
  absl::StatusOr<std::unique_ptr<ktune::KtuneServer>> server =
      ktune::StartKtuneServer(std::move(options));
  if (!server.ok()) return Fail("server", server.status());
  if (fleet != nullptr) {
    std::fprintf(stderr, "ktuned: fleet tier %s as %s (lease %lld ms)\n", fleet->name().c_str(),
                 fleet->host_id().c_str(), static_cast<long long>(flags.remote_lease_ms));
  }
  Serve(flags, engine->db_path, **server, signals);
  server->reset();
  if (fleet != nullptr) {
    fleet->Flush(absl::Seconds(2));  // winners queued in an outage get one last chance
    LogFleetStats(*fleet);
  }
  return listener_dead ? kExitListenerDead : 0;
}
