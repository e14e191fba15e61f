// rope: rotary position embedding in place on q [tokens, heads, head_dim] and k
// [tokens, kv_heads, head_dim]; rope_qkv: the same on q and k inside fused qkv
// rows [tokens, (heads + 2 kv_heads) head_dim], v left as it is. With d = head_dim, p = positions[t], c =
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

// The rope family's dims, checked.
struct RopeDims {
  int64_t tokens, heads, kv_heads, d, interleaved;
};

absl::StatusOr<RopeDims> DimsOf(const HostProblem &p) {
  RopeDims r;
  KTUNE_ASSIGN_OR_RETURN(r.tokens, p.Dim("tokens"));
  KTUNE_ASSIGN_OR_RETURN(r.heads, p.Dim("heads"));
  KTUNE_ASSIGN_OR_RETURN(r.kv_heads, p.Dim("kv_heads"));
  KTUNE_ASSIGN_OR_RETURN(r.d, p.Dim("head_dim"));
  KTUNE_ASSIGN_OR_RETURN(r.interleaved, p.Dim("interleaved"));
  if (r.interleaved != 0 && r.interleaved != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim interleaved is ", r.interleaved, ", not 0 or 1"));
  }
  if (r.d % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", r.d, " is odd"));
  return r;
}

// Rotates every head of every token in place: token t's q heads at q + t * q_row, its k
// heads at k + t * k_row, head_dim apart.
absl::Status RotateAll(const HostProblem &p, const RopeDims &r, double *q,
                       int64_t q_row, double *k, int64_t k_row) {
  const int64_t d = r.d;
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *cos_sin,
                         p.Input("cos_sin", kMaxPositions * d));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *positions,
                         p.Input("positions", r.tokens));
  for (int64_t t = 0; t < r.tokens; ++t) {
    const int64_t pos = static_cast<int64_t>((*positions)[t]);
    if (pos < 0 || pos >= kMaxPositions) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions[", t, "] is ", pos));
    }
    const double *cs = cos_sin->data() + pos * d;
    auto rotate = [&](double *x) {
      for (int64_t i = 0; i < d / 2; ++i) {
        const int64_t ia = r.interleaved ? 2 * i : i;
        const int64_t ib = r.interleaved ? 2 * i + 1 : i + d / 2;
        const double a = x[ia], b = x[ib], c = cs[i], s = cs[d / 2 + i];
        x[ia] = a * c - b * s;
        x[ib] = b * c + a * s;
      }
    };
    for (int64_t h = 0; h < r.heads; ++h) rotate(q + t * q_row + h * d);
    for (int64_t h = 0; h < r.kv_heads; ++h) rotate(k + t * k_row + h * d);
  }
  return absl::OkStatus();
}

absl::StatusOr<HostOutputs> Rope(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const RopeDims r, DimsOf(p));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *q,
                         p.Input("q", r.tokens * r.heads * r.d));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *k,
                         p.Input("k", r.tokens * r.kv_heads * r.d));
  std::vector<double> q_out = *q;
  std::vector<double> k_out = *k;
  KTUNE_RETURN_IF_ERROR(RotateAll(p, r, q_out.data(), r.heads * r.d, k_out.data(),
                                  r.kv_heads * r.d));
  return HostOutputs{{"q", std::move(q_out)}, {"k", std::move(k_out)}};
}

// rope_qkv: the same rotation of q and k where they lie in fused qkv rows (q's heads,
// k's, v's); v comes out as it went in.
absl::StatusOr<HostOutputs> RopeQkv(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const RopeDims r, DimsOf(p));
  const int64_t row = (r.heads + 2 * r.kv_heads) * r.d;
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *qkv,
                         p.Input("qkv", r.tokens * row));
  std::vector<double> out = *qkv;
  KTUNE_RETURN_IF_ERROR(
      RotateAll(p, r, out.data(), row, out.data() + r.heads * r.d, row));
  return HostOutputs{{"qkv", std::move(out)}};
}

Shape RopeShape(int64_t tokens, int64_t heads, int64_t kv_heads,
                int64_t head_dim, int64_t interleaved) {
  return {{"tokens", tokens},
          {"heads", heads},
          {"kv_heads", kv_heads},
          {"head_dim", head_dim},
          {"interleaved", interleaved}};
}

// head_dim 2 (one pair), 6 (3 pairs: 1-element vectors only), 10, 64 and 128;
// odd token and head counts; both pairings at each kind of size.
std::vector<Shape> RopeShapes() {
  return {RopeShape(1, 1, 1, 2, 0),    RopeShape(1, 1, 1, 2, 1),
          RopeShape(7, 3, 1, 6, 0),    RopeShape(7, 3, 1, 6, 1),
          RopeShape(3, 5, 3, 10, 1),   RopeShape(7, 4, 2, 64, 0),
          RopeShape(3, 32, 8, 128, 0), RopeShape(3, 32, 8, 128, 1)};
}

} // namespace

HostReference RopeHostReference() { return {Rope, SameShapes(RopeShapes())}; }

HostReference RopeQkvHostReference() { return {RopeQkv, SameShapes(RopeShapes())}; }

} // namespace ktune::testing
