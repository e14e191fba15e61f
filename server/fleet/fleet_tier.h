// FleetTier: the shared tier as a host uses it, over a RemoteTier, in degraded mode when the
// tier cannot answer. Nothing here ever fails a request: a read during an outage is a miss,
// a winner that cannot be published waits in a bounded queue and goes out when the tier
// answers again, a lease that cannot be taken lets the host tune on its own.
//
// An outage starts at the first call that fails with kUnavailable, kDeadlineExceeded or
// kResourceExhausted (down, slow, full): one warning is logged, and for `retry_after` every
// call answers at once without touching the network, so a request never waits on a dead
// server more than one timeout per retry period. A background thread retries the queued
// winners; the first success ends the outage (logged once too). Counters of everything are
// kept for GetDevices and the logs.
//
// Thread-safe.
#ifndef KTUNE_SERVER_FLEET_FLEET_TIER_H_
#define KTUNE_SERVER_FLEET_FLEET_TIER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/fleet/remote_tier.h"

namespace ktune::fleet {

// Counters since start; a snapshot.
struct FleetStats {
  int64_t hits = 0;        // remote records served (verified and written to the local store)
  int64_t misses = 0;      // lookups the tier had no record for
  int64_t publishes = 0;   // winners stored in the tier
  int64_t kept_faster = 0; // winners the tier already had a faster record for
  int64_t lease_waits = 0; // jobs that found another host's lease and waited
  int64_t takeovers = 0;   // leases taken after another holder's expired without a winner
  int64_t refused = 0;     // remote records that failed verification (never served)
  int64_t errors = 0;      // calls that failed (outages and undecodable records included)
  int64_t queued = 0;      // winners waiting to be published now
  int64_t dropped = 0;     // winners dropped because the queue was full
  bool degraded = false;   // in an outage now
};

struct FleetOptions {
  // This host's name in leases and records (e.g. "gpu-host-7:pid"); must be unique in the
  // fleet. Empty: hostname:pid.
  std::string host_id;
  // A lease lasts this long unless renewed; holders renew it every ttl/3.
  absl::Duration lease_ttl = absl::Seconds(30);
  // The most one call to the tier may take (connecting included).
  absl::Duration timeout = absl::Milliseconds(500);
  // How often a host waiting on another's lease looks for the winner.
  absl::Duration poll = absl::Milliseconds(250);
  // An outage is retried this often (the publish queue, and reads/leases on demand).
  absl::Duration retry_after = absl::Seconds(2);
  // Most winners waiting to be published; past it the oldest is dropped (and counted).
  int max_queued = 1024;
  // Where warnings go; null: stderr, prefixed "ktune fleet: ".
  std::function<void(const std::string&)> log;
};

class FleetTier {
 public:
  FleetTier(std::unique_ptr<RemoteTier> remote, FleetOptions options);
  // Joins the publisher thread; winners still queued are lost (logged with their count).
  ~FleetTier();
  FleetTier(const FleetTier&) = delete;
  FleetTier& operator=(const FleetTier&) = delete;

  const std::string& host_id() const { return options_.host_id; }
  const FleetOptions& options() const { return options_; }
  std::string name() const { return remote_->name(); }

  // The record for `key`, or nullopt: none there, the tier is out, or it did not decode
  // (counted and logged). Counts a miss for none; the caller counts hits (after verifying).
  std::optional<RemoteRecord> Get(const RemoteKey& key);

  // Publishes `record` now, or queues it when the tier is out.
  void Publish(RemoteRecord record);

  // The lease on `key`: kAcquired, another host's (state says whose), or the tier's error
  // (the caller tunes on its own then).
  absl::StatusOr<LeaseState> AcquireLease(const RemoteKey& key);
  // False when this host lost the lease or the tier is out.
  bool RenewLease(const RemoteKey& key);
  void ReleaseLease(const RemoteKey& key);

  void CountHit();
  // A record that failed the check; logged the first time `record` (its key and cubin
  // hash, say) is refused, so a poisoned key that is asked for often does not flood the log.
  void CountRefused(const std::string& record, const std::string& why);
  // Logged: which host's lease a job waits on, and a takeover.
  void CountLeaseWait(const RemoteKey& key, const std::string& holder);
  void CountTakeover(const RemoteKey& key);

  FleetStats stats() const;
  // Blocks until the publish queue is empty or `timeout` passes; true when empty.
  bool Flush(absl::Duration timeout);

 private:
  // Runs `call` unless an outage's retry period is on; tracks outages.
  template <typename T>
  absl::StatusOr<T> Guard(const std::function<absl::StatusOr<T>()>& call);
  void Failed(const absl::Status& s);
  void Succeeded();
  void Log(const std::string& line);
  // True the first time `what` is asked about (within a bounded memory).
  bool FirstTime(const std::string& what);
  void PublishLoop();
  absl::Status PublishOne(const RemoteRecord& record);

  const std::unique_ptr<RemoteTier> remote_;
  FleetOptions options_;
  mutable absl::Mutex mu_;
  FleetStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::deque<RemoteRecord> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> logged_ ABSL_GUARDED_BY(mu_);  // bad records already logged
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread publisher_;  // last
};

// A FleetTier over Redis from `url`, password file and CA file as given to a flag, e.g.
// ("--remote", "redis://cache:6379/2", "/etc/ktune/redis.pass", ""). kInvalidArgument naming
// the flag for a bad URL, an unreadable or empty password file, or a CA file without TLS.
// Never touches the network: an unreachable server is an outage, not an error here.
absl::StatusOr<std::unique_ptr<FleetTier>> OpenRedisFleet(const std::string& url,
                                                          const std::string& password_file,
                                                          const std::string& ca_file,
                                                          FleetOptions options);

}  // namespace ktune::fleet

#endif  // KTUNE_SERVER_FLEET_FLEET_TIER_H_
