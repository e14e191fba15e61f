// A fixed set of threads running queued functions in submission order. The compile pool
// runs NVRTC compiles on one; the kernel resolver runs FALLBACK's neighbour searches and
// default-config compiles on another.
//
// Run is safe from any thread. The destructor runs what was queued before it, then joins
// the threads; it must not be called from one of them.
#ifndef KTUNE_SERVER_BASE_THREAD_POOL_H_
#define KTUNE_SERVER_BASE_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace ktune {

class ThreadPool {
 public:
  // At least one thread: threads < 1 starts one.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Run(std::function<void()> fn);

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Work();

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_THREAD_POOL_H_
