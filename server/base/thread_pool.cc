#include "server/base/thread_pool.h"

#include <algorithm>
#include <utility>

namespace ktune {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Run(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  work_.push_back(std::move(fn));
}

void ThreadPool::Work() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !work_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      // Drain before stopping, so everything queued runs (a compile's future gets its value).
      if (work_.empty()) return;
      fn = std::move(work_.front());
      work_.pop_front();
    }
    fn();
  }
}

}  // namespace ktune
