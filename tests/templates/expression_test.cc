#include "server/templates/expression.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::IsOkAndHolds;
using ::ktune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

Scope TestScope() {
  Scope s;
  s.values = {{"hidden", 4096}, {"tokens", 7}, {"BLOCK", 256},  {"VEC", 4}, {"zero", 0},
              {"neg", -7},      {"big", kMax}, {"small", kMin}, {"one", 1}, {"KTUNE_SM", 90}};
  s.dtype = DType::kBF16;
  return s;
}

absl::StatusOr<int64_t> Eval(absl::string_view text, const Scope& scope = TestScope()) {
  absl::StatusOr<Expression> e = Expression::Parse(text);
  if (!e.ok()) return e.status();
  return e->Evaluate(scope);
}

struct Case {
  const char* text;
  int64_t want;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.text; }

class ValidExpressionTest : public ::testing::TestWithParam<Case> {};

TEST_P(ValidExpressionTest, EvaluatesTo) {
  EXPECT_THAT(Eval(GetParam().text), IsOkAndHolds(GetParam().want)) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidExpressionTest,
    ::testing::Values(
        // Literals and identifiers.
        Case{"0", 0}, Case{"42", 42}, Case{"9223372036854775807", kMax}, Case{"hidden", 4096},
        Case{"  hidden\t", 4096}, Case{"\nVEC\n", 4}, Case{"small", kMin},
        // Precedence.
        Case{"1 + 2 * 3", 7}, Case{"(1 + 2) * 3", 9}, Case{"2 * 3 + 4 * 5", 26},
        Case{"1 + 6 / 2 - 1", 3}, Case{"10 - 7 % 4", 7}, Case{"1 + 2 < 4", 1},
        Case{"1 < 2 == 1", 1}, Case{"2 == 2 && 0 == 1", 0}, Case{"1 || 0 && 0", 1},
        Case{"(1 || 0) && 0", 0}, Case{"0 && 1 || 1", 1}, Case{"3 > 2 > 1", 0},
        Case{"hidden / VEC / BLOCK", 4}, Case{"-2 * 3", -6}, Case{"!0 + 1", 2},
        Case{"-VEC * -VEC", 16}, Case{"1 + 2 == 3 ? 10 : 20", 10},
        // Left associativity.
        Case{"10 - 3 - 2", 5}, Case{"100 / 10 / 5", 2}, Case{"100 % 7 % 3", 2},
        Case{"2 * 3 % 4", 2},
        // Unary.
        Case{"-5", -5}, Case{"--5", 5}, Case{"- - -5", -5}, Case{"+5", 5}, Case{"+-5", -5},
        Case{"!0", 1}, Case{"!7", 0}, Case{"!!7", 1}, Case{"!-1", 0}, Case{"-neg", 7},
        Case{"-(2 + 3)", -5}, Case{"-9223372036854775807", -kMax},
        // Truncating division and modulo, as in C.
        Case{"7 / 2", 3}, Case{"-7 / 2", -3}, Case{"7 / -2", -3}, Case{"-7 / -2", 3},
        Case{"7 % 3", 1}, Case{"-7 % 3", -1}, Case{"7 % -3", 1}, Case{"-7 % -3", -1},
        Case{"small % -1", 0}, Case{"small / 1", kMin},
        // Ternary: lowest precedence, right-associative, nests.
        Case{"1 ? 2 : 3", 2}, Case{"0 ? 2 : 3", 3}, Case{"1 ? 0 ? 4 : 5 : 6", 5},
        Case{"0 ? 1 : 0 ? 2 : 3", 3}, Case{"0 ? 1 : 1 ? 2 : 3", 2},
        Case{"VEC == 4 ? BLOCK : hidden", 256}, Case{"(0 ? 1 : 2) * 10", 20},
        Case{"1 ? 2 : 3 + 100", 2}, Case{"0 || 0 ? 7 : 8", 8},
        Case{"tokens > 4 ? tokens < 10 ? 1 : 2 : 3", 1},
        // Functions.
        Case{"ceil_div(10, 3)", 4}, Case{"ceil_div(9, 3)", 3}, Case{"ceil_div(0, 3)", 0},
        Case{"ceil_div(1, 1)", 1}, Case{"ceil_div(big, 2)", kMax / 2 + 1},
        Case{"ceil_div(hidden, BLOCK * VEC)", 4}, Case{"ceil_div(tokens, 2)", 4},
        Case{"min(3, 5)", 3}, Case{"min(5, 3)", 3}, Case{"min(-1, 1)", -1}, Case{"max(3, 5)", 5},
        Case{"max(neg, zero)", 0}, Case{"max(small, big)", kMax},
        Case{"min(max(1, 2), max(3, 4))", 2}, Case{"max(1 ? 2 : 3, 1)", 2},
        Case{"min ( 1 , 2 )", 1},
        // sizeof: each dtype, and the scope's (bf16 in TestScope).
        Case{"sizeof(f32)", 4}, Case{"sizeof(f16)", 2}, Case{"sizeof(bf16)", 2},
        Case{"sizeof(i32)", 4}, Case{"sizeof(dtype)", 2}, Case{"sizeof( dtype )", 2},
        Case{"hidden * sizeof(dtype) * 2", 16384},
        // Comparisons give 0 or 1.
        Case{"1 < 2", 1}, Case{"2 < 1", 0}, Case{"2 <= 2", 1}, Case{"3 <= 2", 0}, Case{"3 > 2", 1},
        Case{"2 > 2", 0}, Case{"2 >= 2", 1}, Case{"1 >= 2", 0}, Case{"5 == 5", 1},
        Case{"5 == 6", 0}, Case{"5 != 6", 1}, Case{"5 != 5", 0}, Case{"small < big", 1},
        // Logic gives 0 or 1.
        Case{"7 && 9", 1}, Case{"7 && 0", 0}, Case{"0 || 0", 0}, Case{"0 || -3", 1},
        Case{"hidden % (BLOCK * VEC) == 0 && VEC <= 8", 1},
        // Spacing does not matter.
        Case{"1+2*3", 7}, Case{"hidden/VEC", 1024}, Case{"1<=2&&2>=1", 1}));

