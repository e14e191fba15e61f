// The host references without a GPU: every shipped template has one, each is
// right on a case small enough to compute by hand, and each runs on every dtype
// and shape its GPU check (kernels_gpu_test.cc) will use, with the inputs the
// worker would generate, giving every output buffer the manifest declares.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/worker/host_buffers.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "tests/kernels/host_reference.h"
#include "tests/kernels/kernel_case.h"
#include "tests/kernels/kernel_variants.h"
#include "tests/templates/shipped_registry.h"
#include "tests/testing/status_matchers.h"

namespace ktune::testing {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// Runs the host reference of `name` on a hand-written problem.
absl::StatusOr<HostOutputs> RunHost(const std::string &name,
                                    const HostProblem &p) {
  auto it = HostReferences().find(name);
  if (it == HostReferences().end())
    return absl::NotFoundError(name);
  return it->second.compute(p);
}

TEST(HostReferenceTableTest, EveryShippedTemplateHasOne) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  ASSERT_FALSE(registry->templates().empty());
  for (const auto &[name, tmpl] : registry->templates()) {
    EXPECT_TRUE(HostReferences().count(name))
        << "no host reference for template " << name
        << ": write tests/kernels/host_reference_" << name
        << ".cc and list it in tests/kernels/host_reference.cc";
  }
}

TEST(HostReferenceTableTest, EveryEntryIsAShippedTemplate) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  for (const auto &[name, ref] : HostReferences()) {
    EXPECT_TRUE(registry->templates().count(name))
        << "host reference for template " << name << ", which is not shipped";
    EXPECT_TRUE(ref.compute) << name;
    EXPECT_TRUE(ref.shapes) << name;
  }
}

// Every (template, dtype, shape) the GPU check runs: the shape is valid, the
// reference and a candidate bind, and the host reference covers the outputs
// with finite values.
TEST(HostReferenceTableTest, RunsOnEveryCaseOfTheGpuCheck) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  for (const auto &[name, ref] : HostReferences()) {
    auto found = registry->templates().find(name);
    if (found == registry->templates().end())
      continue; // reported above
    const std::shared_ptr<const KernelTemplate> &tmpl = found->second;
    for (DType dtype : tmpl->dtypes()) {
      const std::vector<Shape> shapes = ref.shapes(dtype);
      EXPECT_FALSE(shapes.empty()) << name << " has no " << DTypeName(dtype)
                                   << " shapes to check on the GPU";
      for (const Shape &shape : shapes) {
        const std::string c = CaseName(name, dtype, shape);
        SCOPED_TRACE(c);
        ASSERT_OK(ValidateRequest(*tmpl, dtype, shape));
        ASSERT_OK_AND_ASSIGN(Instance reference,
                             BindReference(tmpl, dtype, shape, target));
        ASSERT_OK_AND_ASSIGN(ChosenCandidate candidate,
                             ChooseCandidate(tmpl, dtype, shape, target));
        ASSERT_OK_AND_ASSIGN(HostProblem problem,
                             MakeHostProblem(reference, /*seed=*/7));
        absl::StatusOr<HostOutputs> outputs = ref.compute(problem);
        ASSERT_OK(outputs.status()) << "host reference of " << c;
        ASSERT_OK(EncodeExpected(reference, *outputs).status());
        // NaN marks an element left unwritten; a whole buffer of them is a host
        // bug (but a one-element buffer may be the unused placeholder of a
        // variant).
        for (const auto &[buffer, values] : *outputs) {
          size_t nans = 0;
          for (size_t i = 0; i < values.size(); ++i) {
            ASSERT_FALSE(std::isinf(values[i]))
                << buffer << "[" << i << "] = " << values[i];
            nans += std::isnan(values[i]);
          }
          EXPECT_TRUE(values.size() == 1 || nans < values.size())
              << buffer << " is all NaN (all unwritten)";
        }
      }
    }
  }
}

// ---- The host side of a case
// ---------------------------------------------------------

TEST(KernelCaseTest, HostProblemHoldsTheWorkersInputsAndScalars) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  ASSERT_OK_AND_ASSIGN(auto tmpl, registry->Get("rmsnorm"));
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  const Shape shape = {{"tokens", 2}, {"hidden", 3}};
  ASSERT_OK_AND_ASSIGN(Instance reference,
                       BindReference(tmpl, DType::kBF16, shape, target));
  ASSERT_OK_AND_ASSIGN(HostProblem p, MakeHostProblem(reference, 11));
  ASSERT_TRUE(p.inputs.count("x"));
  ASSERT_TRUE(p.inputs.count("weight"));
  EXPECT_FALSE(p.inputs.count("out"));
  // x is argument 0 of the manifest: the worker fills it from BufferSeed(seed,
  // 0).
  ASSERT_OK_AND_ASSIGN(
      std::string x,
      GenerateFill(DType::kBF16, 6, reference.args[0].fill, BufferSeed(11, 0)));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(p.inputs["x"][i], DecodeElement(DType::kBF16, x.data() + 2 * i))
        << i;
  }
  EXPECT_EQ(p.scalars["hidden"], 3);
  EXPECT_EQ(p.scalars["eps"], static_cast<double>(1e-6f));
}

