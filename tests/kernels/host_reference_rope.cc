// rope: rotary position embedding in place on q [tokens, heads, head_dim] and k
// [tokens, kv_heads, head_dim]. With d = head_dim, p = positions[t], c =
// cos_sin[p, i] and s = cos_sin[p, d / 2 + i], each head vector x of token t
// rotates every pair i < d / 2, (a, b) -> (a c - b s, b c + a s), where the
// pair is (x[i], x[i + d / 2]) for interleaved 0 (neox) and (x[2i], x[2i + 1])
// for interleaved 1 (GPT-J).
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

// cos_sin has this many rows (the manifest's count expression, 4096 *
// head_dim).
constexpr int64_t kMaxPositions = 4096;

absl::StatusOr<HostOutputs> Rope(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t tokens, p.Dim("tokens"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t heads, p.Dim("heads"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t kv_heads, p.Dim("kv_heads"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t d, p.Dim("head_dim"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t interleaved, p.Dim("interleaved"));
  if (interleaved != 0 && interleaved != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim interleaved is ", interleaved, ", not 0 or 1"));
  }
  if (d % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", d, " is odd"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *q,
                         p.Input("q", tokens * heads * d));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *k,
                         p.Input("k", tokens * kv_heads * d));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *cos_sin,
                         p.Input("cos_sin", kMaxPositions * d));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *positions,
                         p.Input("positions", tokens));

  std::vector<double> q_out = *q;
  std::vector<double> k_out = *k;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = static_cast<int64_t>((*positions)[t]);
    if (pos < 0 || pos >= kMaxPositions) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions[", t, "] is ", pos));
    }
    const double *cs = cos_sin->data() + pos * d;
    auto rotate = [&](double *x) {
      for (int64_t i = 0; i < d / 2; ++i) {
        const int64_t ia = interleaved ? 2 * i : i;
        const int64_t ib = interleaved ? 2 * i + 1 : i + d / 2;
        const double a = x[ia], b = x[ib], c = cs[i], s = cs[d / 2 + i];
        x[ia] = a * c - b * s;
        x[ib] = b * c + a * s;
      }
    };
    for (int64_t h = 0; h < heads; ++h)
      rotate(q_out.data() + (t * heads + h) * d);
    for (int64_t h = 0; h < kv_heads; ++h)
      rotate(k_out.data() + (t * kv_heads + h) * d);
  }
  return HostOutputs{{"q", std::move(q_out)}, {"k", std::move(k_out)}};
}

Shape RopeShape(int64_t tokens, int64_t heads, int64_t kv_heads,
                int64_t head_dim, int64_t interleaved) {
  return {{"tokens", tokens},
          {"heads", heads},
          {"kv_heads", kv_heads},
          {"head_dim", head_dim},
          {"interleaved", interleaved}};
}

} // namespace

HostReference RopeHostReference() {
  // head_dim 2 (one pair), 6 (3 pairs: 1-element vectors only), 10, 64 and 128;
  // odd token and head counts; both pairings at each kind of size.
  return {
      Rope,
      SameShapes({RopeShape(1, 1, 1, 2, 0), RopeShape(1, 1, 1, 2, 1),
                  RopeShape(7, 3, 1, 6, 0), RopeShape(7, 3, 1, 6, 1),
                  RopeShape(3, 5, 3, 10, 1), RopeShape(7, 4, 2, 64, 0),
                  RopeShape(3, 32, 8, 128, 0), RopeShape(3, 32, 8, 128, 1)})};
}

} // namespace ktune::testing
