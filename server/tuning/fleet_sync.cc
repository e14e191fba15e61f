#include "server/tuning/fleet_sync.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/gpu/device_model.h"
#include "server/tuning/remote_check.h"

namespace ktune {
namespace {

// Renews a lease every ttl/3 on its own thread until destroyed.
class LeaseKeeper {
 public:
  LeaseKeeper(fleet::FleetTier& tier, fleet::RemoteKey key) : tier_(tier), key_(std::move(key)) {
    thread_ = std::thread([this] {
      const auto every = absl::ToChronoMilliseconds(tier_.options().lease_ttl / 3);
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, every, [this] { return done_; })) {
        lock.unlock();
        // Lost (expired while the tier was out, say): the job goes on; at worst another
        // host tunes the key too, and the faster winner stays.
        tier_.RenewLease(key_);
        lock.lock();
      }
    });
  }
  ~LeaseKeeper() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  fleet::FleetTier& tier_;
  const fleet::RemoteKey key_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<store::Lookup> FleetSync::Fetch(const store::EntryKey& key,
                                               const std::string& source_hash,
                                               const std::string& nvrtc_version) {
  const fleet::RemoteKey rk{key, source_hash, nvrtc_version};
  std::optional<fleet::RemoteRecord> record = tier_->Get(rk);
  if (!record) {
    return absl::NotFoundError(absl::StrCat("the shared tier has no entry for ",
                                            fleet::RemoteKeyString(rk)));
  }
  absl::StatusOr<std::vector<store::Device>> known = store_->ListDevices();
  if (!known.ok()) return known.status();
  if (absl::Status s = CheckRemoteRecord(*registry_, *known, rk, *record); !s.ok()) {
    tier_->CountRefused(absl::StrCat(fleet::RemoteKeyString(rk), "|", record->publisher, "|",
                                     record->bundle.entry.cubin_sha256),
                        absl::StrCat(fleet::RemoteKeyString(rk), " (published by ",
                                     record->publisher, "): ", s.message()));
    return absl::NotFoundError(absl::StrCat("the shared tier's entry for ",
                                            fleet::RemoteKeyString(rk), " was refused"));
  }
  std::vector<store::Device> devices;
  if (record->device) devices.push_back(*record->device);
  // Replace: Fetch runs only when the local store has no fresh entry for the key.
  absl::StatusOr<std::vector<store::ImportResult>> imported =
      store_->ImportEntries(devices, {record->bundle}, store::ConflictRule::kReplace);
  if (!imported.ok()) return imported.status();
  absl::StatusOr<store::Lookup> hit = store_->LookupEntry(key, source_hash, nvrtc_version);
  if (hit.ok()) tier_->CountHit();
  return hit;
}

std::optional<TuneResult> FleetSync::TakeRemote(const fleet::RemoteKey& key) {
  const absl::Time start = absl::Now();
  absl::StatusOr<store::Lookup> hit = Fetch(key.key, key.source_hash, key.nvrtc_version);
  if (!hit.ok()) return std::nullopt;
  TuneResult r;
  r.entry = std::move(hit->entry);
  // The job's trials as the publisher recorded them (ListTrials of the imported job).
  if (absl::StatusOr<std::vector<store::Trial>> trials = store_->ListTrials(r.entry.job_id);
      trials.ok()) {
    r.trials = *std::move(trials);
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return r;
}

absl::StatusOr<TuneResult> FleetSync::RunLeased(
    const TuneRequest& request, const TuningEnv& env,
    const std::function<absl::StatusOr<TuneResult>()>& tune, const std::function<bool()>& stopping) {
  absl::StatusOr<v1::DeviceInfo> info = env.gpu->Info();
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> tmpl =
      registry_->Get(request.template_name);
  if (!info.ok() || !tmpl.ok()) return tune();  // the job says what is wrong
  const fleet::RemoteKey key{{DeviceModelKey(*info), request.template_name,
                              std::string(DTypeName(request.dtype)), ShapeString(request.shape)},
                             (*tmpl)->source_hash(),
                             env.compiler->Version()};
  const std::string name = fleet::RemoteKeyString(key);
  bool waited = false;
  for (;;) {
    if (std::optional<TuneResult> r = TakeRemote(key)) return *std::move(r);
    absl::StatusOr<fleet::LeaseState> lease = tier_->AcquireLease(key);
    if (!lease.ok()) return RunHolding(key, tune);  // out: tune alone, publish later
    if (lease->acquired) {
      // A winner may have landed between the look and the lease (its holder published and
      // released): then there is nothing to tune.
      if (std::optional<TuneResult> r = TakeRemote(key)) {
        tier_->ReleaseLease(key);
        return *std::move(r);
      }
      if (waited) tier_->CountTakeover(key);
      return RunHolding(key, tune);
    }
    if (request.yield_to_lease) {
      return absl::AbortedError(absl::StrCat(name, " is being tuned by ", lease->holder,
                                             " (lease for ", absl::FormatDuration(lease->left),
                                             " more)"));
    }
    if (!waited) {
      waited = true;
      tier_->CountLeaseWait(key, lease->holder);
    }
    const absl::Time until = absl::Now() + tier_->options().poll;
    while (absl::Now() < until) {
      if (stopping()) {
        return absl::CancelledError(absl::StrCat("stopped while waiting for ", lease->holder,
                                                 " to tune ", name));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
}

absl::StatusOr<TuneResult> FleetSync::RunHolding(
    const fleet::RemoteKey& key, const std::function<absl::StatusOr<TuneResult>()>& tune) {
  absl::StatusOr<TuneResult> r;
  {
    LeaseKeeper keeper(*tier_, key);
    r = tune();
  }
  if (r.ok()) Publish(*r);
  tier_->ReleaseLease(key);
  return r;
}

void FleetSync::Publish(const TuneResult& result) {
  fleet::RemoteRecord record;
  record.bundle.entry = result.entry;
  record.bundle.trials = result.trials;
  absl::StatusOr<store::Job> job = store_->GetJob(result.entry.job_id);
  if (job.ok()) record.bundle.job = *std::move(job);
  absl::StatusOr<store::Device> device = store_->GetDevice(result.entry.key.device_model);
  if (device.ok()) record.device = *std::move(device);
  record.publisher = tier_->host_id();
  tier_->Publish(std::move(record));
}

}  // namespace ktune