TEST(KernelCaseTest, ExpectedBytesAreRoundedToTheOutputType) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  ASSERT_OK_AND_ASSIGN(auto tmpl, registry->Get("elementwise"));
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(Instance reference,
                       BindReference(tmpl, DType::kF16, {{"n", 2}}, target));
  ASSERT_OK_AND_ASSIGN(auto bytes,
                       EncodeExpected(reference, {{"out", {1.0 / 3, -2}}}));
  ASSERT_EQ(bytes["out"].size(), 4u);
  EXPECT_EQ(DecodeElement(DType::kF16, bytes["out"].data()),
            HalfToFloat(FloatToHalf(1.0f / 3)));
  EXPECT_EQ(DecodeElement(DType::kF16, bytes["out"].data() + 2), -2);

  EXPECT_THAT(EncodeExpected(reference, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output buffer 'out'")));
  EXPECT_THAT(EncodeExpected(reference, {{"out", {1, 2, 3}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gives 3 values")));
  EXPECT_THAT(EncodeExpected(reference, {{"out", {1, 2}}, {"x", {1, 2}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'x', which is no output")));
}

TEST(KernelCaseTest,
     CandidateIsTheDefaultWhereItFitsElseTheNearestValidConfig) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  ASSERT_OK_AND_ASSIGN(auto tmpl, registry->Get("rmsnorm"));
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(ChosenCandidate fits,
                       ChooseCandidate(tmpl, DType::kF32,
                                       {{"tokens", 1}, {"hidden", 4096}},
                                       target));
  EXPECT_EQ(fits.config, DefaultConfig(*tmpl, target));
  EXPECT_EQ(fits.default_rejected_because, "");

  // hidden 3 is no multiple of the default VEC: the request's default is the manifest's
  // alternative with the edge path, which keeps VEC.
  ASSERT_OK_AND_ASSIGN(ChosenCandidate edges,
                       ChooseCandidate(tmpl, DType::kF32,
                                       {{"tokens", 1}, {"hidden", 3}}, target));
  EXPECT_EQ(edges.default_rejected_because, "");
  Config expected = DefaultConfig(*tmpl, target);
  expected.params["EDGE"] = 1;
  EXPECT_EQ(ConfigString(edges.config), ConfigString(expected));

  // A request default that is not of the wanted kind: the nearest valid config that is
  // (here VEC = 1, the one param that must change to leave the edge path).
  ASSERT_OK_AND_ASSIGN(
      ChosenCandidate near,
      ChooseCandidate(tmpl, DType::kF32, {{"tokens", 1}, {"hidden", 3}}, target,
                      [](const Config &c) { return c.params.at("EDGE") == 0; }));
  EXPECT_NE(near.default_rejected_because, "");
  expected = DefaultConfig(*tmpl, target);
  expected.params["VEC"] = 1;
  EXPECT_EQ(ConfigString(near.config), ConfigString(expected));
}

// A filter picks the nearest config it accepts, says the default was not of the
// wanted kind, and is NotFound where the shape has valid configs but none it
// accepts (gemv's tensor cores for f32).
TEST(KernelCaseTest, CandidateOfAWantedKind) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  ASSERT_OK_AND_ASSIGN(auto tmpl, registry->Get("gemv"));
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  const Shape shape = {{"n", 1000}, {"k", 1000}, {"batch", 8}};
  const ConfigFilter mma = [](const Config &c) {
    return c.params.at("MMA") == 1;
  };
  ASSERT_OK_AND_ASSIGN(ChosenCandidate chosen,
                       ChooseCandidate(tmpl, DType::kBF16, shape, target, mma));
  EXPECT_EQ(chosen.config.params.at("MMA"), 1);
  EXPECT_EQ(chosen.default_rejected_because, "is not of the wanted kind");
  EXPECT_THAT(chosen.instance.launches[0].name_expression,
              HasSubstr("gemv_mma_kernel"));
  EXPECT_THAT(ChooseCandidate(tmpl, DType::kF32, shape, target, mma).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("wanted kind")));
}

// Every kernel variant the GPU check runs is valid at one of its cases at
// least (else the check would find none and pass without running it), and
// each variant's filter rejects the default (which the check runs anyway).
TEST(KernelVariantsTest, EachIsValidAtSomeCaseOfTheGpuCheck) {
  std::unique_ptr<TemplateRegistry> registry = LoadShippedRegistry();
  ASSERT_NE(registry, nullptr);
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  for (const auto &[name, ref] : HostReferences()) {
    ASSERT_OK_AND_ASSIGN(auto tmpl, registry->Get(name));
    for (const KernelVariant &variant : KernelVariants(name)) {
      SCOPED_TRACE(name + ": " + variant.name);
      EXPECT_FALSE(variant.selects(DefaultConfig(*tmpl, target)));
      int cases = 0;
      for (DType dtype : tmpl->dtypes()) {
        for (const Shape &shape : ref.shapes(dtype)) {
          absl::StatusOr<ChosenCandidate> c =
              ChooseCandidate(tmpl, dtype, shape, target, variant.selects);
          if (c.ok()) {
            EXPECT_TRUE(variant.selects(c->config));
            ++cases;
          } else {
            EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("wanted kind")));
          }
        }
      }
      EXPECT_GT(cases, 0) << "valid at no case of the GPU check";
    }
  }
  EXPECT_FALSE(KernelVariants("gemv").empty());
  EXPECT_FALSE(KernelVariants("softmax").empty());
}

// ---- Each host reference on a case computed by hand
// -----------------------------------

TEST(HostReferenceTest, Elementwise) {
  HostProblem p;
  p.shape = {{"n", 2}};
  p.scalars = {{"alpha", 1.25}, {"beta", -0.75}, {"n", 2}};
  p.inputs = {{"x", {1, -2}}, {"y", {0.5, 4}}};
  // 1.25 * 1 - 0.75 * 0.5 = 0.875; 1.25 * -2 - 0.75 * 4 = -5.5.
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("elementwise", p));
  EXPECT_THAT(out["out"], ElementsAre(0.875, -5.5));
}

TEST(HostReferenceTest, Rmsnorm) {
  HostProblem p;
  p.shape = {{"tokens", 2}, {"hidden", 2}};
  p.scalars = {{"tokens", 2}, {"hidden", 2}, {"eps", 0}};
  p.inputs = {{"x", {1, 2, 3, 4}}, {"weight", {1, 2}}};
  // Row [1, 2]: mean square 2.5; row [3, 4]: 12.5. out = x / sqrt(ms) * weight.
  const double r0 = std::sqrt(2.5), r1 = std::sqrt(12.5);
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("rmsnorm", p));
  EXPECT_THAT(out["out"],
              Pointwise(DoubleNear(1e-15), {1 / r0, 4 / r0, 3 / r1, 8 / r1}));
  EXPECT_THAT(out["out"],
              Pointwise(DoubleNear(1e-8),
                        {0.63245553, 2.52982213, 0.84852814, 2.26274170}));

  // eps is added to the mean square: [3, 4] with eps 0.5 is divided by
  // sqrt(13).
  p.shape = {{"tokens", 1}, {"hidden", 2}};
  p.scalars["eps"] = 0.5;
  p.inputs = {{"x", {3, 4}}, {"weight", {1, 1}}};
  ASSERT_OK_AND_ASSIGN(out, RunHost("rmsnorm", p));
  EXPECT_THAT(out["out"], Pointwise(DoubleNear(1e-15), {3 / std::sqrt(13.0),
                                                        4 / std::sqrt(13.0)}));
}

TEST(HostReferenceTest, AddRmsnorm) {
  HostProblem p;
  p.dtype = DType::kF32;
  p.shape = {{"tokens", 1}, {"hidden", 2}};
  p.scalars = {{"tokens", 1}, {"hidden", 2}, {"eps", 0}};
  p.inputs = {{"x", {1, 2}}, {"residual", {0.5, -1}}, {"weight", {1, 2}}};
  // r = [1.5, 1], mean square (2.25 + 1) / 2 = 1.625.
  const double rms = std::sqrt(1.625);
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("add_rmsnorm", p));
  EXPECT_THAT(out["residual"], ElementsAre(1.5, 1));
  EXPECT_THAT(out["out"], Pointwise(DoubleNear(1e-15), {1.5 / rms, 2 / rms}));

  // The norm is of r as stored: 1 + 2^-9 is 1 in bf16 (half an ulp is 2^-8),
  // not in f32.
  p.shape = {{"tokens", 1}, {"hidden", 1}};
  p.inputs = {{"x", {1}}, {"residual", {std::ldexp(1.0, -9)}}, {"weight", {3}}};
  p.dtype = DType::kBF16;
  ASSERT_OK_AND_ASSIGN(out, RunHost("add_rmsnorm", p));
  EXPECT_THAT(out["residual"], ElementsAre(1));
  EXPECT_THAT(out["out"], ElementsAre(3));
  p.dtype = DType::kF32;
  ASSERT_OK_AND_ASSIGN(out, RunHost("add_rmsnorm", p));
  EXPECT_THAT(out["residual"], ElementsAre(1 + std::ldexp(1.0, -9)));
  EXPECT_THAT(out["out"], Pointwise(DoubleNear(1e-15), {3.0})); // r / |r| * 3
}

TEST(HostReferenceTest, Layernorm) {
  HostProblem p;
  p.shape = {{"tokens", 1}, {"hidden", 3}, {"with_bias", 1}};
  p.scalars = {{"eps", 0}};
  p.inputs = {{"x", {1, 2, 3}}, {"weight", {1, 1, 2}}, {"bias", {0, 1, 0.5}}};
  // mean 2, biased variance 2 / 3: 1 / std = sqrt(1.5).
  const double inv_std = std::sqrt(1.5);
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("layernorm", p));
  EXPECT_THAT(out["out"],
              Pointwise(DoubleNear(1e-15), {-inv_std, 1.0, 2 * inv_std + 0.5}));
  // with_bias = 0: no bias (its buffer is one element, not read).
  p.shape["with_bias"] = 0;
  p.inputs["bias"] = {100};
  ASSERT_OK_AND_ASSIGN(out, RunHost("layernorm", p));
  EXPECT_THAT(out["out"],
              Pointwise(DoubleNear(1e-15), {-inv_std, 0.0, 2 * inv_std}));
}

