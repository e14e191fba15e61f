#include "server/compile/compile_pool.h"

#include <algorithm>
#include <memory>
#include <thread>

namespace ktune {

CompilePool::CompilePool(Compiler* compiler, int threads)
    : compiler_(compiler), threads_(ThreadsFor(threads)) {}

int CompilePool::ThreadsFor(int requested) {
  return requested > 0 ? requested
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::future<absl::StatusOr<CompileResult>> CompilePool::Submit(CompileRequest request) {
  // std::function needs a copyable callable; the promise lives behind a shared_ptr.
  auto promise = std::make_shared<std::promise<absl::StatusOr<CompileResult>>>();
  std::future<absl::StatusOr<CompileResult>> future = promise->get_future();
  threads_.Run([this, promise, request = std::move(request)]() {
    promise->set_value(compiler_->Compile(request));
  });
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

}  // namespace ktune
