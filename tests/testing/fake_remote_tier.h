// FakeRemoteTier: the fleet's shared tier in memory (server/fleet/remote_tier.h), for tests
// of what sits on it: compare-and-set publishing, leases that expire on the clock, and a
// switch that takes it "down" (every call kUnavailable) or makes it "full" (writes
// kResourceExhausted). Shared between FleetTiers through a shared_ptr to its state, as
// hosts share one Redis.
//
// Thread-safe.
#ifndef KTUNE_TESTS_TESTING_FAKE_REMOTE_TIER_H_
#define KTUNE_TESTS_TESTING_FAKE_REMOTE_TIER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/fleet/remote_tier.h"

namespace ktune::testing {

struct FakeTierState {
  absl::Mutex mu;
  std::map<std::string, fleet::RemoteRecord> records ABSL_GUARDED_BY(mu);
  struct Lease {
    std::string holder;
    absl::Time expires;
  };
  std::map<std::string, Lease> leases ABSL_GUARDED_BY(mu);
  bool down ABSL_GUARDED_BY(mu) = false;
  bool full ABSL_GUARDED_BY(mu) = false;
  int calls ABSL_GUARDED_BY(mu) = 0;

  void SetDown(bool d) {
    absl::MutexLock lock(&mu);
    down = d;
  }
  void SetFull(bool f) {
    absl::MutexLock lock(&mu);
    full = f;
  }
  int Calls() {
    absl::MutexLock lock(&mu);
    return calls;
  }
  size_t Records() {
    absl::MutexLock lock(&mu);
    return records.size();
  }
};

class FakeRemoteTier : public fleet::RemoteTier {
 public:
  explicit FakeRemoteTier(std::shared_ptr<FakeTierState> state) : s_(std::move(state)) {}

  std::string name() const override { return "fake://tier"; }

  absl::StatusOr<std::optional<fleet::RemoteRecord>> Get(const fleet::RemoteKey& key) override {
    absl::MutexLock lock(&s_->mu);
    if (absl::Status st = Check(false); !st.ok()) return st;
    auto it = s_->records.find(fleet::RemoteKeyString(key));
    if (it == s_->records.end()) return std::nullopt;
    return it->second;
  }

  absl::StatusOr<fleet::PublishOutcome> Publish(const fleet::RemoteRecord& record) override {
    absl::MutexLock lock(&s_->mu);
    if (absl::Status st = Check(true); !st.ok()) return st;
    const std::string k = fleet::RemoteKeyString(fleet::RemoteKeyOf(record.bundle.entry));
    auto it = s_->records.find(k);
    if (it != s_->records.end() &&
        it->second.bundle.entry.metrics.time_ns <= record.bundle.entry.metrics.time_ns) {
      return fleet::PublishOutcome::kKeptFaster;
    }
    s_->records[k] = record;
    return fleet::PublishOutcome::kStored;
  }

  absl::StatusOr<std::vector<fleet::RemoteRecord>> List(int64_t* undecodable) override {
    absl::MutexLock lock(&s_->mu);
    *undecodable = 0;
    if (absl::Status st = Check(false); !st.ok()) return st;
    std::vector<fleet::RemoteRecord> out;
    for (const auto& [k, r] : s_->records) out.push_back(r);
    return out;
  }

  absl::StatusOr<fleet::LeaseState> AcquireLease(const fleet::RemoteKey& key,
                                                 const std::string& holder,
                                                 absl::Duration ttl) override {
    absl::MutexLock lock(&s_->mu);
    if (absl::Status st = Check(true); !st.ok()) return st;
    const absl::Time now = absl::Now();
    FakeTierState::Lease& l = s_->leases[fleet::RemoteKeyString(key)];
    if (l.holder.empty() || l.expires <= now) l = {holder, now + ttl};
    return fleet::LeaseState{l.holder == holder, l.holder, l.expires - now};
  }

  absl::StatusOr<bool> RenewLease(const fleet::RemoteKey& key, const std::string& holder,
                                  absl::Duration ttl) override {
    absl::MutexLock lock(&s_->mu);
    if (absl::Status st = Check(true); !st.ok()) return st;
    FakeTierState::Lease& l = s_->leases[fleet::RemoteKeyString(key)];
    if (l.holder != holder || l.expires <= absl::Now()) return false;
    l.expires = absl::Now() + ttl;
    return true;
  }

  absl::Status ReleaseLease(const fleet::RemoteKey& key, const std::string& holder) override {
    absl::MutexLock lock(&s_->mu);
    if (absl::Status st = Check(true); !st.ok()) return st;
    auto it = s_->leases.find(fleet::RemoteKeyString(key));
    if (it != s_->leases.end() && it->second.holder == holder) s_->leases.erase(it);
    return absl::OkStatus();
  }

 private:
  absl::Status Check(bool write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s_->mu) {
    ++s_->calls;
    if (s_->down) return absl::UnavailableError("fake tier: down");
    if (write && s_->full) return absl::ResourceExhaustedError("fake tier: OOM");
    return absl::OkStatus();
  }

  std::shared_ptr<FakeTierState> s_;
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_FAKE_REMOTE_TIER_H_