TEST(HostReferenceTest, SiluAndMul) {
  HostProblem p;
  p.shape = {{"tokens", 1}, {"inter", 2}};
  p.inputs = {{"x", {0, 1, 3, -2}}}; // gate [0, 1], up [3, -2]
  // silu(0) * 3 = 0; silu(1) * -2 = -2 / (1 + 1 / e).
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("silu_and_mul", p));
  EXPECT_THAT(out["out"],
              Pointwise(DoubleNear(1e-15), {0.0, -2 / (1 + std::exp(-1.0))}));
  EXPECT_THAT(out["out"], Pointwise(DoubleNear(1e-7), {0.0, -1.4621172}));
}

TEST(HostReferenceTest, Softmax) {
  HostProblem p;
  p.dtype = DType::kF32;
  p.shape = {{"rows", 2}, {"cols", 2}, {"out_bytes", 4}};
  // [0, ln 3] -> [1/4, 3/4]; shifted by 1000 the same (no overflow).
  p.inputs = {{"x", {0, std::log(3.0), 1000, 1000 + std::log(3.0)}}};
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("softmax", p));
  EXPECT_THAT(out["out"],
              Pointwise(DoubleNear(1e-12), {0.25, 0.75, 0.25, 0.75}));
  ASSERT_EQ(out["out_f32"].size(), 1u);
  EXPECT_TRUE(std::isnan(out["out_f32"][0])); // never written
  // bf16 with out_bytes 4: the result goes to out_f32.
  p.dtype = DType::kBF16;
  ASSERT_OK_AND_ASSIGN(out, RunHost("softmax", p));
  EXPECT_THAT(out["out_f32"],
              Pointwise(DoubleNear(1e-12), {0.25, 0.75, 0.25, 0.75}));
  ASSERT_EQ(out["out"].size(), 1u);
  EXPECT_TRUE(std::isnan(out["out"][0]));
  p.shape["out_bytes"] = 3;
  EXPECT_THAT(
      RunHost("softmax", p),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out_bytes")));
}

