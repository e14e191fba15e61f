#include "server/base/idle_pool.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace ktune {

void LowerThisThreadToIdle() {
#ifdef SCHED_IDLE
  sched_param param{};
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &param) == 0) return;
#endif
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
}

IdlePool::IdlePool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
}

IdlePool::~IdlePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queues_.clear();
  }
  for (std::thread& t : threads_) t.join();
}

void IdlePool::Replace(const void* owner, std::vector<std::function<void()>> work) {
  absl::MutexLock lock(&mu_);
  if (work.empty()) {
    queues_.erase(owner);
    return;
  }
  std::deque<std::function<void()>>& q = queues_[owner];
  q.clear();
  for (auto& fn : work) q.push_back(std::move(fn));
}

void IdlePool::WaitUntilDone() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return queues_.empty() && running_ == 0;
  };
  mu_.Await(absl::Condition(&done));
}

int64_t IdlePool::completed() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

void IdlePool::Work() {
  LowerThisThreadToIdle();
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queues_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      // The owners in turn: the first queue at or after next_, else the first one.
      auto it = queues_.lower_bound(next_);
      if (it == queues_.end()) it = queues_.begin();
      fn = std::move(it->second.front());
      it->second.pop_front();
      auto after = std::next(it);
      next_ = after == queues_.end() ? nullptr : after->first;
      if (it->second.empty()) queues_.erase(it);
      ++running_;
    }
    fn();
    absl::MutexLock lock(&mu_);
    --running_;
    ++completed_;
  }
}

}  // namespace ktune
