// A fixed pool of threads compiling candidates in parallel (NVRTC is single-threaded per
// program, so throughput comes from compiling several programs at once).
//
// Submit is safe from any thread. The destructor finishes the work already submitted, then
// joins the threads.
#ifndef KTUNE_SERVER_COMPILE_COMPILE_POOL_H_
#define KTUNE_SERVER_COMPILE_COMPILE_POOL_H_

#include <future>
#include <vector>

#include "absl/status/statusor.h"
#include "server/base/thread_pool.h"
#include "server/compile/compiler.h"

namespace ktune {

class CompilePool {
 public:
  // `compiler` must outlive the pool. threads <= 0: one per core (ThreadsFor).
  CompilePool(Compiler* compiler, int threads);

  // The threads a pool asked for `requested` runs: requested, or one per core for <= 0.
  static int ThreadsFor(int requested);
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  std::future<absl::StatusOr<CompileResult>> Submit(CompileRequest request);

  // Compiles all of `requests` and returns their results in the same order.
  std::vector<absl::StatusOr<CompileResult>> CompileAll(std::vector<CompileRequest> requests);

  int threads() const { return threads_.threads(); }

 private:
  Compiler* const compiler_;
  ThreadPool threads_;  // last: joined first, while the compiler is still there
};

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_COMPILE_POOL_H_