TEST(HostReferenceTest, Rope) {
  HostProblem p;
  p.shape = {{"tokens", 1},
             {"heads", 1},
             {"kv_heads", 1},
             {"head_dim", 2},
             {"interleaved", 0}};
  std::vector<double> cos_sin(4096 * 2, 0.0);
  cos_sin[2] = 0.6; // row 1: cos, sin
  cos_sin[3] = 0.8;
  p.inputs = {
      {"q", {1, 0}}, {"k", {0, 1}}, {"cos_sin", cos_sin}, {"positions", {1}}};
  // (a, b) -> (a c - b s, b c + a s).
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("rope", p));
  EXPECT_THAT(out["q"], Pointwise(DoubleNear(1e-15), {0.6, 0.8}));
  EXPECT_THAT(out["k"], Pointwise(DoubleNear(1e-15), {-0.8, 0.6}));

  // head_dim 4, row 2 = [c0, c1, s0, s1] = [0, 1, 1, 0]: pair 0 turns by 90
  // degrees, pair 1 stays. neox pairs (x0, x2), (x1, x3); GPT-J pairs (x0, x1),
  // (x2, x3).
  p.shape["head_dim"] = 4;
  cos_sin.assign(4096 * 4, 0.0);
  cos_sin[8 + 1] = 1;
  cos_sin[8 + 2] = 1;
  p.inputs = {{"q", {1, 2, 3, 4}},
              {"k", {1, 2, 3, 4}},
              {"cos_sin", cos_sin},
              {"positions", {2}}};
  ASSERT_OK_AND_ASSIGN(out, RunHost("rope", p));
  EXPECT_THAT(out["q"], ElementsAre(-3, 2, 1, 4));
  p.shape["interleaved"] = 1;
  ASSERT_OK_AND_ASSIGN(out, RunHost("rope", p));
  EXPECT_THAT(out["q"], ElementsAre(-2, 1, 3, 4));
  EXPECT_THAT(out["k"], ElementsAre(-2, 1, 3, 4));
}

