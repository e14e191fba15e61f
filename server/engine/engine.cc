#include "server/engine/engine.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/base/status_macros.h"
#include "server/gpu/process_gpu.h"
#include "server/tuning/compile_request.h"

namespace ktune {
namespace {

// `s` with its code kept and `what` in front of its message.
absl::Status Naming(const std::string& what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

absl::StatusOr<std::unique_ptr<TemplateRegistry>> OpenRegistry(EngineOptions& options) {
  if (options.registry != nullptr) return std::move(options.registry);
  const std::string dir =
      options.templates_dir.empty() ? DefaultTemplatesDir() : options.templates_dir;
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry = LoadTemplateRegistry(dir);
  if (!registry.ok()) return Naming(absl::StrCat("--templates ", dir), registry.status());
  return registry;
}

absl::Status OpenStore(const std::string& db, bool exclusive, Engine& e) {
  e.db_path = db.empty() ? DefaultDbPath() : db;
  if (db.empty()) {
    if (absl::Status s = MakePrivateDir(DefaultCacheDir()); !s.ok()) {
      return Naming(absl::StrCat("cache folder ", DefaultCacheDir()), s);
    }
  }
  if (exclusive && e.db_path != ":memory:") {
    absl::StatusOr<std::unique_ptr<FileLock>> lock = LockFileExclusive(e.db_path + ".lock");
    if (!lock.ok()) {
      return Naming(absl::StrCat("store ", e.db_path, " is served by another ktuned"),
                    lock.status());
    }
    e.store_lock = *std::move(lock);
  }
  absl::StatusOr<std::unique_ptr<store::Store>> store = store::OpenSqliteStore(e.db_path);
  if (!store.ok()) return Naming(absl::StrCat("--db ", e.db_path), store.status());
  e.store = *std::move(store);
  return absl::OkStatus();
}

absl::Status OpenCompiler(const std::string& cache_dir, int threads, AutoSwitch pch,
                          AutoSwitch idle, const std::string& warm_program, Engine& e) {
  if (cache_dir.empty()) {
    // The cubins a worker loads come from here: only from a folder that is ours alone.
    if (absl::Status s = MakePrivateDir(DefaultCacheDir()); !s.ok()) {
      return Naming(absl::StrCat("cache folder ", DefaultCacheDir()), s);
    }
  }
  const std::string dir =
      cache_dir.empty() ? absl::StrCat(DefaultCacheDir(), "/cubins") : cache_dir;
  absl::StatusOr<std::unique_ptr<CubinCache>> cache = CubinCache::Open(dir);
  if (!cache.ok()) return Naming(absl::StrCat("cubin cache ", dir), cache.status());
  e.cache = *std::move(cache);
  const int pool_threads = CompilePool::ThreadsFor(threads);
  const bool many_cores = pool_threads >= kAutoMinThreads;
  if (pch == AutoSwitch::kOn || (pch == AutoSwitch::kAuto && many_cores)) {
    absl::StatusOr<std::unique_ptr<ScratchDir>> dir = ScratchDir::Create("ktune-pch-");
    if (!dir.ok()) return Naming("precompiled headers", dir.status());
    e.pch_dir = *std::move(dir);
  }
  if (idle == AutoSwitch::kOn || (idle == AutoSwitch::kAuto && many_cores)) {
    WarmHelperOptions w;
    w.program = warm_program.empty() ? DefaultWarmPath() : warm_program;
    w.cache_dir = dir;
    if (!e.registry->include_dir().empty()) w.include_dirs.push_back(e.registry->include_dir());
    w.pch = e.pch_dir != nullptr;
    w.max_helpers = pool_threads;
    absl::StatusOr<std::unique_ptr<WarmHelpers>> warm = WarmHelpers::Create(std::move(w));
    if (warm.ok()) {
      e.warm = *std::move(warm);
    } else if (idle == AutoSwitch::kOn) {
      return warm.status();
    }
    // Auto leaves them off where the helper is missing (a lone copy of ktune, say): the
    // search is the same without them, only slower.
  }
  absl::StatusOr<std::unique_ptr<Compiler>> compiler = NewTemplateCompiler(
      *e.registry, e.cache.get(), e.pch_dir ? e.pch_dir->path() : "", e.warm.get());
  if (!compiler.ok()) return Naming("compiler", compiler.status());
  e.compiler = *std::move(compiler);
  e.pool = std::make_unique<CompilePool>(e.compiler.get(), pool_threads);
  // Threads that bind the candidates and wait for the helpers: the helpers, not they, keep
  // the compiles out of the job's way.
  if (e.warm != nullptr) e.idle = std::make_unique<IdlePool>(pool_threads);
  return absl::OkStatus();
}

}  // namespace

std::string IdleCompileHelp() {
  return absl::StrCat(
      "Guided and random tuning jobs compile the rest of their space on otherwise idle cores, "
      "for their later batches and the template's next keys: auto (on from ",
      kAutoMinThreads, " compile threads where ktune-warm is found), on or off");
}

absl::StatusOr<AutoSwitch> ParseAutoSwitch(const std::string& flag, const std::string& value) {
  if (value == "auto") return AutoSwitch::kAuto;
  if (value == "on") return AutoSwitch::kOn;
  if (value == "off") return AutoSwitch::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": '", value, "' is not auto, on or off"));
}

absl::StatusOr<std::unique_ptr<Engine>> OpenEngine(EngineOptions options) {
  auto e = std::make_unique<Engine>();
  KTUNE_ASSIGN_OR_RETURN(e->registry, OpenRegistry(options));
  KTUNE_RETURN_IF_ERROR(OpenStore(options.db, options.exclusive_store, *e));
  KTUNE_RETURN_IF_ERROR(
      OpenCompiler(options.cache_dir, options.compile_threads, options.pch,
                   options.idle_compiles, options.warm_program, *e));
  e->gpu_factory = ProcessGpuFactory(options.worker);
  return e;
}

GpuFactory ProcessGpuFactory(const std::string& worker) {
  return [worker = worker.empty() ? DefaultWorkerPath() : worker](int ordinal) {
    ProcessGpuOptions o;
    o.worker_path = worker;
    o.ordinal = ordinal;
    return StartProcessGpu(o);
  };
}

}  // namespace ktune
