// The worker's request handler without a GPU: what it answers before and without a driver.
// (With a GPU, worker_gpu_test.cc covers the rest.)
#include "server/worker/worker_session.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "absl/status/status.h"
#include "ktune/v1/worker.pb.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

bool DriverLibraryPresent() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  dlclose(lib);
  return true;
}

v1::Request HelloRequest(int ordinal) {
  v1::Request r;
  r.mutable_hello()->set_ordinal(ordinal);
  return r;
}

void ExpectError(const v1::Response& response, absl::StatusCode code, const char* substr) {
  ASSERT_TRUE(response.has_error()) << response.DebugString();
  EXPECT_EQ(response.error().code(), static_cast<int>(code)) << response.error().message();
  EXPECT_THAT(response.error().message(), HasSubstr(substr));
  EXPECT_FALSE(response.error().poisoned());
}

TEST(WorkerSessionTest, HelloWithoutDriverIsUnavailableAndNamesLibcuda) {
  std::unique_ptr<WorkerSession> session = NewWorkerSession();
  const v1::Response response = session->Handle(HelloRequest(0));
  if (response.has_device()) GTEST_SKIP() << "a CUDA driver and GPU are present";
  ASSERT_TRUE(response.has_error()) << response.DebugString();
  EXPECT_EQ(response.error().code(), static_cast<int>(absl::StatusCode::kUnavailable))
      << response.error().message();
  EXPECT_FALSE(response.error().poisoned());
  EXPECT_FALSE(session->poisoned());
  if (!DriverLibraryPresent()) {
    EXPECT_THAT(response.error().message(), HasSubstr("no CUDA driver: dlopen libcuda.so.1"));
  }
  // Asking again gives the same answer (the load is attempted once per process).
  const v1::Response again = session->Handle(HelloRequest(0));
  ASSERT_TRUE(again.has_error());
  EXPECT_EQ(again.error().message(), response.error().message());
}

TEST(WorkerSessionTest, RequestsBeforeHelloAreRefused) {
  std::unique_ptr<WorkerSession> session = NewWorkerSession();
  v1::Request ceiling;
  ceiling.mutable_ceiling();
  ExpectError(session->Handle(ceiling), absl::StatusCode::kFailedPrecondition, "Hello");
  v1::Request problem;
  problem.mutable_set_problem()->set_seed(1);
  ExpectError(session->Handle(problem), absl::StatusCode::kFailedPrecondition, "Hello");
  v1::Request measure;
  measure.mutable_measure();
  ExpectError(session->Handle(measure), absl::StatusCode::kFailedPrecondition, "Hello");
  EXPECT_FALSE(session->poisoned());
}

TEST(WorkerSessionTest, EmptyRequestIsInvalid) {
  std::unique_ptr<WorkerSession> session = NewWorkerSession();
  ExpectError(session->Handle(v1::Request()), absl::StatusCode::kInvalidArgument, "empty request");
}

TEST(WorkerSessionTest, HelloForAnotherOrdinalThanPinnedIsInvalid) {
  std::unique_ptr<WorkerSession> session = NewWorkerSession(/*ordinal=*/1);
  ExpectError(session->Handle(HelloRequest(0)), absl::StatusCode::kInvalidArgument, "--ordinal");
}

TEST(WorkerSessionTest, NoOutputsWithoutAProblem) {
  std::unique_ptr<WorkerSession> session = NewWorkerSession();
  EXPECT_TRUE(session->LastOutputs().empty());
  session->Handle(HelloRequest(0));
  EXPECT_TRUE(session->LastOutputs().empty());
}

}  // namespace
}  // namespace ktune
