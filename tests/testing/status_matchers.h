// GoogleTest matchers for absl::Status / absl::StatusOr, which googletest 1.12 and
// abseil 20220623 do not ship.
//
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden")));
//   EXPECT_THAT(v, IsOkAndHolds(42));
//   ASSERT_OK(s);  ASSERT_OK_AND_ASSIGN(auto x, MakeX());
#ifndef KTUNE_TESTS_TESTING_STATUS_MATCHERS_H_
#define KTUNE_TESTS_TESTING_STATUS_MATCHERS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ktune::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& s = ::ktune::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()),
                                       result_listener);
}

MATCHER(IsOk, "") {
  const absl::Status& s = ::ktune::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P(IsOkAndHolds, value_matcher, "") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace ktune::testing

#define KTUNE_TESTING_CONCAT_INNER_(a, b) a##b
#define KTUNE_TESTING_CONCAT_(a, b) KTUNE_TESTING_CONCAT_INNER_(a, b)

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::ktune::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::ktune::testing::IsOk())

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(KTUNE_TESTING_CONCAT_(statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  ASSERT_TRUE(statusor.ok()) << statusor.status();      \
  lhs = *std::move(statusor)

#endif  // KTUNE_TESTS_TESTING_STATUS_MATCHERS_H_
