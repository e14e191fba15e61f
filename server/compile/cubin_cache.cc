#include "server/compile/cubin_cache.h"

#include <unistd.h>

#include <chrono>
#include <future>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "server/base/file.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/compile/cache_key.h"

namespace ktune {
namespace {

// File layout: the sha256 of everything after its line, '\n', one line of JSON (the
// result without the cubin, plus the cubin's size), '\n', then the cubin's bytes. The
// digest covers the header too, so a damaged register count is a miss, not a wrong hit.
// The magic names the format's version.
constexpr char kMagic[] = "ktune-cubin-cache-2";

nlohmann::json ResourcesToJson(const KernelResources& r) {
  return {{"mangled_name", r.mangled_name}, {"arch", r.arch},
          {"registers", r.registers},       {"barriers", r.barriers},
          {"static_smem", r.static_smem},   {"const_bytes", r.const_bytes},
          {"local_bytes", r.local_bytes},   {"stack_frame", r.stack_frame},
          {"spill_stores", r.spill_stores}, {"spill_loads", r.spill_loads},
          {"ptxas_ms", r.ptxas_ms}};
}

KernelResources ResourcesFromJson(const nlohmann::json& j) {
  KernelResources r;
  r.mangled_name = j.at("mangled_name").get<std::string>();
  r.arch = j.at("arch").get<std::string>();
  r.registers = j.at("registers").get<int64_t>();
  r.barriers = j.at("barriers").get<int64_t>();
  r.static_smem = j.at("static_smem").get<int64_t>();
  r.const_bytes = j.at("const_bytes").get<int64_t>();
  r.local_bytes = j.at("local_bytes").get<int64_t>();
  r.stack_frame = j.at("stack_frame").get<int64_t>();
  r.spill_stores = j.at("spill_stores").get<int64_t>();
  r.spill_loads = j.at("spill_loads").get<int64_t>();
  r.ptxas_ms = j.at("ptxas_ms").get<double>();
  return r;
}

// Concurrent compiles of one key are merged: the first caller compiles, the others wait for
// its result instead of compiling the same program beside it. Two GPUs tuning keys of one
// template at once ask for the same configs within moments of each other, before either
// result is in the cache.
class CachingCompiler : public Compiler {
 public:
  CachingCompiler(std::unique_ptr<Compiler> inner, const CubinCache* cache, CacheFiller* filler)
      : inner_(std::move(inner)), cache_(cache), filler_(filler) {}

  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override {
    const auto start = std::chrono::steady_clock::now();
    const std::string key = CompileCacheKey(request, inner_->Identity());
    if (std::optional<CompileResult> hit = cache_->Get(key)) return Timed(*std::move(hit), start);
    std::promise<absl::StatusOr<CompileResult>> mine;
    std::shared_future<absl::StatusOr<CompileResult>> theirs;
    {
      absl::MutexLock lock(&mu_);
      auto [it, first] = in_flight_.try_emplace(key);
      if (first) {
        it->second = mine.get_future().share();
      } else {
        theirs = it->second;
      }
    }
    if (theirs.valid()) {
      absl::StatusOr<CompileResult> result = theirs.get();
      if (!result.ok()) return result.status();
      CompileResult merged = *result;
      merged.cache_hit = true;  // this caller compiled nothing
      return Timed(std::move(merged), start);
    }
    absl::StatusOr<CompileResult> result = inner_->Compile(request);
    if (result.ok()) {
      result->key = key;
      // A cache that cannot be written costs time, never a result.
      cache_->Put(key, *result).IgnoreError();
    }
    mine.set_value(result);
    absl::MutexLock lock(&mu_);
    in_flight_.erase(key);
    return result;
  }
  absl::Status Warm(const CompileRequest& request) override {
    // Without a filler the only place left is this process, where the warm's NVRTC would
    // slow the job's own compiles down (cubin_cache.h).
    if (filler_ == nullptr) return absl::OkStatus();
    const std::string key = CompileCacheKey(request, inner_->Identity());
    {
      absl::MutexLock lock(&mu_);
      if (in_flight_.contains(key) || !warming_.insert(key).second) return absl::OkStatus();
    }
    const absl::Status status = cache_->Contains(key)
                                    ? absl::OkStatus()
                                    : filler_->Fill(request, key, inner_->Identity());
    absl::MutexLock lock(&mu_);
    warming_.erase(key);
    return status;
  }
  bool Cached(const std::string& key) override {
    {
      absl::MutexLock lock(&mu_);
      if (in_flight_.contains(key)) return true;
    }
    return cache_->Contains(key);
  }
  std::string Identity() const override { return inner_->Identity(); }
  std::string Version() const override { return inner_->Version(); }

