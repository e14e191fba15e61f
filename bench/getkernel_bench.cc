// getkernel_bench: how fast ktuned answers a cache hit, over a unix socket and over TCP, with
// 1 to 64 concurrent clients, while idle and while a tune loads the CPU.
//
// The daemon runs in this process: StartKtuneServer with the real NVRTC compiler (so a
// background tune really compiles, as on a build machine), a SQLite store in a temporary
// folder, the shipped templates, and a FakeGpu whose Measure sleeps --measure-ms (there is no
// GPU here; the sleep stretches a tune the way timing on a GPU would, and leaves the CPU to
// the compiles). ktuned listens on one address, so each transport gets its own server in
// turn over the same store, as a deployment picks one. The first server tunes rmsnorm bf16
// tokens=16,hidden=4096 into the store; every measured call is a CACHE_ONLY hit of it.
//
// Each client is a thread with its own KtuneClient (client/lib Connect), as separate
// inference-server processes would have, calling GetKernel back to back for --seconds. The
// latency is steady_clock around the client call, so it includes the client's sha256 check
// of the cubin. The matrix runs twice: idle, and while a Tune (force, exhaustive) of
// elementwise f32 n=1048576 runs through another client (started again, with a new n, when it
// ends; a cell waits for the next one when the current one would not outlast it, and a tune
// that still ends during a cell is reported). Prints a Markdown table for bench/RESULTS.md; exits 1 when any
// call failed (or setup failed), 0 otherwise.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/lib/ktune_client.h"
#include "server/base/paths.h"
#include "frontends/ktuned/ktune_server.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/tuning/compile_request.h"
#include "tests/testing/fakes.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Nearest rank: the smallest value with at least p of the samples at or below it.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

// A FakeGpu that takes `measure_ms` per candidate, as timing on a GPU would, and gives each
// candidate a time of its own (from its name) so a tune has one winner.
class SlowFakeGpu : public testing::FakeGpu {
 public:
  explicit SlowFakeGpu(int measure_ms) : measure_ms_(measure_ms) {
    script = [](const std::string& name) {
      return testing::OkMeasurement(1000.0 + std::hash<std::string>{}(name) % 1000);
    };
  }
  absl::StatusOr<v1::Measurement> Measure(const v1::KernelBinary& candidate,
                                          const v1::TimingOptions& timing) override {
    absl::SleepFor(absl::Milliseconds(measure_ms_));
    return FakeGpu::Measure(candidate, timing);
  }

 private:
  const int measure_ms_;
};

// The daemon's open connections: this process's accepted (not listening) sockets bound to
// `socket_path` or to TCP `port` (getsockname on every fd; this VM's /proc/net/unix lists no
// sockets). A diagnostic: fds may come and go while it looks.
int CountServerConnections(const std::string& socket_path, int port) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    int fd;
    if (!absl::SimpleAtoi(e->d_name, &fd)) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    int listening = 0;
    socklen_t optlen = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || listening) continue;
    if (addr.ss_family == AF_UNIX) {
      const auto* un = reinterpret_cast<const sockaddr_un*>(&addr);
      // gRPC binds "unix:///a/b" as "///a/b": the same file.
      absl::string_view path = un->sun_path;
      while (absl::StartsWith(path, "//")) path.remove_prefix(1);
      n += !socket_path.empty() && path == socket_path;
    } else if (addr.ss_family == AF_INET) {
      n += port > 0 && ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port) == port;
    } else if (addr.ss_family == AF_INET6) {
      n += port > 0 && ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port) == port;
    }
  }
  closedir(d);
  return n;
}

// Keeps a tune running against one daemon: a Tune stream (force, exhaustive) on its own
// client, started again with a new n whenever it ends, until Stop(). Every start uses a new
// key so it never joins or resumes an earlier job (a cancelled job stays resumable).
class TuneLoad {
 public:
  struct Snapshot {
    int64_t started = 0;   // streams started
    int64_t finished = 0;  // streams that ended (done or failed)
    bool running = false;
    int64_t done = 0, total = 0;  // the current stream's last progress
    int64_t n = 0;                // its key's n
    absl::Time since;             // when it started
    std::string last_end;         // how the last stream ended
  };

