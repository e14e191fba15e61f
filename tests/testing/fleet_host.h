// FleetHost: one host of a test fleet, in this process: its own in-memory store, a
// FakeCompiler whose cubins are ELF files (fake_cubin.h; the fleet tier's check refuses
// anything else), a FakeGpu, a tuning queue and a kernel resolver, all over a FleetTier on
// the RemoteTier the test gives (a FakeRemoteTier or Redis), as ktuned wires them.
//
// Free of GoogleTest, so bench/fleet_bench.cc runs hosts the same way. Not thread-safe; one
// thread drives it (its queue runs jobs on its own thread).
#ifndef KTUNE_TESTS_TESTING_FLEET_HOST_H_
#define KTUNE_TESTS_TESTING_FLEET_HOST_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/compile/compile_pool.h"
#include "server/fleet/fleet_tier.h"
#include "server/tuning/fleet_sync.h"
#include "server/tuning/kernel_resolver.h"
#include "tests/testing/fake_cubin.h"
#include "tests/testing/fakes.h"
#include "tests/testing/resolve_testing.h"

namespace ktune::testing {

// FakeCompiler's results with the cubin an ELF file holding each kernel as a section.
class ElfFakeCompiler : public FakeCompiler {
 public:
  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override {
    absl::StatusOr<CompileResult> r = FakeCompiler::Compile(request);
    if (!r.ok() || !r->ok) return r;
    std::vector<std::string> names;
    for (const CompiledKernel& k : r->kernels) names.push_back(k.lowered_name);
    r->cubin = MakeFakeCubin(names, static_cast<int64_t>(std::hash<std::string>()(r->cubin)));
    return r;
  }
};

class FleetHost {
 public:
  // `options.host_id` names the host; its warnings go to `log` when given (read it once the
  // host's jobs are done).
  FleetHost(const TemplateRegistry* registry, std::unique_ptr<fleet::RemoteTier> remote,
            fleet::FleetOptions options, std::vector<std::string>* log = nullptr)
      : registry_(registry) {
    store = *store::OpenSqliteStore(":memory:");  // an in-memory store always opens
    pool = std::make_unique<CompilePool>(&compiler, 2);
    if (log != nullptr) {
      options.log = [log, name = options.host_id](const std::string& line) {
        static absl::Mutex mu(absl::kConstInit);
        absl::MutexLock lock(&mu);
        log->push_back(absl::StrCat(name, ": ", line));
      };
    }
    tier = std::make_unique<fleet::FleetTier>(std::move(remote), std::move(options));
    sync = std::make_unique<FleetSync>(tier.get(), store.get(), registry);
    std::vector<TuningEnv> envs = {{registry, &compiler, pool.get(), &gpu, store.get()}};
    queue = std::make_unique<TuningQueue>(std::move(envs), 64, sync.get());
    KernelResolverOptions o;
    o.store = store.get();
    o.compiler = &compiler;
    o.queue = queue.get();
    o.devices.push_back(*gpu.Info());
    o.fleet = sync.get();
    resolver = NewKernelResolver(std::move(o));
  }
  ~FleetHost() {
    resolver.reset();
    queue.reset();
  }

  KernelQuery Query(int64_t n) { return TinyQuery(*registry_, *resolver, n); }

  absl::StatusOr<ResolvedKernel> Resolve(int64_t n, KernelPolicy policy) {
    return ResolveAndWait(*resolver, Query(n), policy);
  }

  static SearchSettings Exhaustive() {
    SearchSettings s;
    s.strategy = "exhaustive";
    return s;
  }

  // A tuning job for `n` through the queue (as ktuned's Tune), waited for.
  absl::StatusOr<TuneResult> Tune(int64_t n, bool yield_to_lease = false) {
    absl::StatusOr<std::shared_ptr<TuningJob>> job =
        resolver->Tune(Query(n), Exhaustive(), yield_to_lease);
    if (!job.ok()) return job.status();
    return (*job)->Wait(absl::Now() + absl::Seconds(20));
  }
  // Starts one and returns at once.
  std::shared_ptr<TuningJob> StartTune(int64_t n) {
    return *resolver->Tune(Query(n), Exhaustive(), false);
  }

  // The full key of `n` on this host, as the tier names it.
  fleet::RemoteKey Key(int64_t n) {
    return fleet::RemoteKey{{resolver->DeviceModel(0), "tiny", "f32", absl::StrCat("n=", n)},
                            (*registry_->Get("tiny"))->source_hash(),
                            compiler.Version()};
  }

  const TemplateRegistry* registry_;
  std::unique_ptr<store::Store> store;
  ElfFakeCompiler compiler;
  std::unique_ptr<CompilePool> pool;
  FakeGpu gpu;  // gpu.problems counts the jobs that really ran on this host
  std::unique_ptr<fleet::FleetTier> tier;
  std::unique_ptr<FleetSync> sync;
  std::unique_ptr<TuningQueue> queue;
  std::unique_ptr<KernelResolver> resolver;
};

// Every host runs the keys of one spec at once, as `ktune tune --spec --daemon` does on
// each: a key another host is tuning is passed over (yield_to_lease), then taken up again
// after the others. Returns the errors of keys that failed, in no particular order.
inline std::vector<std::string> RunSpecOnHosts(const std::vector<std::unique_ptr<FleetHost>>& hosts,
                                               const std::vector<int64_t>& keys) {
  std::vector<std::string> failures;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (const auto& h : hosts) {
    threads.emplace_back([&, host = h.get()] {
      std::vector<int64_t> later;
      for (int pass = 0; pass < 2; ++pass) {
        for (int64_t n : pass == 0 ? keys : later) {
          absl::StatusOr<TuneResult> r = host->Tune(n, /*yield_to_lease=*/pass == 0);
          if (pass == 0 && r.status().code() == absl::StatusCode::kAborted) {
            later.push_back(n);
          } else if (!r.ok()) {
            absl::MutexLock lock(&mu);
            failures.push_back(r.status().ToString());
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return failures;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_FLEET_HOST_H_