 private:
  static CompileResult Timed(CompileResult r, std::chrono::steady_clock::time_point start) {
    r.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    return r;
  }

  std::unique_ptr<Compiler> inner_;
  const CubinCache* cache_;
  CacheFiller* const filler_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_future<absl::StatusOr<CompileResult>>> in_flight_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> warming_ ABSL_GUARDED_BY(mu_);  // keys being filled
};

}  // namespace

absl::StatusOr<std::unique_ptr<CubinCache>> CubinCache::Open(const std::string& dir) {
  KTUNE_RETURN_IF_ERROR(MakeDirs(dir));
  return std::unique_ptr<CubinCache>(new CubinCache(dir));
}

std::string CubinCache::PathFor(const std::string& key) const {
  return absl::StrCat(dir_, "/", key, ".cubin");
}

bool CubinCache::Contains(const std::string& key) const {
  return ::access(PathFor(key).c_str(), F_OK) == 0;
}

std::optional<CompileResult> CubinCache::Get(const std::string& key) const {
  const std::string path = PathFor(key);
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return std::nullopt;
  auto bad = [&]() -> std::optional<CompileResult> {
    ::unlink(path.c_str());
    return std::nullopt;
  };
  const size_t digest_end = bytes->find('\n');
  if (digest_end == std::string::npos ||
      Sha256Hex(absl::string_view(*bytes).substr(digest_end + 1)) != bytes->substr(0, digest_end)) {
    return bad();
  }
  const size_t eol = bytes->find('\n', digest_end + 1);
  if (eol == std::string::npos) return bad();
  nlohmann::json j =
      nlohmann::json::parse(bytes->substr(digest_end + 1, eol - digest_end - 1), nullptr, false);
  if (!j.is_object()) return bad();
  CompileResult r;
  // nlohmann's getters throw on a mismatch; a bad file is a miss, and stays in here.
  try {
    if (j.at("magic").get<std::string>() != kMagic || j.at("key").get<std::string>() != key) {
      return bad();
    }
    r.cubin = bytes->substr(eol + 1);
    if (r.cubin.size() != j.at("cubin_size").get<size_t>()) return bad();
    r.ok = j.at("ok").get<bool>();
    r.log = j.at("log").get<std::string>();
    for (const auto& k : j.at("kernels")) {
      CompiledKernel ck;
      ck.name_expression = k.at("name_expression").get<std::string>();
      ck.lowered_name = k.at("lowered_name").get<std::string>();
      ck.resources = ResourcesFromJson(k.at("resources"));
      r.kernels.push_back(std::move(ck));
    }
  } catch (const nlohmann::json::exception&) {
    return bad();
  }
  r.key = key;
  r.cache_hit = true;
  return r;
}

absl::Status CubinCache::Put(const std::string& key, const CompileResult& result) const {
  nlohmann::json kernels = nlohmann::json::array();
  for (const CompiledKernel& k : result.kernels) {
    kernels.push_back({{"name_expression", k.name_expression},
                       {"lowered_name", k.lowered_name},
                       {"resources", ResourcesToJson(k.resources)}});
  }
  nlohmann::json j = {{"magic", kMagic},
                      {"key", key},
                      {"ok", result.ok},
                      {"log", result.log},
                      {"kernels", kernels},
                      {"cubin_size", result.cubin.size()}};
  // dump() escapes newlines inside strings, so the header is one line; a log that is not
  // UTF-8 has its odd bytes replaced rather than failing the write.
  const std::string header = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string body = absl::StrCat(header, "\n", result.cubin);
  return AtomicWriteFile(PathFor(key), absl::StrCat(Sha256Hex(body), "\n", body));
}

std::unique_ptr<Compiler> NewCachingCompiler(std::unique_ptr<Compiler> inner,
                                             const CubinCache* cache, CacheFiller* filler) {
  return std::make_unique<CachingCompiler>(std::move(inner), cache, filler);
}

}  // namespace ktune
