// ktune-warm --cache-dir DIR [--include-dir DIR]... [--pch]: compiles candidates into the
// cubin cache ahead of a tuning job's need for them (the idle compiles of ktuned and
// `ktune tune`, server/engine/warm_helpers.h).
//
// Reads WarmRequest frames (server/gpu/framing.h, proto/ktune/v1/warm.proto) from stdin and
// answers each with one WarmReply on stdout, until stdin ends. The whole process runs at
// Linux's SCHED_IDLE class: it uses only the cores nothing else wants. It is a process of
// its own, not threads of the tuning process, because NVRTC compiles in one process slow
// each other down whatever the scheduling class of their threads (bench/RESULTS.md,
// 2026-12-05 fifth session), while a process at idle class costs the others nothing.
//
// Exit status: 0 at end of input; 1 for bad flags, a compiler that cannot be made, or an
// answer that could not be written (the parent is gone); 2 for a frame that could not be read.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "ktune/v1/warm.pb.h"
#include "server/base/idle_pool.h"
#include "server/base/scratch_dir.h"
#include "server/compile/cubin_cache.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/gpu/framing.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: ktune-warm --cache-dir DIR [--include-dir DIR]... [--pch]\n"
               "Compiles ktune's candidates into a cubin cache, answering WarmRequest frames "
               "on stdin (proto/ktune/v1/warm.proto).\n");
  return 1;
}

ktune::CompileRequest ToRequest(const ktune::v1::WarmRequest& w) {
  ktune::CompileRequest r;
  r.source = w.source();
  r.source_name = w.source_name();
  r.name_expressions.assign(w.name_expressions().begin(), w.name_expressions().end());
  r.options.assign(w.options().begin(), w.options().end());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cache_dir;
  ktune::NvrtcOptions options;
  bool pch = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cache-dir" && i + 1 < argc) {
      cache_dir = argv[++i];
    } else if (arg == "--include-dir" && i + 1 < argc) {
      options.include_dirs.push_back(argv[++i]);
    } else if (arg == "--pch") {
      pch = true;
    } else {
      return Usage();
    }
  }
  if (cache_dir.empty()) return Usage();
  ktune::LowerThisThreadToIdle();  // before any other thread: the whole process

  absl::StatusOr<std::unique_ptr<ktune::CubinCache>> cache = ktune::CubinCache::Open(cache_dir);
  if (!cache.ok()) {
    std::fprintf(stderr, "ktune-warm: cubin cache %s: %s\n", cache_dir.c_str(),
                 std::string(cache.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<ktune::ScratchDir> pch_dir;
  if (pch) {
    absl::StatusOr<std::unique_ptr<ktune::ScratchDir>> dir =
        ktune::ScratchDir::Create("ktune-warm-pch-");
    if (dir.ok()) {
      pch_dir = *std::move(dir);
      options.pch_dir = pch_dir->path();
    }  // else without: the headers are a speed-up only
  }
  absl::StatusOr<std::unique_ptr<ktune::Compiler>> compiler = ktune::NewNvrtcCompiler(options);
  if (!compiler.ok()) {
    std::fprintf(stderr, "ktune-warm: compiler: %s\n",
                 std::string(compiler.status().message()).c_str());
    return 1;
  }
  const std::string identity = (*compiler)->Identity();

  for (;;) {
    ktune::v1::WarmRequest request;
    absl::Status read = ktune::ReadFrame(STDIN_FILENO, &request, -1);
    if (absl::IsUnavailable(read)) return 0;  // end of input: the parent is done
    if (!read.ok()) {
      std::fprintf(stderr, "ktune-warm: %s\n", std::string(read.message()).c_str());
      return 2;
    }
    ktune::v1::WarmReply reply;
    if (request.identity() != identity) {
      reply.set_error("the helper's compiler is not the parent's (another NVRTC or other "
                      "headers): nothing stored");
    } else if (!(*cache)->Contains(request.key())) {
      absl::StatusOr<ktune::CompileResult> result = (*compiler)->Compile(ToRequest(request));
      if (result.ok()) {
        result->key = request.key();
        // A cache that cannot be written costs the job a compile later, nothing else.
        (void)(*cache)->Put(request.key(), *result);
      } else {
        reply.set_error(std::string(result.status().message()));
      }
    }
    if (!ktune::WriteFrame(STDOUT_FILENO, reply).ok()) return 1;
  }
}
