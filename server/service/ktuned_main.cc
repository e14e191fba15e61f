// ktuned: the ktune daemon. Serves ktune.proto on a unix socket (default) or TCP, tunes on
// this host's GPUs through ktune-worker processes, and keeps winners in the SQLite store.
//
//   ktuned [--listen unix:///PATH | HOST:PORT] [--db FILE] [--templates DIR] [--worker EXE]
//          [--token T] [--max-message-bytes N] [--queue N] [--reflection]
//
// Exit status: 0 after SIGTERM/SIGINT (the running tune is left resumable), 1 when the
// store, the templates or the listener cannot be set up, 2 for bad flags.
#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/compile/cubin_cache.h"
#include "server/gpu/process_gpu.h"
#include "server/service/ktune_server.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/tuning/compile_request.h"

namespace {

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "ktuned: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ktuned: the ktune kernel autotuning daemon");
  std::string listen = ktune::DefaultDaemonTarget();
  std::string db;
  std::string templates = ktune::DefaultTemplatesDir();
  std::string worker = ktune::DefaultWorkerPath();
  std::string token;
  int max_message_bytes = 64 << 20;
  int queue = 64;
  bool reflection = false;
  app.add_option("--listen", listen, "unix:///PATH or HOST:PORT")->capture_default_str();
  app.add_option("--db", db, "SQLite store (default: " + ktune::DefaultDbPath() + ")");
  app.add_option("--templates", templates, "Kernel templates folder")->capture_default_str();
  app.add_option("--worker", worker, "ktune-worker program")->capture_default_str();
  app.add_option("--token", token, "Require 'authorization: Bearer TOKEN' on every call");
  app.add_option("--max-message-bytes", max_message_bytes, "Largest gRPC message")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--queue", queue, "Most tuning jobs waiting")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--reflection", reflection, "Serve gRPC reflection");
  CLI11_PARSE(app, argc, argv);

  // Signals go to one thread that sigwaits; every other thread inherits them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<ktune::TemplateRegistry>> registry =
      ktune::LoadTemplateRegistry(templates);
  if (!registry.ok()) return Fail(absl::StrCat("templates ", templates), registry.status());
  for (const absl::Status& e : (*registry)->errors()) {
    std::fprintf(stderr, "ktuned: template not loaded: %s\n", std::string(e.message()).c_str());
  }
  if (db.empty()) {
    db = ktune::DefaultDbPath();
    if (absl::Status s = ktune::MakeDirs(ktune::DefaultCacheDir()); !s.ok()) {
      return Fail("cache folder", s);
    }
  }
  absl::StatusOr<std::unique_ptr<ktune::store::Store>> store = ktune::store::OpenSqliteStore(db);
  if (!store.ok()) return Fail(absl::StrCat("store ", db), store.status());
  absl::StatusOr<std::unique_ptr<ktune::CubinCache>> cache =
      ktune::CubinCache::Open(absl::StrCat(ktune::DefaultCacheDir(), "/cubins"));
  if (!cache.ok()) return Fail("cubin cache", cache.status());
  absl::StatusOr<std::unique_ptr<ktune::Compiler>> compiler =
      ktune::NewTemplateCompiler(**registry, cache->get());
  if (!compiler.ok()) return Fail("compiler", compiler.status());

  ktune::ServerOptions options;
  options.listen = listen;
  options.registry = registry->get();
  options.store = store->get();
  options.compiler = compiler->get();
  options.gpu_factory = [worker](int ordinal) {
    ktune::ProcessGpuOptions o;
    o.worker_path = worker;
    o.ordinal = ordinal;
    return ktune::StartProcessGpu(o);
  };
  options.queue_capacity = queue;
  options.token = token;
  options.max_message_bytes = max_message_bytes;
  options.reflection = reflection;
  absl::StatusOr<std::unique_ptr<ktune::KtuneServer>> server =
      ktune::StartKtuneServer(std::move(options));
  if (!server.ok()) return Fail("server", server.status());
  if ((*server)->compile_only()) {
    std::fprintf(stderr, "ktuned: compile-only (lookups and FALLBACK compiles): %s\n",
                 (*server)->compile_only_reason().c_str());
  }
  std::fprintf(stderr, "ktuned: serving on %s, store %s\n", listen.c_str(), db.c_str());

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "ktuned: signal %d: shutting down\n", sig);
    (*server)->Shutdown();
  });
  (*server)->Wait();
  waiter.join();
  server->reset();
  return 0;
}
