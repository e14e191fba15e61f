#include "frontends/ktuned/artifact_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace ktune {
namespace {

std::shared_ptr<const v1::KernelArtifact> Artifact(const std::string& name, size_t cubin_bytes) {
  auto a = std::make_shared<v1::KernelArtifact>();
  a->set_template_id(name);
  a->set_cubin(std::string(cubin_bytes, 'c'));
  return a;
}

google::protobuf::Map<std::string, int64_t> Shape(int64_t tokens, int64_t hidden) {
  google::protobuf::Map<std::string, int64_t> m;
  m["tokens"] = tokens;
  m["hidden"] = hidden;
  return m;
}

TEST(ArtifactCacheTest, KeyIsTheRequestWithDimsInNameOrder) {
  google::protobuf::Map<std::string, int64_t> reversed;
  reversed["hidden"] = 8;
  reversed["tokens"] = 4;
  EXPECT_EQ(ArtifactCache::Key("rmsnorm", "bf16", Shape(4, 8), 0),
            ArtifactCache::Key("rmsnorm", "bf16", reversed, 0));
  EXPECT_NE(ArtifactCache::Key("rmsnorm", "bf16", Shape(4, 8), 0),
            ArtifactCache::Key("rmsnorm", "bf16", Shape(8, 4), 0));
  EXPECT_NE(ArtifactCache::Key("rmsnorm", "bf16", Shape(4, 8), 0),
            ArtifactCache::Key("rmsnorm", "bf16", Shape(4, 8), 1));
  EXPECT_NE(ArtifactCache::Key("rmsnorm", "bf16", Shape(4, 8), 0),
            ArtifactCache::Key("rmsnorm", "f16", Shape(4, 8), 0));
  // Field boundaries are kept: "ab"+"c" is not "a"+"bc".
  EXPECT_NE(ArtifactCache::Key("ab", "c", Shape(1, 1), 0),
            ArtifactCache::Key("a", "bc", Shape(1, 1), 0));
}

TEST(ArtifactCacheTest, HitOnlyAtTheSameChangeCounter) {
  ArtifactCache cache(1 << 20);
  EXPECT_EQ(cache.Get("k", 7), nullptr);
  cache.Put("k", 7, Artifact("a", 100));
  std::shared_ptr<const v1::KernelArtifact> hit = cache.Get("k", 7);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->template_id(), "a");
  cache.Put("j", 7, Artifact("b", 50));
  // The store changed: a miss, and every value read before the change is gone at once.
  EXPECT_EQ(cache.Get("k", 8), nullptr);
  EXPECT_EQ(cache.Get("k", 7), nullptr);
  const ArtifactCache::Stats s = cache.stats();
  EXPECT_EQ(s.entries, 0);
  EXPECT_EQ(s.bytes, 0);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 3);
  // A value read before the change (a call that raced the commit) is not kept.
  cache.Put("k", 7, Artifact("old", 100));
  EXPECT_EQ(cache.Get("k", 8), nullptr);
  EXPECT_EQ(cache.stats().entries, 0);
}

TEST(ArtifactCacheTest, PutReplaces) {
  ArtifactCache cache(1 << 20);
  cache.Put("k", 1, Artifact("old", 100));
  cache.Put("k", 2, Artifact("new", 300));
  ASSERT_NE(cache.Get("k", 2), nullptr);
  EXPECT_EQ(cache.Get("k", 2)->template_id(), "new");
  EXPECT_EQ(cache.stats().entries, 1);
  EXPECT_EQ(cache.stats().bytes, 300);
}

TEST(ArtifactCacheTest, EvictsTheLeastRecentlyUsedBeyondTheBytes) {
  ArtifactCache cache(1000);
  cache.Put("a", 1, Artifact("a", 400));
  cache.Put("b", 1, Artifact("b", 400));
  ASSERT_NE(cache.Get("a", 1), nullptr);  // a is now the most recent
  cache.Put("c", 1, Artifact("c", 400));  // 1200 > 1000: b goes
  EXPECT_NE(cache.Get("a", 1), nullptr);
  EXPECT_EQ(cache.Get("b", 1), nullptr);
  EXPECT_NE(cache.Get("c", 1), nullptr);
  EXPECT_EQ(cache.stats().bytes, 800);
  // Larger than the whole cache: not kept, and nothing else is pushed out for it.
  cache.Put("huge", 1, Artifact("huge", 1001));
  EXPECT_EQ(cache.Get("huge", 1), nullptr);
  EXPECT_EQ(cache.stats().entries, 2);
}

TEST(ArtifactCacheTest, ZeroBytesDisablesIt) {
  ArtifactCache cache(0);
  EXPECT_FALSE(cache.enabled());
  EXPECT_TRUE(ArtifactCache(1).enabled());
  cache.Put("k", 1, Artifact("a", 1));
  EXPECT_EQ(cache.Get("k", 1), nullptr);
  EXPECT_EQ(cache.stats().entries, 0);
}

}  // namespace
}  // namespace ktune