  TuneLoad(std::string target, int64_t* next_n) : target_(std::move(target)), next_n_(next_n) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~TuneLoad() { Stop(); }

  // Waits until the current stream has reported a candidate (the compiles are under way).
  bool WaitActive(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto active = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return (s_.running && s_.done > 0) || stopping_;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&active), timeout) && !stopping_;
  }
  // Waits until the stream running now (if any) has ended and the next has reported a
  // candidate.
  bool WaitNext(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    {
      absl::MutexLock lock(&mu_);
      const int64_t started = s_.started;
      auto next = [this, started]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return s_.started > started || stopping_;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&next), deadline)) return false;
    }
    return WaitActive(deadline - absl::Now());
  }
  Snapshot Get() {
    absl::MutexLock lock(&mu_);
    return s_;
  }
  // Cancels this client's stream; the daemon's job goes on until the server shuts down.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    absl::StatusOr<std::unique_ptr<client::KtuneClient>> c =
        client::Connect(target_, client::ClientOptions{});
    if (!c.ok()) {
      absl::MutexLock lock(&mu_);
      s_.last_end = c.status().ToString();
      return;
    }
    for (;;) {
      client::TuneRequest req;
      req.template_id = "elementwise";
      req.dtype = "f32";
      req.strategy = "exhaustive";
      req.force = true;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        s_.n = *next_n_;
        *next_n_ += 1024;
        req.shape = {{"n", s_.n}};
        ++s_.started;
        s_.running = true;
        s_.done = s_.total = 0;
        s_.since = absl::Now();
      }
      absl::StatusOr<client::KernelArtifact> a =
          (*c)->Tune(req, [this](const client::TuneProgress& p) {
            absl::MutexLock lock(&mu_);
            s_.done = p.done;
            s_.total = p.total;
            return !stopping_;
          });
      absl::MutexLock lock(&mu_);
      s_.running = false;
      ++s_.finished;
      s_.last_end = a.ok() ? absl::StrCat("finished ", s_.done, "/", s_.total, " candidates")
                           : a.status().ToString();
      if (!a.ok() && !stopping_) {
        // A failing tune would turn the load off: say so and do not spin.
        std::cerr << "background tune failed: " << a.status() << "\n";
        absl::SleepFor(absl::Milliseconds(200));
      }
    }
  }

  const std::string target_;
  int64_t* const next_n_;  // shared by the loads of every server; guarded by mu_ of the one running
  absl::Mutex mu_;
  Snapshot s_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

struct Cell {
  std::string transport, load;
  int clients = 0;
  int64_t calls = 0, errors = 0;
  double wall_s = 0, p50 = 0, p99 = 0, max = 0;
  // Process CPU time (user + system, every thread: the clients and the daemon) over the
  // cell, per call. Unlike latency it hardly moves with what else the machine runs, so it
  // compares daemon and client builds on a busy machine; idle cells only (a tune adds its
  // compiles).
  double cpu_us_per_call = 0;
  int connections = -1;
  std::string tune;         // the background tune across the cell; empty when idle
  bool tune_ended = false;  // it ended during the cell
  std::string first_error;
};

double ProcessCpuSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Hit {
  std::string sha256;
  size_t cubin_bytes = 0;
};

