#include "server/fleet/fleet_tier.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/status_macros.h"
#include "server/fleet/redis_tier.h"

namespace ktune::fleet {
namespace {

bool IsOutage(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kResourceExhausted;
}

std::string DefaultHostId() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return absl::StrCat(host, ":", getpid());
}

}  // namespace

FleetTier::FleetTier(std::unique_ptr<RemoteTier> remote, FleetOptions options)
    : remote_(std::move(remote)), options_(std::move(options)) {
  if (options_.host_id.empty()) options_.host_id = DefaultHostId();
  publisher_ = std::thread([this] { PublishLoop(); });
}

FleetTier::~FleetTier() {
  int64_t left = 0;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    left = static_cast<int64_t>(queue_.size());
  }
  publisher_.join();
  if (left > 0) {
    Log(absl::StrCat(left, " winners were never published to ", name(),
                     " (it was out until shutdown); they stay in the local store"));
  }
}

void FleetTier::Log(const std::string& line) {
  if (options_.log) return options_.log(line);
  std::fprintf(stderr, "ktune fleet: %s\n", line.c_str());
}

template <typename T>
absl::StatusOr<T> FleetTier::Guard(const std::function<absl::StatusOr<T>()>& call) {
  {
    absl::MutexLock lock(&mu_);
    if (stats_.degraded && absl::Now() < retry_at_) {
      return absl::UnavailableError(absl::StrCat("fleet tier ", name(), " is out"));
    }
  }
  absl::StatusOr<T> r = call();
  if (r.ok()) {
    Succeeded();
  } else {
    Failed(r.status());
  }
  return r;
}

void FleetTier::Failed(const absl::Status& s) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.errors;
    if (!IsOutage(s)) return;
    first = !stats_.degraded;
    stats_.degraded = true;
    retry_at_ = absl::Now() + options_.retry_after;
  }
  if (first) {
    Log(absl::StrCat("shared tier ", name(), " is out (", s.message(),
                     "): serving from the local store, winners queued until it returns"));
  }
}

void FleetTier::Succeeded() {
  int64_t queued = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!stats_.degraded) return;
    stats_.degraded = false;
    queued = static_cast<int64_t>(queue_.size());
  }
  Log(absl::StrCat("shared tier ", name(), " is back; publishing ", queued, " queued winners"));
}

std::optional<RemoteRecord> FleetTier::Get(const RemoteKey& key) {
  absl::StatusOr<std::optional<RemoteRecord>> r =
      Guard<std::optional<RemoteRecord>>([&] { return remote_->Get(key); });
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kDataLoss &&
        FirstTime(absl::StrCat("undecodable|", RemoteKeyString(key)))) {
      Log(absl::StrCat("ignored the record for ", RemoteKeyString(key), ": ", r.status().message()));
    }
    return std::nullopt;
  }
  if (!r->has_value()) {
    absl::MutexLock lock(&mu_);
    ++stats_.misses;
  }
  return *std::move(r);
}

absl::Status FleetTier::PublishOne(const RemoteRecord& record) {
  absl::StatusOr<PublishOutcome> r =
      Guard<PublishOutcome>([&] { return remote_->Publish(record); });
  if (!r.ok()) return r.status();
  absl::MutexLock lock(&mu_);
  ++(*r == PublishOutcome::kStored ? stats_.publishes : stats_.kept_faster);
  return absl::OkStatus();
}

void FleetTier::Publish(RemoteRecord record) {
  absl::Status s = PublishOne(record);
  if (s.ok() || !IsOutage(s)) {
    if (!s.ok()) Log(absl::StrCat("publish refused by ", name(), ": ", s.message()));
    return;
  }
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(record));
  if (static_cast<int>(queue_.size()) > options_.max_queued) {
    queue_.pop_front();
    ++stats_.dropped;
  }
  stats_.queued = static_cast<int64_t>(queue_.size());
}

void FleetTier::PublishLoop() {
  for (;;) {
    std::optional<RemoteRecord> next;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      // Sleeps a retry period (or until stopped), then tries the oldest queued winner.
      mu_.AwaitWithTimeout(absl::Condition(&wake), options_.retry_after);
      if (stopping_) return;
      if (queue_.empty() || absl::Now() < retry_at_) continue;
      next = queue_.front();
    }
    // Drains the queue while the tier answers.
    while (next) {
      absl::Status s = PublishOne(*next);
      if (!s.ok() && !IsOutage(s)) {
        Log(absl::StrCat("publish refused by ", name(), ": ", s.message()));
      }
      absl::MutexLock lock(&mu_);
      if (!s.ok() && IsOutage(s)) break;
      if (!queue_.empty()) queue_.pop_front();
      stats_.queued = static_cast<int64_t>(queue_.size());
      next.reset();
      if (!queue_.empty() && !stopping_) next = queue_.front();
    }
  }
}

bool FleetTier::Flush(absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return true;
    }
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<LeaseState> FleetTier::AcquireLease(const RemoteKey& key) {
  return Guard<LeaseState>(
      [&] { return remote_->AcquireLease(key, options_.host_id, options_.lease_ttl); });
}

bool FleetTier::RenewLease(const RemoteKey& key) {
  absl::StatusOr<bool> r = Guard<bool>(
      [&] { return remote_->RenewLease(key, options_.host_id, options_.lease_ttl); });
  return r.ok() && *r;
}

void FleetTier::ReleaseLease(const RemoteKey& key) {
  Guard<bool>([&]() -> absl::StatusOr<bool> {
    KTUNE_RETURN_IF_ERROR(remote_->ReleaseLease(key, options_.host_id));
    return true;
  }).IgnoreError();
}

void FleetTier::CountHit() {
  absl::MutexLock lock(&mu_);
  ++stats_.hits;
}

void FleetTier::CountRefused(const std::string& record, const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.refused;
    ++stats_.errors;
  }
  if (FirstTime(record)) Log(absl::StrCat("refused a record from ", name(), ": ", why));
}

bool FleetTier::FirstTime(const std::string& what) {
  absl::MutexLock lock(&mu_);
  if (logged_.size() >= 4096) logged_.clear();  // bounded; at worst a line again
  return logged_.insert(what).second;
}

void FleetTier::CountLeaseWait(const RemoteKey& key, const std::string& holder) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.lease_waits;
  }
  Log(absl::StrCat("waiting for ", holder, ", which holds the lease on ", RemoteKeyString(key)));
}

void FleetTier::CountTakeover(const RemoteKey& key) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.takeovers;
  }
  Log(absl::StrCat("took over the lease on ", RemoteKeyString(key),
                   ": its holder's expired without a winner"));
}

FleetStats FleetTier::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::StatusOr<std::unique_ptr<FleetTier>> OpenRedisFleet(const std::string& url,
                                                          const std::string& password_file,
                                                          const std::string& ca_file,
                                                          FleetOptions options) {
  KTUNE_ASSIGN_OR_RETURN(RedisTierOptions o, RedisTierOptionsFromFlags(url, password_file, ca_file));
  o.connect.timeout = options.timeout;
  return std::make_unique<FleetTier>(NewRedisTier(std::move(o)), std::move(options));
}

}  // namespace ktune::fleet
