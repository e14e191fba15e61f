#include "server/base/idle_pool.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace ktune {
namespace {

// Lowers the calling thread's scheduling class and says to what. On Linux both calls act
// on the thread alone (each thread is its own task), not on the process.
std::string LowerThisThread() {
#ifdef SCHED_IDLE
  sched_param param{};
  param.sched_priority = 0;
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &param) == 0) return "SCHED_IDLE";
#endif
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  if (::setpriority(PRIO_PROCESS, tid, 19) == 0) return "nice 19";
  return "normal";
}

}  // namespace

IdlePool::IdlePool(int threads) {
  const int n = std::max(threads, 1);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
  absl::MutexLock lock(&mu_);
  auto all_started = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return started_ == n; };
  mu_.Await(absl::Condition(&all_started));
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

std::string IdlePool::priority() const {
  absl::MutexLock lock(&mu_);
  return priority_;
}

void IdlePool::Work() {
  const std::string priority = LowerThisThread();
  {
    absl::MutexLock lock(&mu_);
    priority_ = priority;
    ++started_;
  }
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
