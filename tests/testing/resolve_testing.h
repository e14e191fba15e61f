// Test helpers over a KernelResolver (server/tuning/kernel_resolver.h): a query for the test
// template "tiny" at n, and Resolve waited for.
//
// Plain functions; as thread-safe as the resolver.
#ifndef KTUNE_TESTS_TESTING_RESOLVE_TESTING_H_
#define KTUNE_TESTS_TESTING_RESOLVE_TESTING_H_

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/templates/registry.h"
#include "server/tuning/kernel_resolver.h"

namespace ktune::testing {

// tiny, f32, shape n=`n`, on GPU 0, its reference bound for the resolver's target.
inline KernelQuery TinyQuery(const TemplateRegistry& registry, const KernelResolver& resolver,
                             int64_t n) {
  KernelQuery q;
  q.tmpl = *registry.Get("tiny");
  q.shape = {{"n", n}};
  q.reference = *BindReference(q.tmpl, q.dtype, q.shape, resolver.Target(0));
  return q;
}

// Resolves and waits for the answer (kDeadlineExceeded after 20 s without one).
inline absl::StatusOr<ResolvedKernel> ResolveAndWait(KernelResolver& resolver,
                                                     const KernelQuery& query,
                                                     KernelPolicy policy) {
  absl::Notification answered;
  absl::StatusOr<ResolvedKernel> answer = absl::UnknownError("no answer");
  resolver.Resolve(query, policy, [&](absl::StatusOr<ResolvedKernel> r) {
    answer = std::move(r);
    answered.Notify();
  });
  if (!answered.WaitForNotificationWithTimeout(absl::Seconds(20))) {
    return absl::DeadlineExceededError("no answer in 20 s");
  }
  return answer;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_RESOLVE_TESTING_H_
