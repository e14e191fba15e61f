// A fixed pool of threads compiling candidates in parallel (NVRTC is single-threaded per
// program, so throughput comes from compiling several programs at once).
//
// Submit is safe from any thread. The destructor finishes the work already submitted, then
// joins the threads.
#ifndef KTUNE_SERVER_COMPILE_COMPILE_POOL_H_
#define KTUNE_SERVER_COMPILE_COMPILE_POOL_H_

#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/compile/compiler.h"

namespace ktune {

class CompilePool {
 public:
  // `compiler` must outlive the pool. threads <= 0: one per core.
  CompilePool(Compiler* compiler, int threads);
  ~CompilePool();
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  std::future<absl::StatusOr<CompileResult>> Submit(CompileRequest request);

  // Compiles all of `requests` and returns their results in the same order.
  std::vector<absl::StatusOr<CompileResult>> CompileAll(std::vector<CompileRequest> requests);

  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void Work();

  Compiler* const compiler_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_COMPILE_POOL_H_
