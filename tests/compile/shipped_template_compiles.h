// Every shipped template compiled by NVRTC without a GPU: each dtype x valid param points at
// default knobs, at each dim's example shape, for sm_90 and sm_90a, plus each reference. A
// template edit that breaks an instantiation fails, naming it, and a table says per group
// (template, dtype, target) how many compiled, spilled, the most registers, NVRTC's seconds.
//
// Two tests run it: every point (compile_all_points_test, CTest label `slow`: 2 to 6
// minutes of two cores, the largest part of the suite) and a covering sample in every run
// (compile_test). The sample has every value of every param at least once, so a value that
// no longer compiles anywhere fails every run; a pair of values that fails only together is
// what the slow test is for (run it after a template or manifest edit: `ctest -L slow`).
#ifndef KTUNE_TESTS_COMPILE_SHIPPED_TEMPLATE_COMPILES_H_
#define KTUNE_TESTS_COMPILE_SHIPPED_TEMPLATE_COMPILES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "server/compile/compiler.h"
#include "server/templates/kernel_template.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"

namespace ktune::testing {

// Which points of a group compile.
struct PointSample {
  // A group of at most this many points compiles all of them; past that, CompiledPoints'
  // sample of `sample` points.
  size_t all_up_to;
  size_t sample;
  // The sm_90a points of a template whose program is the same on both targets
  // (SameOnBothTargets), always a sample of this many.
  size_t second_target_sample;
};

// `all` when it has at most all_up_to points; else every value of every param at least once
// (greedy, in enumeration order), then points at an even step not taken yet, while there are
// fewer than `sample` (the covering part may alone be more).
std::vector<Config> CompiledPoints(const std::vector<Config>& all, size_t all_up_to,
                                   size_t sample);

// Whether a shared header (under the registry's include folder) tests an arch-specific
// feature macro (__CUDA_ARCH_FEAT_...).
bool HeadersTestArchFeatures(const TemplateRegistry& registry);

// Whether a template compiles one program for sm_90 and sm_90a: its manifest never reads
// KTUNE_ARCH_SPECIFIC (so both targets bind the same points and defines) and neither its
// source nor a shared header tests an arch-specific feature macro. Then its sm_90a compile of
// a point differs from the sm_90 one only in the instruction set ptxas is told, and a sample
// of them stands for all.
bool SameOnBothTargets(const KernelTemplate& t, bool headers_test_arch_features);

// Compiles `requests` (one per entry of `what`, which names it in failures) on every core and
// expects each to yield a cubin; with `no_spills`, none of its kernels may spill.
void ExpectAllCompile(Compiler* compiler, const std::vector<std::string>& what,
                      std::vector<CompileRequest> requests, bool no_spills);

// Loads the shipped templates and compiles the points `sample` picks and every reference,
// with gtest failures naming the group and config; prints the table and records the
// compile count and wall time as test properties.
void CompileShippedTemplates(const PointSample& sample);

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_COMPILE_SHIPPED_TEMPLATE_COMPILES_H_
