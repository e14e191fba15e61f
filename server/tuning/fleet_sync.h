// FleetSync: where the tuning module meets the fleet's shared tier (server/fleet). The
// kernel resolver reads through it on a local miss; the tuning queue runs each job under the
// key's lease through it and publishes the winner.
//
//   Fetch:    the tier's record for the full key, checked (remote_check.h), written to the
//             local store and read back from it; a record that fails the check is refused
//             (counted, logged) and never served.
//   RunLeased: the key's winner already in the tier is taken as the job's result; otherwise
//             the job runs under this host's lease (renewed every ttl/3 while it runs,
//             released after) and its winner is published. Another host's lease: the job
//             waits for that host's winner, polling, and takes the lease over if it ends
//             without one (its holder died or failed) -- or, when the request says
//             yield_to_lease, ends at once with kAborted so the caller tunes other keys.
//   The tier being out never fails a job: it runs alone and its winner is queued.
// A job waiting on another host's lease keeps its GPU's queue thread: jobs queued behind it
// on that GPU wait too (ktune tune --spec --daemon avoids it with yield_to_lease).
//
// Thread-safe.
#ifndef KTUNE_SERVER_TUNING_FLEET_SYNC_H_
#define KTUNE_SERVER_TUNING_FLEET_SYNC_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "server/fleet/fleet_tier.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/tuning/tuning_job.h"

namespace ktune {

class FleetSync {
 public:
  // All must outlive this.
  FleetSync(fleet::FleetTier* tier, store::Store* store, const TemplateRegistry* registry)
      : tier_(tier), store_(store), registry_(registry) {}

  // The tier's verified record for the key, now in the local store; kNotFound when the tier
  // has none, is out, or its record was refused.
  absl::StatusOr<store::Lookup> Fetch(const store::EntryKey& key, const std::string& source_hash,
                                      const std::string& nvrtc_version);

  // Runs `tune` (the job on `env`) under the key's lease as the top of this file says.
  // `stopping` is polled while waiting: true ends the wait with kCancelled.
  absl::StatusOr<TuneResult> RunLeased(const TuneRequest& request, const TuningEnv& env,
                                       const std::function<absl::StatusOr<TuneResult>()>& tune,
                                       const std::function<bool()>& stopping);

  // Publishes a winner just committed to the local store, with its job, trials and device
  // row (read from the store).
  void Publish(const TuneResult& result);

  fleet::FleetTier& tier() { return *tier_; }

 private:
  // The record as a job's result, once it is in the local store; nullopt when none/refused.
  std::optional<TuneResult> TakeRemote(const fleet::RemoteKey& key);
  absl::StatusOr<TuneResult> RunHolding(const fleet::RemoteKey& key,
                                        const std::function<absl::StatusOr<TuneResult>()>& tune);

  fleet::FleetTier* const tier_;
  store::Store* const store_;
  const TemplateRegistry* const registry_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_FLEET_SYNC_H_
