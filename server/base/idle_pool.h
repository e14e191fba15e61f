// Threads that run queued work only while the CPU has nothing else to run: Linux's
// SCHED_IDLE class (nice 19 where it cannot be set). A guided tuning job measures a fifth of
// its space and waits for each batch's compiles, while an exhaustive one finds most of its
// candidates in the cubin cache from the template's earlier keys. The job queues the
// compiles of its unmeasured candidates here, so cores the job leaves idle fill the cache
// for its later batches and the template's next keys. (The compiles themselves run in
// helper processes, server/engine/warm_helpers.h: NVRTC compiles in this process would slow
// the job's own whatever these threads' class; the threads bind candidates and wait.)
//
// Work is queued per owner (one owner runs one job at a time: a GPU); Replace drops the
// owner's earlier queue, so one job's leftovers never hold back the next job of that owner,
// and the threads take from the owners' queues in turn. Safe from any thread; the
// destructor drops what is queued and waits for what runs.
#ifndef KTUNE_SERVER_BASE_IDLE_POOL_H_
#define KTUNE_SERVER_BASE_IDLE_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace ktune {

class IdlePool {
 public:
  // At least one thread: threads < 1 starts one.
  explicit IdlePool(int threads);
  ~IdlePool();
  IdlePool(const IdlePool&) = delete;
  IdlePool& operator=(const IdlePool&) = delete;

  // `owner`'s queue becomes `work`, in order; what it queued before and no thread has
  // started yet is dropped. An empty `work` clears the owner's queue.
  void Replace(const void* owner, std::vector<std::function<void()>> work);

  // Blocks until nothing is queued and nothing runs.
  void WaitUntilDone();

  // Work run to the end since the pool started.
  int64_t completed() const;

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Work();

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  // Each owner's queue; `next_` is the owner after the one served last.
  std::map<const void*, std::deque<std::function<void()>>> queues_ ABSL_GUARDED_BY(mu_);
  const void* next_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::thread> threads_;
};

// Moves the calling thread (on Linux each thread is scheduled alone) to SCHED_IDLE, or to
// nice 19 where that cannot be set; threads it starts later inherit the class. The idle
// pool's threads call it, and ktune-warm at its start for the whole process.
void LowerThisThreadToIdle();

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_IDLE_POOL_H_
