// RemoteTier: the fleet's shared tier of tuned entries, behind every host's local store.
// One record per full key (device model, template, dtype, shape, template source hash,
// NVRTC version): the winner with its job and trials, as `ktune cache export` writes one
// entry. Publishing is compare-and-set on the median time, so a slower winner never
// replaces a faster one. Leases say which host tunes a key now.
//
// The Redis implementation is redis_tier.h; tests use a fake. Implementations are
// thread-safe. They report a tier that cannot answer (down, slow, full) as kUnavailable,
// kDeadlineExceeded or kResourceExhausted, and never retry on their own: fleet_tier.h
// decides what an outage means.
#ifndef KTUNE_SERVER_FLEET_REMOTE_TIER_H_
#define KTUNE_SERVER_FLEET_REMOTE_TIER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/store/store.h"

namespace ktune::fleet {

// Everything that tells two winners apart: the store's key, plus the template source and
// the NVRTC version it was compiled with (a record of another source is another key).
struct RemoteKey {
  store::EntryKey key;
  std::string source_hash;
  std::string nvrtc_version;
};

// "device_model|template|dtype|shape|source_hash|nvrtc_version" (the device model holds '|'
// itself). Stable: it names records and leases in the shared tier.
std::string RemoteKeyString(const RemoteKey& key);
RemoteKey RemoteKeyOf(const store::Entry& entry);

// One shared winner, with the evidence behind it.
struct RemoteRecord {
  store::EntryBundle bundle;            // entry (ids meaningless), its job and trials
  std::optional<store::Device> device;  // the device row it was tuned on, when known
  std::string publisher;                // the host that published it
};

enum class PublishOutcome {
  kStored,      // no record was there, or a slower one (now replaced)
  kKeptFaster,  // a record at least as fast was there and stays
};

struct LeaseState {
  bool acquired = false;  // the caller holds it now
  std::string holder;     // who holds it: the caller when acquired
  absl::Duration left;    // until it expires unless renewed
};

class RemoteTier {
 public:
  virtual ~RemoteTier() = default;

  // "redis://host:6379" and the like, for messages.
  virtual std::string name() const = 0;

  // The record for `key`; nullopt when there is none. kDataLoss for a record that does not
  // decode (the caller ignores it and says so).
  virtual absl::StatusOr<std::optional<RemoteRecord>> Get(const RemoteKey& key) = 0;

  // Stores `record` under its entry's key unless a record at least as fast is there, in one
  // atomic step.
  virtual absl::StatusOr<PublishOutcome> Publish(const RemoteRecord& record) = 0;

  // Every record (for `ktune cache ls --remote` and `pull`), in no particular order.
  // Records that do not decode are skipped and counted in `undecodable`.
  virtual absl::StatusOr<std::vector<RemoteRecord>> List(int64_t* undecodable) = 0;

  // Takes the lease on `key` for `holder` if nobody holds it (SET NX PX); otherwise says who
  // does and for how long.
  virtual absl::StatusOr<LeaseState> AcquireLease(const RemoteKey& key, const std::string& holder,
                                                  absl::Duration ttl) = 0;
  // Extends `holder`'s lease to `ttl` from now; false when `holder` no longer holds it (it
  // expired, and maybe another host took it).
  virtual absl::StatusOr<bool> RenewLease(const RemoteKey& key, const std::string& holder,
                                          absl::Duration ttl) = 0;
  // Drops `holder`'s lease; a lease someone else holds now is left alone.
  virtual absl::Status ReleaseLease(const RemoteKey& key, const std::string& holder) = 0;
};

}  // namespace ktune::fleet

#endif  // KTUNE_SERVER_FLEET_REMOTE_TIER_H_
