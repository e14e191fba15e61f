// The idle compiles' compilers: ktune-warm child processes (server/compile/warm_main.cc),
// each compiling one program at a time into the cubin cache at Linux's SCHED_IDLE class.
// They are processes, not threads of the tuning process, because NVRTC compiles in one
// process slow each other down whatever their threads' class (measured: two compile
// threads on two cores took twice as long beside two SCHED_IDLE compiling threads, and no
// longer beside a SCHED_IDLE compiling process).
//
// Fill (CacheFiller) takes an idle helper, or starts one while fewer than `max_helpers`
// run, else waits for one; a helper that dies or stops answering is killed and the next
// Fill starts another. Safe from any thread.
#ifndef KTUNE_SERVER_ENGINE_WARM_HELPERS_H_
#define KTUNE_SERVER_ENGINE_WARM_HELPERS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/base/piped_child.h"
#include "server/compile/cubin_cache.h"

namespace ktune {

struct WarmHelperOptions {
  std::string program;  // ktune-warm
  std::string cache_dir;
  std::vector<std::string> include_dirs;  // as the job's compiler has them
  bool pch = false;                       // NVRTC's precompiled headers in each helper
  int max_helpers = 1;
  // A compile that takes longer is taken for a hung helper.
  int64_t timeout_ms = 10 * 60 * 1000;
};

class WarmHelpers : public CacheFiller {
 public:
  // kFailedPrecondition naming the program when it is not an executable file. Starts no
  // helper yet: the first Fill does.
  static absl::StatusOr<std::unique_ptr<WarmHelpers>> Create(WarmHelperOptions options);
  ~WarmHelpers() override;  // Shutdown
  WarmHelpers(const WarmHelpers&) = delete;
  WarmHelpers& operator=(const WarmHelpers&) = delete;

  // `request` compiled by a helper into the cache under `key`; kInternal with the helper's
  // reason when its compiler failed or is not `identity`, kUnavailable when the helper died
  // (or Shutdown killed it), kDeadlineExceeded when it did not answer in time.
  absl::Status Fill(const CompileRequest& request, const std::string& key,
                    const std::string& identity) override;

  // Kills every helper, busy ones included (their Fill returns kUnavailable at once), so a
  // process that is done does not wait for compiles no one needs; later Fills fail.
  void Shutdown();

  int started() const;  // helpers started so far

 private:
  explicit WarmHelpers(WarmHelperOptions options) : options_(std::move(options)) {}
  absl::StatusOr<PipedChild> Take();
  absl::StatusOr<PipedChild> Start();
  void Give(const PipedChild& h);
  void Stop(const PipedChild& h);  // kills and reaps it, closes its pipes

  const WarmHelperOptions options_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int live_ ABSL_GUARDED_BY(mu_) = 0;  // started and not stopped
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<PipedChild> idle_ ABSL_GUARDED_BY(mu_);
  std::vector<pid_t> busy_ ABSL_GUARDED_BY(mu_);  // for Shutdown's kill
};

}  // namespace ktune

#endif  // KTUNE_SERVER_ENGINE_WARM_HELPERS_H_
