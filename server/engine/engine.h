// The engine both front ends run on: the template registry, the SQLite store, the on-disk
// cubin cache, NVRTC over the registry, the compile pool, and the way to a GPU (a
// ktune-worker child per visible ordinal). `ktuned` (frontends/ktuned) serves it over gRPC and
// adds the job queue and a worker per GPU; `ktune tune` (frontends/ktune) drives it in this
// process with one GPU. Both open it here, so they open it the same way.
//
// The members are as thread-safe as their own types: the registry is immutable, the store,
// the compiler and the pool are safe to share; gpu_factory may be called from any thread.
#ifndef KTUNE_SERVER_ENGINE_ENGINE_H_
#define KTUNE_SERVER_ENGINE_ENGINE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/base/file_lock.h"
#include "server/base/idle_pool.h"
#include "server/base/scratch_dir.h"
#include "server/compile/compile_pool.h"
#include "server/compile/compiler.h"
#include "server/compile/cubin_cache.h"
#include "server/engine/warm_helpers.h"
#include "server/gpu/gpu.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/tuning/tuning_job.h"

namespace ktune {

// Makes the Gpu for visible ordinal N (the engine: StartProcessGpu; tests: a FakeGpu).
using GpuFactory = std::function<absl::StatusOr<std::unique_ptr<Gpu>>(int ordinal)>;

// A feature that pays on a machine of many cores and not on a small one: on, off, or kAuto,
// on from kAutoMinThreads compile threads up.
enum class AutoSwitch { kAuto, kOn, kOff };

// NVRTC's automatic precompiled headers, measured with the shipped rmsnorm's 62 candidates:
// 1.65-1.8x more compiles per second on the 16-core GPU host, 12 % fewer on a 2-core
// machine, the same machine code. Idle compiles, measured over the Llama spec's 120
// memory-bound keys with the guided strategy: 30-35 s instead of 47 s on the 16-core GPU
// host, its whole spec 141 s instead of 196 s; neutral on a 2-core machine (2026-12-05/06).
inline constexpr int kAutoMinThreads = 8;

// "auto", "on", "off" -> AutoSwitch; kInvalidArgument naming `flag` and the value otherwise.
absl::StatusOr<AutoSwitch> ParseAutoSwitch(const std::string& flag, const std::string& value);

// The help of --idle-compile (EngineOptions::idle_compiles), `ktune tune`'s and ktuned's.
std::string IdleCompileHelp();

struct EngineOptions {
  // The templates, already loaded (the CLI checks a request against them first); null:
  // loaded from templates_dir ("" = the shipped ones).
  std::unique_ptr<TemplateRegistry> registry;
  std::string templates_dir;
  // The SQLite file; "": the default (DefaultDbPath), its folder made when missing.
  std::string db;
  // The cubin cache folder; "": <DefaultCacheDir>/cubins.
  std::string cache_dir;
  // The ktune-worker program; "": the one beside this program (DefaultWorkerPath).
  std::string worker;
  // Compile pool threads; <= 0: one per core.
  int compile_threads = 0;
  // Hold an exclusive lock on `<db>.lock` for the engine's life, refusing a store another
  // process holds so (ktuned: one daemon per store; `ktune` shares the store with it).
  bool exclusive_store = false;
  // Precompiled headers; their state lives in a scratch folder of this process.
  AutoSwitch pch = AutoSwitch::kAuto;
  // Guided and random jobs compile the rest of their space on otherwise idle cores
  // (TuningEnv::idle): ktune-warm processes (warm_helpers.h), as many as the pool's threads.
  // kOn without the helper program is an error; kAuto then runs without them.
  AutoSwitch idle_compiles = AutoSwitch::kAuto;
  // The helper program; "": DefaultWarmPath().
  std::string warm_program;
};

// Members in the order they are opened, so they close in reverse (the pool before the
// compiler it uses, the compiler before its cache).
struct Engine {
  std::string db_path;  // the store's file, the default filled in
  std::unique_ptr<FileLock> store_lock;  // with exclusive_store: `<db>.lock`
  std::unique_ptr<TemplateRegistry> registry;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<CubinCache> cache;
  std::unique_ptr<ScratchDir> pch_dir;  // NVRTC's precompiled headers; null when off
  std::unique_ptr<WarmHelpers> warm;    // with idle_compiles: the compiler warms through it
  std::unique_ptr<Compiler> compiler;
  std::unique_ptr<CompilePool> pool;
  std::unique_ptr<IdlePool> idle;  // with idle_compiles; over the same compiler
  // Starts a ktune-worker for an ordinal. Starting one is cheap and needs no GPU; its
  // Info() is what fails on a host without one (kUnavailable), so opening never does.
  GpuFactory gpu_factory;

  // The helpers go first: the idle pool's threads then find their compiles ended instead
  // of waiting for them.
  ~Engine() {
    if (warm) warm->Shutdown();
  }

  // What a tuning job on `gpu` runs with. REQUIRES: `gpu` outlives the job.
  TuningEnv Env(Gpu* gpu) const {
    return TuningEnv{registry.get(), compiler.get(), pool.get(), gpu, store.get(), idle.get()};
  }
};

// The engine's GpuFactory: a ktune-worker from `worker` ("": DefaultWorkerPath) per ordinal.
// Usable without an engine, e.g. to find the GPU before any file is created.
GpuFactory ProcessGpuFactory(const std::string& worker);

// Opens the registry, the store, the cubin cache, NVRTC, the compile pool and the idle
// compiles. An error keeps its code and names what failed: "--templates DIR: ...", "--db
// FILE: ...", "cubin cache DIR: ...", "precompiled headers: ...", "compiler: ...". Needs no
// GPU or driver.
absl::StatusOr<std::unique_ptr<Engine>> OpenEngine(EngineOptions options);

}  // namespace ktune

#endif  // KTUNE_SERVER_ENGINE_ENGINE_H_