// rope_qkv rotates q's and k's heads where they lie in a fused row and leaves v's: the
// same numbers as rope's on q and k apart.
TEST(HostReferenceTest, RopeQkv) {
  HostProblem p;
  p.shape = {{"tokens", 2},
             {"heads", 2},
             {"kv_heads", 1},
             {"head_dim", 4},
             {"interleaved", 0}};
  std::vector<double> cos_sin(4096 * 4, 0.0);
  for (int i = 0; i < 4 * 4096; ++i) cos_sin[i] = 0.01 * (i % 97) - 0.4;
  std::vector<double> q, k, qkv;
  for (int t = 0; t < 2; ++t) {
    for (int e = 0; e < 16; ++e) {  // 2 q heads, 1 k head, 1 v head of 4
      const double v = 0.1 * (t * 16 + e) - 1.3;
      qkv.push_back(v);
      if (e < 8) q.push_back(v);
      else if (e < 12) k.push_back(v);
    }
  }
  p.inputs = {{"qkv", qkv}, {"cos_sin", cos_sin}, {"positions", {5, 1000}}};
  ASSERT_OK_AND_ASSIGN(HostOutputs fused, RunHost("rope_qkv", p));
  p.inputs = {{"q", q}, {"k", k}, {"cos_sin", cos_sin}, {"positions", {5, 1000}}};
  ASSERT_OK_AND_ASSIGN(HostOutputs apart, RunHost("rope", p));
  ASSERT_EQ(fused["qkv"].size(), 32u);
  for (int t = 0; t < 2; ++t) {
    for (int e = 0; e < 16; ++e) {
      const double got = fused["qkv"][t * 16 + e];
      if (e < 8) EXPECT_DOUBLE_EQ(got, apart["q"][t * 8 + e]);
      else if (e < 12) EXPECT_DOUBLE_EQ(got, apart["k"][t * 4 + e - 8]);
      else EXPECT_DOUBLE_EQ(got, qkv[t * 16 + e]);  // v untouched
    }
  }
}

TEST(HostReferenceTest, Gemv) {
  HostProblem p;
  p.shape = {{"n", 2}, {"k", 3}, {"batch", 2}};
  p.inputs = {{"w", {1, 2, 3, 4, 5, 6}}, {"x", {1, 0, -1, 2, 1, 0}}};
  // y[0] = [1 - 3, 4 - 6], y[1] = [2 + 2, 8 + 5].
  ASSERT_OK_AND_ASSIGN(HostOutputs out, RunHost("gemv", p));
  EXPECT_THAT(out["y"], ElementsAre(-2, -2, 4, 13));
}

TEST(HostReferenceTest, MissingArgumentsAreNamed) {
  HostProblem p;
  p.shape = {{"tokens", 1}, {"hidden", 2}};
  p.scalars = {{"eps", 0}};
  p.inputs = {{"x", {1, 2}}};
  EXPECT_THAT(
      RunHost("rmsnorm", p),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'weight'")));
  p.inputs["weight"] = {1};
  EXPECT_THAT(RunHost("rmsnorm", p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'weight' holds 1 elements, expected 2")));
  p.scalars.clear();
  EXPECT_THAT(RunHost("rmsnorm", p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("scalar argument 'eps'")));
}

} // namespace
} // namespace ktune::testing
