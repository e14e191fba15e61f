#include "frontends/ktuned/artifact_cache.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ktune {

std::string ArtifactCache::Key(const std::string& template_id, const std::string& dtype,
                               const google::protobuf::Map<std::string, int64_t>& shape,
                               int32_t gpu) {
  std::vector<std::pair<std::string, int64_t>> dims(shape.begin(), shape.end());
  std::sort(dims.begin(), dims.end());
  // NUL separators: no template, dtype or dim name can contain one (the names are checked
  // identifiers by the time a key is inserted), so two requests never share a key.
  std::string key = absl::StrCat(template_id, std::string(1, '\0'), dtype, std::string(1, '\0'),
                                 gpu);
  for (const auto& [name, value] : dims) {
    absl::StrAppend(&key, std::string(1, '\0'), name, "=", value);
  }
  return key;
}

std::shared_ptr<const v1::KernelArtifact> ArtifactCache::Get(const std::string& key,
                                                             int64_t change_counter) {
  absl::MutexLock lock(&mu_);
  auto it = AtCounterLocked(change_counter) ? index_.find(key) : index_.end();
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return it->second->artifact;
}

void ArtifactCache::Put(const std::string& key, int64_t change_counter,
                        std::shared_ptr<const v1::KernelArtifact> artifact) {
  if (artifact == nullptr) return;
  const int64_t bytes = static_cast<int64_t>(artifact->cubin().size());
  absl::MutexLock lock(&mu_);
  if (!AtCounterLocked(change_counter)) return;  // read before a commit the cache has seen
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  if (bytes > max_bytes_) return;
  while (bytes_ + bytes > max_bytes_ && !lru_.empty()) EraseLocked(std::prev(lru_.end()));
  lru_.push_front(Value{key, bytes, std::move(artifact)});
  index_[key] = lru_.begin();
  bytes_ += bytes;
}

ArtifactCache::Stats ArtifactCache::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{static_cast<int64_t>(lru_.size()), bytes_, hits_, misses_};
}

bool ArtifactCache::AtCounterLocked(int64_t change_counter) {
  if (change_counter > change_counter_) {
    // The store changed since every value was read: any of them may be outdated.
    lru_.clear();
    index_.clear();
    bytes_ = 0;
    change_counter_ = change_counter;
  }
  return change_counter == change_counter_;
}

void ArtifactCache::EraseLocked(Lru::iterator it) {
  bytes_ -= it->bytes;
  index_.erase(it->key);
  lru_.erase(it);
}

}  // namespace ktune