// `clients` threads, each with its own client, calling GetKernel CACHE_ONLY for `seconds`.
Cell RunCell(const std::string& target, const std::string& socket_path, int port, int clients,
             double seconds, const client::KernelRequest& request, const Hit& want,
             bool share_connections) {
  Cell cell;
  cell.clients = clients;
  std::vector<std::vector<double>> lat(clients);
  std::vector<int64_t> errors(clients, 0);
  std::vector<std::string> first_error(clients);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<Clock::rep> end_rep{0};
  std::vector<Clock::time_point> finished(clients);

  auto worker = [&](int i) {
    client::ClientOptions o;
    // WAR: gRPC shares one connection among a process's channels whose arguments are equal
    // (its global subchannel pool), so 64 Connects would be one HTTP/2 connection, unlike 64
    // inference-server processes. A receive limit a few bytes apart per client makes each
    // channel's arguments its own; client/lib has no option for a private subchannel pool.
    if (!share_connections) o.max_receive_message_bytes += i + 1;  // + 1: not the tune's
    auto fail = [&](const std::string& what) {
      if (errors[i]++ == 0) first_error[i] = what;
    };
    absl::StatusOr<std::unique_ptr<client::KtuneClient>> c = client::Connect(target, o);
    if (!c.ok()) {
      fail(c.status().ToString());
      ready.fetch_add(1);
      return;
    }
    // Warm-up, not timed: the connection and the first call's setup.
    for (int k = 0; k < 3; ++k) {
      absl::StatusOr<client::KernelArtifact> a = (*c)->GetKernel(request);
      if (!a.ok()) fail(absl::StrCat("warm-up: ", a.status().ToString()));
    }
    lat[i].reserve(1 << 16);
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    const Clock::time_point end{Clock::duration(end_rep.load())};
    for (;;) {
      const Clock::time_point t0 = Clock::now();
      if (t0 >= end) break;
      absl::StatusOr<client::KernelArtifact> a = (*c)->GetKernel(request);
      const Clock::time_point t1 = Clock::now();
      lat[i].push_back(Us(t1 - t0));
      if (!a.ok()) {
        fail(a.status().ToString());
      } else if (a->cubin_sha256 != want.sha256 || a->cubin.size() != want.cubin_bytes) {
        fail(absl::StrCat("wrong artifact: ", a->cubin.size(), " bytes, sha256 ", a->cubin_sha256));
      }
    }
    finished[i] = Clock::now();
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) threads.emplace_back(worker, i);
  while (ready.load() < clients) absl::SleepFor(absl::Milliseconds(1));
  const double cpu_start_s = ProcessCpuSeconds();
  const Clock::time_point start = Clock::now();
  const auto length = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  end_rep.store((start + length).time_since_epoch().count());
  go.store(true, std::memory_order_release);
  // Midway, count the daemon's connections (each client's own, unless shared).
  std::this_thread::sleep_for(length / 2);
  cell.connections = CountServerConnections(socket_path, port);
  for (std::thread& t : threads) t.join();
  const double cpu_s = ProcessCpuSeconds() - cpu_start_s;

  std::vector<double> all;
  Clock::time_point last = start;
  for (int i = 0; i < clients; ++i) {
    all.insert(all.end(), lat[i].begin(), lat[i].end());
    cell.errors += errors[i];
    if (cell.first_error.empty()) cell.first_error = first_error[i];
    last = std::max(last, finished[i]);
  }
  std::sort(all.begin(), all.end());
  cell.calls = static_cast<int64_t>(all.size());
  cell.wall_s = std::chrono::duration<double>(last - start).count();
  cell.p50 = Percentile(all, 0.50);
  cell.p99 = Percentile(all, 0.99);
  cell.max = all.empty() ? 0 : all.back();
  cell.cpu_us_per_call = cell.calls > 0 ? cpu_s * 1e6 / cell.calls : 0;
  return cell;
}

int Cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

std::string LoadAverage() {
  double l[3];
  if (getloadavg(l, 3) != 3) return "?";
  return absl::StrFormat("%.2f %.2f %.2f", l[0], l[1], l[2]);
}

