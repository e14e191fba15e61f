// fleet_bench: the fleet tier on a real Redis, with in-process hosts (tests/testing/
// fleet_host.h: FakeCompiler with ELF cubins, a FakeGpu that sleeps a fixed time per
// candidate, an in-memory store each):
//   1. remote hit latency: one host tunes K keys; another resolves each CACHE_ONLY, first
//      through the tier (read, check, write to its store) then from its own store;
//   2. spec wall time with 1, 2 and 4 hosts dividing one spec through the leases, and the
//      count of duplicate tunes (jobs that really ran, minus keys).
// Each run uses its own key prefix in Redis, so runs do not see each other.
//
//   redis-server --port 6399 --save '' &
//   build/bin/fleet_bench --redis redis://127.0.0.1:6399 [--keys 40] [--measure-us 2000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "server/fleet/redis_tier.h"
#include "tests/testing/fleet_host.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

struct Bench {
  std::string url;
  std::string run_prefix;
  const ktune::TemplateRegistry* registry;
  int measure_us;

  std::unique_ptr<ktune::testing::FleetHost> Host(const std::string& name, const std::string& prefix) {
    ktune::fleet::RedisTierOptions t = *ktune::fleet::RedisTierOptionsFromFlags(url, "", "");
    t.prefix = prefix;
    ktune::fleet::FleetOptions o;
    o.host_id = name;
    o.poll = absl::Milliseconds(10);
    auto h = std::make_unique<ktune::testing::FleetHost>(registry, ktune::fleet::NewRedisTier(t), o);
    const int us = measure_us;
    h->gpu.script = [us](const std::string&) {
      absl::SleepFor(absl::Microseconds(us));
      return ktune::testing::OkMeasurement(1000);
    };
    return h;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("fleet_bench: the fleet tier's remote hit latency and spec wall time");
  std::string url;
  int keys = 40, measure_us = 2000;
  app.add_option("--redis", url, "redis://HOST:PORT of a Redis the bench may write to")->required();
  app.add_option("--keys", keys, "Keys of the spec")->capture_default_str();
  app.add_option("--measure-us", measure_us, "Fake GPU time per candidate")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto registry = ktune::LoadTemplateRegistry(KTUNE_SOURCE_DIR "/tests/templates/testdata/good");
  if (!registry.ok()) {
    std::fprintf(stderr, "fleet_bench: %s\n", registry.status().ToString().c_str());
    return 1;
  }
  Bench b{url, absl::StrCat("bench:", absl::ToUnixMillis(absl::Now()), ":"), registry->get(),
          measure_us};
  std::vector<int64_t> spec;
  for (int i = 0; i < keys; ++i) spec.push_back(1024 + 64 * i);

  {  // 1. remote hit latency
    const std::string prefix = b.run_prefix + "hit:";
    auto a = b.Host("a", prefix);
    for (int64_t n : spec) {
      if (!a->Tune(n).ok()) {
        std::fprintf(stderr, "fleet_bench: tuning n=%lld failed\n", static_cast<long long>(n));
        return 1;
      }
    }
    auto c = b.Host("c", prefix);
    std::vector<double> remote, local;
    for (int64_t n : spec) {
      Clock::time_point t0 = Clock::now();
      if (!c->Resolve(n, ktune::KernelPolicy::kCacheOnly).ok()) return 1;
      Clock::time_point t1 = Clock::now();
      if (!c->Resolve(n, ktune::KernelPolicy::kCacheOnly).ok()) return 1;
      remote.push_back(Ms(t1 - t0));
      local.push_back(Ms(Clock::now() - t1));
    }
    std::printf("remote hit (tier read + check + local write + local read), ms: p50 %.3f  p99 %.3f\n",
                Percentile(remote, 0.5), Percentile(remote, 0.99));
    std::printf("local hit afterwards, ms:                                 p50 %.3f  p99 %.3f\n",
                Percentile(local, 0.5), Percentile(local, 0.99));
  }

  std::printf("\n%-6s %12s %10s %12s %12s\n", "hosts", "wall_s", "tunes", "duplicates",
              "lease_waits");
  for (int n_hosts : {1, 2, 4}) {  // 2. spec wall time
    const std::string prefix = absl::StrCat(b.run_prefix, "spec", n_hosts, ":");
    std::vector<std::unique_ptr<ktune::testing::FleetHost>> hosts;
    for (int i = 0; i < n_hosts; ++i) hosts.push_back(b.Host(absl::StrCat("h", i), prefix));
    const Clock::time_point t0 = Clock::now();
    std::vector<std::string> failures = ktune::testing::RunSpecOnHosts(hosts, spec);
    const double wall = Ms(Clock::now() - t0) / 1000;
    int tunes = 0;
    int64_t waits = 0;
    for (const auto& h : hosts) {
      tunes += h->gpu.problems;
      waits += h->tier->stats().lease_waits;
    }
    std::printf("%-6d %12.2f %10d %12d %12lld%s\n", n_hosts, wall, tunes, tunes - keys,
                static_cast<long long>(waits),
                failures.empty() ? "" : absl::StrCat("  (", failures.size(), " failed: ", failures[0], ")").c_str());
  }
  return 0;
}
