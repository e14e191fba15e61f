#include "server/compile/compile_pool.h"

#include <memory>

namespace ktune {

CompilePool::CompilePool(Compiler* compiler, int threads) : compiler_(compiler) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

CompilePool::~CompilePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

std::future<absl::StatusOr<CompileResult>> CompilePool::Submit(CompileRequest request) {
  // std::function needs a copyable callable; the promise lives behind a shared_ptr.
  auto promise = std::make_shared<std::promise<absl::StatusOr<CompileResult>>>();
  std::future<absl::StatusOr<CompileResult>> future = promise->get_future();
  auto task = [this, promise, request = std::move(request)]() {
    promise->set_value(compiler_->Compile(request));
  };
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  return future;
}

std::vector<absl::StatusOr<CompileResult>> CompilePool::CompileAll(
    std::vector<CompileRequest> requests) {
  std::vector<std::future<absl::StatusOr<CompileResult>>> futures;
  futures.reserve(requests.size());
  for (CompileRequest& r : requests) futures.push_back(Submit(std::move(r)));
  std::vector<absl::StatusOr<CompileResult>> results;
  results.reserve(futures.size());
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

void CompilePool::Work() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CompilePool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      // Drain before stopping, so every submitted future gets its value.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace ktune