int Run(int argc, char** argv) {
  // As ktuned does (frontends/ktuned/ktuned_main.cc): no lock graph on every Mutex::Lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"getkernel_bench: cache-hit GetKernel latency and throughput of ktuned"};
  double seconds = 3;
  std::vector<int> client_counts = {1, 8, 64};
  std::vector<std::string> transports = {"unix", "tcp"};
  std::vector<std::string> loads = {"idle", "tune"};
  int64_t artifact_cache_mb = ServerOptions{}.artifact_cache_bytes >> 20;
  std::string templates_dir, db;
  int measure_ms = 2;
  int compile_threads = 0;
  bool share_connections = false;
  app.add_option("--seconds", seconds, "Length of each cell (transport x clients x load)")
      ->capture_default_str();
  app.add_option("--clients", client_counts, "Concurrent clients, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--artifact-cache-mb", artifact_cache_mb,
                 "ktuned's in-memory artifact cache (0: every hit reads the store)")
      ->capture_default_str();
  app.add_option("--loads", loads, "idle, tune or both")->delimiter(',')->capture_default_str();
  app.add_option("--transports", transports, "unix, tcp or both")->delimiter(',')->capture_default_str();
  app.add_option("--templates", templates_dir, "Templates folder (default: shipped)");
  app.add_option("--db", db,
                 "SQLite store to use and keep (default: a temporary one); a reused store "
                 "skips the setup tune, and its interrupted background tunes get resumed");
  app.add_option("--measure-ms", measure_ms, "Fake GPU time per candidate")->capture_default_str();
  app.add_option("--compile-threads", compile_threads,
                 "Daemon compile threads (0: one per core, ktuned's default)")
      ->capture_default_str();
  app.add_flag("--share-connections", share_connections,
               "Let gRPC put every client on one connection (see RunCell)");
  CLI11_PARSE(app, argc, argv);
  if (seconds <= 0 || client_counts.empty()) return std::cerr << "bad --seconds/--clients\n", 2;
  for (const std::string& t : transports) {
    if (t != "unix" && t != "tcp") return std::cerr << "--transports: unix or tcp\n", 2;
  }
  for (const std::string& l : loads) {
    if (l != "idle" && l != "tune") return std::cerr << "--loads: idle or tune\n", 2;
  }

  char dir_template[] = "/tmp/ktune-gkbench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return std::cerr << "mkdtemp failed\n", 1;
  const std::string dir = dir_template;
  auto cleanup = [&] { std::system(absl::StrCat("rm -rf ", dir).c_str()); };

  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
      LoadTemplateRegistry(templates_dir.empty() ? DefaultTemplatesDir() : templates_dir);
  if (!registry.ok()) return std::cerr << registry.status() << "\n", 1;
  absl::StatusOr<std::unique_ptr<store::Store>> store = store::OpenSqliteStore(db.empty() ? dir + "/ktune.db" : db);
  if (!store.ok()) return std::cerr << store.status() << "\n", 1;
  // No cubin cache: every tune compiles all its candidates, as a first tune of a key does.
  absl::StatusOr<std::unique_ptr<Compiler>> compiler = NewTemplateCompiler(**registry, nullptr);
  if (!compiler.ok()) return std::cerr << compiler.status() << "\n", 1;

  client::KernelRequest request;
  request.template_id = "rmsnorm";
  request.dtype = "bf16";
  request.shape = {{"tokens", 16}, {"hidden", 4096}};
  request.policy = client::Policy::kCacheOnly;
  request.deadline = absl::Seconds(10);

  const int cores = Cores();
  std::printf("getkernel_bench: %d cores, %.1f s per cell, clients %s, fake GPU %d ms per "
              "candidate, load average %s\n",
              cores, seconds, absl::StrJoin(client_counts, ",").c_str(), measure_ms,
              LoadAverage().c_str());

  std::vector<Cell> cells;
  std::vector<std::string> floors;  // one Markdown row per transport
  Hit want;
  int64_t next_n = 1048576;
  bool setup_failed = false;
  double verify_us = 0;
  for (const std::string& transport : transports) {
    ServerOptions o;
    std::string socket_path;
    if (transport == "unix") {
      socket_path = dir + "/run/ktuned.sock";
      o.listen = "unix://" + socket_path;
    } else {
      o.listen = "127.0.0.1:0";  // loopback only, any free port
    }
    o.registry = registry->get();
    o.store = store->get();
    o.compiler = compiler->get();
    o.compile_threads = compile_threads;
    o.artifact_cache_bytes = artifact_cache_mb << 20;
    o.gpu_factory = [measure_ms](int ordinal) -> absl::StatusOr<std::unique_ptr<Gpu>> {
      if (ordinal > 0) return absl::NotFoundError("one fake GPU");
      return std::make_unique<SlowFakeGpu>(measure_ms);
    };
    absl::StatusOr<std::unique_ptr<KtuneServer>> server = StartKtuneServer(std::move(o));
    if (!server.ok()) {
      std::cerr << transport << ": " << server.status() << "\n";
      setup_failed = true;
      break;
    }
    const int port = (*server)->port();
    const std::string target =
        transport == "unix" ? "unix://" + socket_path : absl::StrCat("127.0.0.1:", port);
    std::printf("\n%s: daemon at %s\n", transport.c_str(), target.c_str());

    // The entry every call hits: tuned on the first server, found in the store by the next.
    {
      absl::StatusOr<std::unique_ptr<client::KtuneClient>> c =
          client::Connect(target, client::ClientOptions{});
      absl::StatusOr<client::KernelArtifact> a = absl::UnknownError("no client");
      if (c.ok()) {
        a = (*c)->GetKernel(request);
        if (want.sha256.empty() && absl::IsNotFound(a.status())) {
          client::KernelRequest tune = request;
          tune.policy = client::Policy::kTune;
          tune.deadline = absl::Minutes(5);
          const Clock::time_point t0 = Clock::now();
          a = (*c)->GetKernel(tune);
          std::printf("tuned rmsnorm bf16 tokens=16,hidden=4096 (exhaustive, real NVRTC) in %.1f s\n",
                      std::chrono::duration<double>(Clock::now() - t0).count());
          if (a.ok()) a = (*c)->GetKernel(request);  // the stored entry, as the hits see it
        }
      } else {
        a = c.status();
      }
      if (!a.ok()) {
        std::cerr << "setup: " << a.status() << "\n";
        setup_failed = true;
        break;
      }
      if (want.sha256.empty()) {
        want = {a->cubin_sha256, a->cubin.size()};
        std::printf("entry %lld: cubin %zu bytes, params %s\n",
                    static_cast<long long>(a->entry_id), a->cubin.size(),
                    absl::StrJoin(a->params, ",", absl::PairFormatter("=")).c_str());
        // What the client's sha256 check costs per call (it is inside every latency below).
        std::vector<double> v;
        for (int k = 0; k < 200; ++k) {
          const Clock::time_point t0 = Clock::now();
          absl::Status s = client::VerifyArtifact(*a);
          v.push_back(Us(Clock::now() - t0));
          if (!s.ok()) std::cerr << s << "\n";
        }
        std::sort(v.begin(), v.end());
        verify_us = Percentile(v, 0.5);
      } else if (a->cubin_sha256 != want.sha256) {
        std::cerr << "setup: the second server answers another cubin\n";
        setup_failed = true;
        break;
      }
    }

    // The floor: the same client stack and transport calling ListTemplates, whose handler
    // does next to nothing, so what is left is gRPC and the machine.
    {
      absl::StatusOr<std::unique_ptr<client::KtuneClient>> c = client::Connect(target, {});
      std::vector<double> v;
      int64_t floor_errors = 0;
      if (c.ok()) {
        for (int k = 0; k < 3; ++k) (*c)->ListTemplates().IgnoreError();
        const Clock::time_point end =
            Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds));
        while (Clock::now() < end) {
          const Clock::time_point t0 = Clock::now();
          if (!(*c)->ListTemplates().ok()) ++floor_errors;
          v.push_back(Us(Clock::now() - t0));
        }
      }
      std::sort(v.begin(), v.end());
      floors.push_back(absl::StrFormat("| %s | ListTemplates | 1 | %.0f | %.0f | %.0f | %lld |",
                                       transport, v.size() / seconds, Percentile(v, 0.5),
                                       Percentile(v, 0.99), static_cast<long long>(floor_errors)));
    }

    for (const std::string& load : loads) {
      std::unique_ptr<TuneLoad> tune;
      if (load == "tune") tune = std::make_unique<TuneLoad>(target, &next_n);
      for (int clients : client_counts) {
        if (tune && !tune->WaitActive(absl::Seconds(60))) {
          std::cerr << "background tune did not start: " << tune->Get().last_end << "\n";
          setup_failed = true;
          break;
        }
        if (tune) {
          // A tune about to end would leave part of the cell idle: when the current one's
          // pace says it has less than twice the cell left, take the next one instead.
          const TuneLoad::Snapshot s = tune->Get();
          const double elapsed = absl::ToDoubleSeconds(absl::Now() - s.since);
          const double left_s = elapsed / std::max<int64_t>(s.done, 1) * (s.total - s.done);
          if (left_s < 2 * seconds + 1 && !tune->WaitNext(absl::Seconds(120))) {
            std::cerr << "background tune did not start again: " << tune->Get().last_end << "\n";
            setup_failed = true;
            break;
          }
        }
        const TuneLoad::Snapshot before = tune ? tune->Get() : TuneLoad::Snapshot{};
        const std::string load_avg = LoadAverage();
        Cell cell = RunCell(target, socket_path, transport == "tcp" ? port : 0, clients, seconds,
                            request, want, share_connections);
        cell.transport = transport;
        cell.load = load;
        if (tune) {
          const TuneLoad::Snapshot after = tune->Get();
          cell.tune_ended = after.finished != before.finished || !after.running;
          cell.tune = cell.tune_ended
                          ? absl::StrCat("ENDED during the cell (", after.last_end, "); restarted")
                          : absl::StrCat("running: n=", after.n, ", ", before.done, "->",
                                         after.done, " of ", after.total);
        }
        std::printf("  %-4s %-4s %2d clients: %8lld calls %9.0f/s  p50 %7.1f  p99 %7.1f  max %8.1f us"
                    "  cpu %6.1f us/call  errors %lld  conns %d  load avg %s%s%s\n",
                    transport.c_str(), load.c_str(), clients, static_cast<long long>(cell.calls),
                    cell.calls / cell.wall_s, cell.p50, cell.p99, cell.max, cell.cpu_us_per_call,
                    static_cast<long long>(cell.errors), cell.connections, load_avg.c_str(),
                    cell.tune.empty() ? "" : "  tune ", cell.tune.c_str());
        if (!cell.first_error.empty()) std::printf("    first error: %s\n", cell.first_error.c_str());
        std::fflush(stdout);
        cells.push_back(cell);
      }
      if (tune) tune->Stop();
      if (setup_failed) break;
    }
    (*server)->Shutdown();  // cancels the background job (left resumable; never resumed)
    if (setup_failed) break;
  }
  cleanup();
  if (setup_failed) return 1;

  // The table for bench/RESULTS.md.
  int64_t errors = 0;
  int ended = 0;
  for (const Cell& c : cells) errors += c.errors, ended += c.tune_ended;
  std::printf("\n### GetKernel cache hit: latency and throughput (getkernel_bench)\n\n");
  std::printf("%s, build machine: %d cores (`nproc`). `getkernel_bench --seconds %g --clients %s`: the\n"
              "daemon in-process (real NVRTC, fake GPU %d ms per candidate, SQLite store), one\n"
              "client (own connection) per thread calling GetKernel CACHE_ONLY back to back for\n"
              "%g s per cell. The hit: rmsnorm bf16 tokens=16,hidden=4096, cubin %zu bytes; the\n"
              "client's sha256 check of it (%.1f us) is inside every latency. \"tune\": a Tune\n"
              "(force, exhaustive) of elementwise f32 n=1048576 compiling on the daemon's %s\n"
              "compile threads throughout the cell.\n\n",
              absl::FormatTime("%Y-%m-%d", absl::Now(), absl::LocalTimeZone()).c_str(), cores,
              seconds, absl::StrJoin(client_counts, ",").c_str(), measure_ms, seconds,
              want.cubin_bytes, verify_us,
              compile_threads > 0 ? absl::StrCat(compile_threads).c_str() : "default (one per core)");
  std::printf("| transport | load | clients | calls/s | p50 (us) | p99 (us) | max (us) | CPU us/call | errors | goal p50 < 150, p99 < 500 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Cell& c : cells) {
    const bool met = c.p50 < 150 && c.p99 < 500;
    std::printf("| %s | %s%s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %lld | %s |\n",
                c.transport.c_str(), c.load.c_str(), c.tune_ended ? " (ended early)" : "",
                c.clients, c.calls / c.wall_s, c.p50, c.p99, c.max, c.cpu_us_per_call,
                static_cast<long long>(c.errors),
                met ? "met" : (c.p50 < 150 ? "**p99 missed**" : "**missed**"));
  }
  if (ended > 0) std::printf("\n%d cell(s) saw the background tune end early (see above).\n", ended);
  std::printf("\nThe floor, idle, one client: a ListTemplates call through the same client library\n"
              "and transport (its handler does next to nothing).\n\n");
  std::printf("| transport | call | clients | calls/s | p50 (us) | p99 (us) | errors |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const std::string& f : floors) std::printf("%s\n", f.c_str());
  std::printf("\nerrors: %lld\n", static_cast<long long>(errors));
  return errors > 0 ? 1 : 0;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) { return ktune::Run(argc, argv); }
