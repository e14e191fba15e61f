#include "server/fleet/redis_tier.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/base/file.h"
#include "server/base/status_macros.h"
#include "server/store/export_file.h"

namespace ktune::fleet {
namespace {

using Type = RedisReply::Type;

// KEYS: entry hash, index set. ARGV: time_ns, record, publisher, key string, unix ms.
// A record at least as fast stays (returns 0); otherwise ours goes in (returns 1).
constexpr char kPublishScript[] = R"lua(
local cur = redis.call('HGET', KEYS[1], 'time_ns')
if cur and tonumber(cur) <= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'time_ns', ARGV[1], 'record', ARGV[2], 'publisher', ARGV[3],
           'published_unix_ms', ARGV[5])
redis.call('SADD', KEYS[2], ARGV[4])
return 1
)lua";

// KEYS: lease. ARGV: holder, ttl ms. 1 when renewed, 0 when the holder lost it.
constexpr char kRenewScript[] = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
)lua";

// KEYS: lease. ARGV: holder.
constexpr char kReleaseScript[] = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
)lua";

std::string Ms(absl::Duration d) {
  return absl::StrCat(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

class RedisTier final : public RemoteTier {
 public:
  explicit RedisTier(RedisTierOptions o) : options_(std::move(o)) {}

  std::string name() const override { return options_.connect.url.ToString(); }

  absl::StatusOr<std::optional<RemoteRecord>> Get(const RemoteKey& key) override {
    const std::string k = RemoteKeyString(key);
    KTUNE_ASSIGN_OR_RETURN(RedisReply r, Call({"HMGET", EntryKey(k), "record", "publisher"}));
    if (r.type != Type::kArray || r.elements.size() != 2) return Unexpected("HMGET");
    if (r.elements[0].type != Type::kString) return std::nullopt;
    return Decode(k, r.elements[0].str, r.elements[1].str);
  }

  absl::StatusOr<PublishOutcome> Publish(const RemoteRecord& record) override {
    const std::string k = RemoteKeyString(RemoteKeyOf(record.bundle.entry));
    store::ExportFile file;
    file.exported_unix_ms = absl::ToUnixMillis(absl::Now());
    if (record.device) file.devices.push_back(*record.device);
    file.entries.push_back(record.bundle);
    KTUNE_ASSIGN_OR_RETURN(
        RedisReply r,
        Call({"EVAL", kPublishScript, "2", EntryKey(k), options_.prefix + "entries",
              absl::StrFormat("%.17g", record.bundle.entry.metrics.time_ns),
              store::ExportToJson(file), record.publisher, k,
              absl::StrCat(file.exported_unix_ms)}));
    if (r.type != Type::kInteger) return Unexpected("EVAL publish");
    return r.integer == 1 ? PublishOutcome::kStored : PublishOutcome::kKeptFaster;
  }

  absl::StatusOr<std::vector<RemoteRecord>> List(int64_t* undecodable) override {
    *undecodable = 0;
    KTUNE_ASSIGN_OR_RETURN(RedisReply keys, Call({"SMEMBERS", options_.prefix + "entries"}));
    if (keys.type != Type::kArray) return Unexpected("SMEMBERS");
    std::vector<RemoteRecord> out;
    for (const RedisReply& k : keys.elements) {
      KTUNE_ASSIGN_OR_RETURN(RedisReply r,
                             Call({"HMGET", EntryKey(k.str), "record", "publisher"}));
      if (r.type != Type::kArray || r.elements.size() != 2) return Unexpected("HMGET");
      if (r.elements[0].type != Type::kString) continue;  // evicted or deleted since
      absl::StatusOr<RemoteRecord> rec = Decode(k.str, r.elements[0].str, r.elements[1].str);
      if (rec.ok()) {
        out.push_back(*std::move(rec));
      } else {
        ++*undecodable;
      }
    }
    return out;
  }

  absl::StatusOr<LeaseState> AcquireLease(const RemoteKey& key, const std::string& holder,
                                          absl::Duration ttl) override {
    const std::string lease = LeaseKey(RemoteKeyString(key));
    // Twice at most: a lease that expires between our SET and our GET is free again.
    for (int attempt = 0; attempt < 2; ++attempt) {
      KTUNE_ASSIGN_OR_RETURN(RedisReply set, Call({"SET", lease, holder, "NX", "PX", Ms(ttl)}));
      if (set.type == Type::kStatus) return LeaseState{true, holder, ttl};
      KTUNE_ASSIGN_OR_RETURN(RedisReply who, Call({"GET", lease}));
      if (who.type != Type::kString) continue;
      KTUNE_ASSIGN_OR_RETURN(RedisReply left, Call({"PTTL", lease}));
      LeaseState s;
      s.holder = who.str;
      s.acquired = who.str == holder;  // ours already (a retried acquire)
      s.left = absl::Milliseconds(left.type == Type::kInteger ? std::max<int64_t>(0, left.integer) : 0);
      return s;
    }
    return absl::UnavailableError(absl::StrCat("redis ", name(), ": lease on ",
                                               RemoteKeyString(key), " keeps changing hands"));
  }

  absl::StatusOr<bool> RenewLease(const RemoteKey& key, const std::string& holder,
                                  absl::Duration ttl) override {
    KTUNE_ASSIGN_OR_RETURN(RedisReply r, Call({"EVAL", kRenewScript, "1",
                                               LeaseKey(RemoteKeyString(key)), holder, Ms(ttl)}));
    return r.type == Type::kInteger && r.integer == 1;
  }

  absl::Status ReleaseLease(const RemoteKey& key, const std::string& holder) override {
    return Call({"EVAL", kReleaseScript, "1", LeaseKey(RemoteKeyString(key)), holder}).status();
  }

 private:
  std::string EntryKey(const std::string& k) const { return options_.prefix + "entry:" + k; }
  std::string LeaseKey(const std::string& k) const { return options_.prefix + "lease:" + k; }

  absl::Status Unexpected(absl::string_view command) const {
    return absl::DataLossError(
        absl::StrCat("redis ", name(), ": unexpected reply to ", command));
  }

  absl::StatusOr<RemoteRecord> Decode(const std::string& k, const std::string& json,
                                      const std::string& publisher) const {
    absl::StatusOr<store::ExportFile> file =
        store::ExportFromJson(json, absl::StrCat(name(), " record ", k));
    if (!file.ok()) return absl::DataLossError(file.status().message());
    if (file->entries.size() != 1) {
      return absl::DataLossError(absl::StrCat(name(), " record ", k, ": holds ",
                                              file->entries.size(), " entries, not 1"));
    }
    RemoteRecord r;
    r.bundle = std::move(file->entries.front());
    if (!file->devices.empty()) r.device = std::move(file->devices.front());
    r.publisher = publisher;
    return r;
  }

  // One command on the connection, connecting first when there is none (or it broke).
  absl::StatusOr<RedisReply> Call(const std::vector<std::string>& argv) {
    absl::MutexLock lock(&mu_);
    if (conn_ == nullptr || conn_->broken()) {
      conn_.reset();
      KTUNE_ASSIGN_OR_RETURN(conn_, ConnectRedis(options_.connect));
    }
    absl::StatusOr<RedisReply> r = conn_->Command(argv);
    if (conn_->broken()) conn_.reset();
    return r;
  }

  const RedisTierOptions options_;
  absl::Mutex mu_;
  std::unique_ptr<RedisConnection> conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<RedisTierOptions> RedisTierOptionsFromFlags(const std::string& url,
                                                           const std::string& password_file,
                                                           const std::string& ca_file) {
  RedisTierOptions o;
  KTUNE_ASSIGN_OR_RETURN(o.connect.url, ParseRedisUrl(url, "--remote"));
  if (!password_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(password_file);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--remote-password-file ", password_file,
                                                     ": ", text.status().message()));
    }
    o.connect.password = std::string(absl::StripTrailingAsciiWhitespace(*text));
    if (o.connect.password.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--remote-password-file ", password_file, ": empty"));
    }
  }
  if (!ca_file.empty()) {
    if (!o.connect.url.tls) {
      return absl::InvalidArgumentError(
          absl::StrCat("--remote-ca ", ca_file, ": needs a rediss:// --remote URL (TLS)"));
    }
    if (absl::StatusOr<std::string> pem = ReadFile(ca_file); !pem.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--remote-ca ", ca_file, ": ", pem.status().message()));
    }
    o.connect.ca_file = ca_file;
  }
  return o;
}

std::unique_ptr<RemoteTier> NewRedisTier(RedisTierOptions options) {
  return std::make_unique<RedisTier>(std::move(options));
}

}  // namespace ktune::fleet