TEST(ExpressionTest, SizeofDtypeFollowsTheScope) {
  ASSERT_OK_AND_ASSIGN(Expression e, Expression::Parse("sizeof(dtype) * 8"));
  Scope s;
  for (auto [t, want] : {std::pair{DType::kF32, 32}, std::pair{DType::kF16, 16},
                         std::pair{DType::kBF16, 16}, std::pair{DType::kI32, 32},
                         std::pair{DType::kF8E4M3, 8}, std::pair{DType::kF8E5M2, 8}}) {
    s.dtype = t;
    EXPECT_THAT(e.Evaluate(s), IsOkAndHolds(want)) << DTypeName(t);
  }
}

TEST(ExpressionTest, SizeofFp8IsOne) {
  ASSERT_OK_AND_ASSIGN(Expression e, Expression::Parse("sizeof(f8e4m3) + 10 * sizeof(f8e5m2)"));
  EXPECT_THAT(e.Evaluate(Scope()), IsOkAndHolds(11));
}

TEST(ExpressionTest, ShortCircuitSkipsErrors) {
  EXPECT_THAT(Eval("zero != 0 && hidden / zero > 1"), IsOkAndHolds(0));
  EXPECT_THAT(Eval("zero == 0 || hidden % zero > 1"), IsOkAndHolds(1));
  EXPECT_THAT(Eval("zero ? hidden / zero : 5"), IsOkAndHolds(5));
  EXPECT_THAT(Eval("one ? 5 : hidden / zero"), IsOkAndHolds(5));
  // Unknown identifiers on the untaken side are not looked up either.
  EXPECT_THAT(Eval("0 && nobody"), IsOkAndHolds(0));
  EXPECT_THAT(Eval("1 || nobody"), IsOkAndHolds(1));
  EXPECT_THAT(Eval("1 ? 2 : big + 1"), IsOkAndHolds(2));
  // The taken side still fails.
  EXPECT_THAT(Eval("zero == 0 && hidden / zero > 1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("division by zero")));
}

struct ErrorCase {
  const char* text;
  const char* message;  // a substring of the status message
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.text; }

class ParseErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ParseErrorTest, FailsToParse) {
  absl::StatusOr<Expression> e = Expression::Parse(GetParam().text);
  EXPECT_THAT(e, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
  // Every parse error quotes the expression.
  EXPECT_THAT(e, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr(absl::StrCat("'", GetParam().text, "'"))));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseErrorTest,
    ::testing::Values(
        ErrorCase{"", "col 1: empty expression"}, ErrorCase{"   ", "col 1: empty expression"},
        ErrorCase{"1 2", "col 3: unexpected '2' after the expression"},
        ErrorCase{"hidden VEC", "col 8: unexpected 'VEC' after the expression"},
        ErrorCase{"(1 + 2", "col 7: expected ')' but found the end"},
        ErrorCase{"1 + 2)", "col 6: unexpected ')' after the expression"},
        ErrorCase{"1 +", "col 4: expected a number, a name or '(' but found the end"},
        ErrorCase{"* 2", "col 1: expected a number, a name or '(' but found '*'"},
        ErrorCase{"()", "col 2: expected a number, a name or '(' but found ')'"},
        ErrorCase{"1 ? 2", "col 6: expected ':' but found the end"},
        ErrorCase{"1 ? 2 , 3", "col 7: expected ':' but found ','"},
        ErrorCase{"a & b", "col 3: unexpected character '&' (did you mean '&&'?)"},
        ErrorCase{"a | b", "col 3: unexpected character '|' (did you mean '||'?)"},
        ErrorCase{"a = b", "col 3: unexpected character '=' (did you mean '=='?)"},
        ErrorCase{"a # b", "col 3: unexpected character '#'"},
        ErrorCase{"1.5", "col 2: unexpected character '.'"},
        ErrorCase{"12abc", "col 3: unexpected 'a' in a number"},
        ErrorCase{"010", "col 1: leading zero in '010'"},
        ErrorCase{"9223372036854775808",
                  "col 1: integer literal 9223372036854775808 overflows int64"},
        ErrorCase{"1 + 99999999999999999999",
                  "col 5: integer literal 99999999999999999999 overflows"},
        ErrorCase{"-9223372036854775808", "col 2: integer literal 9223372036854775808 overflows"},
        ErrorCase{"min(1)", "col 1: min takes 2 arguments, got 1"},
        ErrorCase{"max(1, 2, 3)", "col 1: max takes 2 arguments, got 3"},
        ErrorCase{"1 + ceil_div()", "col 5: ceil_div takes 2 arguments, got 0"},
        ErrorCase{"min(1,)", "col 7: expected a number, a name or '(' but found ')'"},
        ErrorCase{"min(1, 2", "col 9: expected ')' but found the end"},
        ErrorCase{"min + 1", "col 1: expected '(' after 'min'"},
        ErrorCase{"sizeof dtype", "col 1: expected '(' after 'sizeof'"},
        ErrorCase{"pow(2, 3)", "col 1: unknown function 'pow'"},
        ErrorCase{"1 + hidden(3)", "col 5: unknown function 'hidden'"},
        ErrorCase{"sizeof(f64)", "col 8: sizeof takes 'dtype' or f32, f16, bf16, i32, f8e4m3, f8e5m2, not 'f64'"},
        ErrorCase{"sizeof(float)", "col 8: sizeof takes 'dtype' or f32, f16, bf16, i32, f8e4m3, f8e5m2"},
        ErrorCase{"sizeof(1)", "col 8: sizeof takes 'dtype'"},
        ErrorCase{"sizeof()", "col 8: sizeof takes 'dtype'"},
        ErrorCase{"sizeof(dtype + 1)", "col 14: expected ')' but found '+'"},
        ErrorCase{"sizeof(dtype", "col 13: expected ')' but found the end"}));

TEST(ExpressionTest, NestingTooDeep) {
  const std::string ok = std::string(60, '(') + "1" + std::string(60, ')');
  EXPECT_THAT(Eval(ok), IsOkAndHolds(1));
  const std::string parens = std::string(100, '(') + "1" + std::string(100, ')');
  EXPECT_THAT(Eval(parens), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("nested too deeply (limit 64)")));
  // Hostile sizes fail cleanly instead of exhausting the stack.
  const std::string huge = std::string(1000000, '(') + "1" + std::string(1000000, ')');
  EXPECT_THAT(Eval(huge),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
  EXPECT_THAT(Eval(std::string(100000, '-') + "1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
  EXPECT_THAT(Eval(std::string(100000, '!') + "1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
  std::string ternary;
  for (int i = 0; i < 1000; ++i) ternary += "1 ? ";
  ternary += "1";
  for (int i = 0; i < 1000; ++i) ternary += " : 0";
  EXPECT_THAT(Eval(ternary),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
  std::string calls;
  for (int i = 0; i < 1000; ++i) calls += "min(1, ";
  calls += "1" + std::string(1000, ')');
  EXPECT_THAT(Eval(calls),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
}

TEST(ExpressionTest, LongFlatChainIsBounded) {
  std::string sum = "1";
  for (int i = 0; i < 200; ++i) sum += " + 1";
  EXPECT_THAT(Eval(sum), IsOkAndHolds(201));
  std::string chain = "1";
  for (int i = 0; i < 100000; ++i) chain += "+1";
  EXPECT_THAT(Eval(chain),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expression too deep")));
}

class EvalErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(EvalErrorTest, FailsToEvaluate) {
  ASSERT_OK_AND_ASSIGN(Expression e, Expression::Parse(GetParam().text));
  EXPECT_THAT(e.Evaluate(TestScope()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, EvalErrorTest,
    ::testing::Values(
        ErrorCase{"foo + 1", "unknown identifier 'foo' in 'foo + 1'"},
        ErrorCase{"dtype", "unknown identifier 'dtype' in 'dtype'"},
        ErrorCase{"Hidden", "unknown identifier 'Hidden'"},
        ErrorCase{"hidden / zero", "division by zero in 'hidden / zero'"},
        ErrorCase{"hidden / (VEC - 4)", "division by zero in 'hidden / (VEC - 4)'"},
        ErrorCase{"hidden % zero", "modulo by zero in 'hidden % zero'"},
        ErrorCase{"big + 1", "overflow in 'big + 1': 9223372036854775807 + 1 does not fit"},
        ErrorCase{"small - 1", "overflow in 'small - 1': -9223372036854775808 - 1"},
        ErrorCase{"neg - big", "overflow in 'neg - big'"},
        ErrorCase{"big * 2", "overflow in 'big * 2': 9223372036854775807 * 2"},
        ErrorCase{"small * -1", "overflow in 'small * -1'"},
        ErrorCase{"hidden * hidden * hidden * hidden * hidden * hidden", "overflow in"},
        ErrorCase{"-small", "overflow in '-small': -(-9223372036854775808) does not fit"},
        ErrorCase{"small / -1", "overflow in 'small / -1': -9223372036854775808 / -1"},
        ErrorCase{"ceil_div(hidden, 0)",
                  "ceil_div by a non-positive divisor in 'ceil_div(hidden, 0)': "
                  "ceil_div(4096, 0) needs b > 0"},
        ErrorCase{"ceil_div(hidden, neg)", "ceil_div(4096, -7) needs b > 0"},
        ErrorCase{"ceil_div(neg, 2)",
                  "ceil_div of a negative number in 'ceil_div(neg, 2)': ceil_div(-7, 2) "
                  "needs a >= 0"},
        ErrorCase{"min(1, nobody)", "unknown identifier 'nobody'"},
        ErrorCase{"1 ? nobody : 2", "unknown identifier 'nobody'"}));

TEST(ExpressionTest, Identifiers) {
  ASSERT_OK_AND_ASSIGN(Expression e,
                       Expression::Parse("ceil_div(hidden, BLOCK * VEC) + hidden * "
                                         "sizeof(dtype) + min(VEC, tokens) + sizeof(f32) + BLOCK"));
  EXPECT_THAT(e.identifiers(), ElementsAre("hidden", "BLOCK", "VEC", "tokens"));
  EXPECT_EQ(e.text(),
            "ceil_div(hidden, BLOCK * VEC) + hidden * sizeof(dtype) + min(VEC, tokens) + "
            "sizeof(f32) + BLOCK");

  ASSERT_OK_AND_ASSIGN(Expression lit, Expression::Parse("1 + 2"));
  EXPECT_THAT(lit.identifiers(), IsEmpty());
  ASSERT_OK_AND_ASSIGN(Expression sz, Expression::Parse("sizeof(dtype)"));
  EXPECT_THAT(sz.identifiers(), IsEmpty());
  // Names on a short-circuited side count too: the manifest is checked before any shape.
  ASSERT_OK_AND_ASSIGN(Expression sc, Expression::Parse("0 && a || b ? c : _d1"));
  EXPECT_THAT(sc.identifiers(), ElementsAre("a", "b", "c", "_d1"));
}

TEST(ExpressionTest, CopiesShareTheTreeAndOutliveTheText) {
  std::string text = "hidden / VEC";
  ASSERT_OK_AND_ASSIGN(Expression e, Expression::Parse(text));
  text.assign("garbage");
  Expression copy = e;
  EXPECT_THAT(copy.Evaluate(TestScope()), IsOkAndHolds(1024));
  EXPECT_EQ(copy.text(), "hidden / VEC");
  EXPECT_THAT(copy.identifiers(), ElementsAre("hidden", "VEC"));
}

TEST(ExpressionTest, ConcurrentEvaluate) {
  ASSERT_OK_AND_ASSIGN(
      Expression e,
      Expression::Parse("n % 3 == 0 ? ceil_div(n, 3) * sizeof(dtype) : max(n, 7) / d"));
  constexpr int kThreads = 8;
  constexpr int kIters = 20000;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&e, &mismatches, t] {
      Scope s;
      s.dtype = t % 2 ? DType::kF32 : DType::kF16;
      for (int i = 0; i < kIters; ++i) {
        const int64_t n = t * kIters + i;
        const int64_t d = i % 5;  // zero every fifth iteration: errors must not leak
        s.values["n"] = n;
        s.values["d"] = d;
        absl::StatusOr<int64_t> got = e.Evaluate(s);
        if (n % 3 == 0) {
          const int64_t want = (n + 2) / 3 * DTypeSize(s.dtype);
          if (!got.ok() || *got != want) ++mismatches[t];
        } else if (d == 0) {
          if (got.ok() ||
              got.status().message().find("division by zero") == absl::string_view::npos) {
            ++mismatches[t];
          }
        } else {
          if (!got.ok() || *got != std::max<int64_t>(n, 7) / d) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace ktune
