// ktuned's in-memory cache of answered artifacts, so a repeated GetKernel hit is a copy out of
// memory instead of a store read (SQLite row, JSON columns, the cubin's sha256 check) and an
// artifact rebuilt from it.
//
// Keyed by the request as the client spelled it (template, dtype, shape, GPU), so a hit also
// skips validation: a key is only ever inserted after it passed validation, and what
// validation checks (the registry, the GPUs) is fixed for the daemon's life. The cache holds
// values read at one store EntriesChangeCounter (read before the lookup each came from): a
// Get or Put with a newer counter drops them all at once, so any entry committed since (a
// tune's winner, `ktune tune` or `ktune cache import` in another process, a prune) is read
// afresh, and an older counter (a call that raced a commit) neither hits nor stores. Commits
// that touch no entry (a running tune's trials) leave the cache as it is. Only fresh exact hits
// are kept: a stale entry or a fallback answer has work attached (a background tune) that a
// copy would skip.
//
// LRU, bounded by the cubin bytes held. Thread-safe.
#ifndef KTUNE_SERVER_SERVICE_ARTIFACT_CACHE_H_
#define KTUNE_SERVER_SERVICE_ARTIFACT_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/map.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

class ArtifactCache {
 public:
  // `max_bytes`: the most cubin bytes held; 0 disables the cache (every Get misses).
  explicit ArtifactCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // False when max_bytes is 0: callers can skip reading the counter and building a key.
  bool enabled() const { return max_bytes_ > 0; }

  // The key of a request: its fields with the shape's dims in name order, so two spellings
  // of one shape (map order is unspecified) share an entry.
  static std::string Key(const std::string& template_id, const std::string& dtype,
                         const google::protobuf::Map<std::string, int64_t>& shape, int32_t gpu);

  // The artifact stored under `key` if the cache is at this `change_counter`, else null.
  std::shared_ptr<const v1::KernelArtifact> Get(const std::string& key, int64_t change_counter);

  // Keeps `artifact` under `key`, read from the store at `change_counter` (read before the
  // lookup); replaces what was there. Evicts the least recently used beyond max_bytes; an
  // artifact larger than max_bytes alone is not kept.
  void Put(const std::string& key, int64_t change_counter,
           std::shared_ptr<const v1::KernelArtifact> artifact);

  struct Stats {
    int64_t entries = 0;
    int64_t bytes = 0;
    int64_t hits = 0;
    int64_t misses = 0;
  };
  Stats stats() const;

 private:
  struct Value {
    std::string key;
    int64_t bytes = 0;
    std::shared_ptr<const v1::KernelArtifact> artifact;
  };
  using Lru = std::list<Value>;  // most recently used first

  void EraseLocked(Lru::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves to `change_counter` if it is newer, dropping every value; true if the cache is at
  // it afterwards (false for an older one).
  bool AtCounterLocked(int64_t change_counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t change_counter_ ABSL_GUARDED_BY(mu_) = 0;  // every value's
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_ARTIFACT_CACHE_H_
