#include "server/compile/ptxas_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ktune {
namespace {

using ::testing::DoubleEq;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// NVRTC 13.0, -arch=sm_90 -Xptxas=-v, one kernel.
constexpr char kRmsLog[] = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3rmsI13__nv_bfloat16Li256ELi4EEvPKT_S3_PS1_if' for 'sm_90'
ptxas info    : Function properties for _Z3rmsI13__nv_bfloat16Li256ELi4EEvPKT_S3_PS1_if
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 29 registers, used 1 barriers, 128 bytes smem
ptxas info    : Compile time = 83.526 ms
)";

TEST(PtxasInfoTest, OneKernel) {
  const std::vector<KernelResources> ks = ParsePtxasInfo(kRmsLog);
  ASSERT_THAT(ks, SizeIs(1));
  const KernelResources& k = ks[0];
  EXPECT_EQ(k.mangled_name, "_Z3rmsI13__nv_bfloat16Li256ELi4EEvPKT_S3_PS1_if");
  EXPECT_EQ(k.arch, "sm_90");
  EXPECT_EQ(k.registers, 29);
  EXPECT_EQ(k.barriers, 1);
  EXPECT_EQ(k.static_smem, 128);
  EXPECT_EQ(k.const_bytes, 0);
  EXPECT_EQ(k.local_bytes, 0);
  EXPECT_EQ(k.stack_frame, 0);
  EXPECT_EQ(k.spill_stores, 0);
  EXPECT_EQ(k.spill_loads, 0);
  EXPECT_THAT(k.ptxas_ms, DoubleEq(83.526));
}

TEST(PtxasInfoTest, CrlfLineEndings) {
  std::string log = kRmsLog;
  for (size_t at = log.find('\n'); at != std::string::npos; at = log.find('\n', at + 2)) {
    log.insert(at, "\r");
  }
  const std::vector<KernelResources> ks = ParsePtxasInfo(log);
  ASSERT_THAT(ks, SizeIs(1));
  EXPECT_EQ(ks[0].arch, "sm_90");
  EXPECT_EQ(ks[0].static_smem, 128);
  EXPECT_THAT(ks[0].ptxas_ms, DoubleEq(83.526));
}

TEST(PtxasInfoTest, ConstantAndLocalMemoryVariants) {
  constexpr char kLog[] = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4copyPKfPfi' for 'sm_90a'
ptxas info    : Function properties for _Z4copyPKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 380 bytes cmem[0]
ptxas info    : Compiling entry function '_Z4tileILi64EEvPf' for 'sm_90'
ptxas info    : Function properties for _Z4tileILi64EEvPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_Z5localPf' for 'sm_80'
ptxas info    : Function properties for _Z5localPf
ptxas         .     8 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, 16 bytes lmem, 2048 bytes smem, 360 bytes cmem[0], 4 bytes cmem[2]
)";
  const std::vector<KernelResources> ks = ParsePtxasInfo(kLog);
  ASSERT_THAT(ks, SizeIs(3));

  EXPECT_EQ(ks[0].mangled_name, "_Z4copyPKfPfi");
  EXPECT_EQ(ks[0].arch, "sm_90a");
  EXPECT_EQ(ks[0].registers, 8);
  EXPECT_EQ(ks[0].const_bytes, 380);
  EXPECT_EQ(ks[0].barriers, 0);
  EXPECT_EQ(ks[0].static_smem, 0);
  EXPECT_THAT(ks[0].ptxas_ms, DoubleEq(0));  // not reported

  EXPECT_EQ(ks[1].mangled_name, "_Z4tileILi64EEvPf");
  EXPECT_EQ(ks[1].registers, 32);
  EXPECT_EQ(ks[1].barriers, 1);
  EXPECT_EQ(ks[1].static_smem, 4096);
  EXPECT_EQ(ks[1].const_bytes, 400);

  EXPECT_EQ(ks[2].mangled_name, "_Z5localPf");
  EXPECT_EQ(ks[2].arch, "sm_80");
  EXPECT_EQ(ks[2].registers, 255);
  EXPECT_EQ(ks[2].local_bytes, 16);
  EXPECT_EQ(ks[2].static_smem, 2048);
  EXPECT_EQ(ks[2].const_bytes, 360);  // cmem[0] only; cmem[2] is the compiler's bank
  EXPECT_EQ(ks[2].stack_frame, 8);
  EXPECT_EQ(ks[2].spill_stores, 8);
  EXPECT_EQ(ks[2].spill_loads, 12);
}

// Captured from NVRTC 13.0 (-arch=sm_90 -Xptxas=-v --maxrregcount=32): three kernels, a
// front-end warning, "Overriding maximum register limit" lines, a spilling kernel, an
// unknown field ("cumulative stack size") and a __noinline__ helper whose own properties
// follow the first kernel's.
constexpr char kMultiKernelLog[] =
    R"(probe.cu(13): warning #177-D: variable "unused" was declared but never referenced
  __global__ void unused_var() { int unused = 3; }
                                     ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

ptxas info    : Overriding maximum register limit 256 for '_Z3bigILi128EEvPfi' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z10unused_varv' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5smallPi' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3bigILi128EEvPfi' for 'sm_90'
ptxas info    : Function properties for _Z3bigILi128EEvPfi
ptxas         .     1680 bytes stack frame, 1024 bytes spill stores, 1412 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 1680 bytes cumulative stack size
ptxas info    : Compile time = 116.000 ms
ptxas info    : Function properties for _Z6helperPfi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z10unused_varv' for 'sm_90'
ptxas info    : Function properties for _Z10unused_varv
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 4 registers, used 0 barriers
ptxas info    : Compile time = 0.917 ms
ptxas info    : Compiling entry function '_Z5smallPi' for 'sm_90'
ptxas info    : Function properties for _Z5smallPi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 1.483 ms
)";

TEST(PtxasInfoTest, MultiKernelWithWarningsAndSpills) {
  const std::vector<KernelResources> ks = ParsePtxasInfo(kMultiKernelLog);
  ASSERT_THAT(ks, SizeIs(3));

  EXPECT_EQ(ks[0].mangled_name, "_Z3bigILi128EEvPfi");
  EXPECT_EQ(ks[0].registers, 32);
  EXPECT_EQ(ks[0].barriers, 0);
  EXPECT_EQ(ks[0].stack_frame, 1680);  // the helper's 0 does not overwrite it
  EXPECT_EQ(ks[0].spill_stores, 1024);
  EXPECT_EQ(ks[0].spill_loads, 1412);
  EXPECT_THAT(ks[0].ptxas_ms, DoubleEq(116.0));

  EXPECT_EQ(ks[1].mangled_name, "_Z10unused_varv");
  EXPECT_EQ(ks[1].registers, 4);
  EXPECT_EQ(ks[1].spill_stores, 0);
  EXPECT_THAT(ks[1].ptxas_ms, DoubleEq(0.917));

  EXPECT_EQ(ks[2].mangled_name, "_Z5smallPi");
  EXPECT_EQ(ks[2].arch, "sm_90");
  EXPECT_EQ(ks[2].registers, 10);
  EXPECT_EQ(ks[2].barriers, 1);
  EXPECT_EQ(ks[2].static_smem, 4096);
  EXPECT_THAT(ks[2].ptxas_ms, DoubleEq(1.483));
}

// The same program with -rdc=true (NVRTC 13.0): the helper's block, with its own compile
// time, comes before the first kernel and again after the last one.
TEST(PtxasInfoTest, RelocatableDeviceCodeHelperBlocksAreNotKernels) {
  constexpr char kLog[] = R"(ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperPfi$1
ptxas         .     264 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compile time = 16.921 ms
ptxas info    : Compiling entry function '_Z3bigILi128EEvPfi' for 'sm_90'
ptxas info    : Function properties for _Z3bigILi128EEvPfi
ptxas         .     1424 bytes stack frame, 1024 bytes spill stores, 1412 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 114.268 ms
ptxas info    : Compiling entry function '_Z5smallPi' for 'sm_90'
ptxas info    : Function properties for _Z5smallPi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 1.494 ms
ptxas info    : Function properties for _Z6helperPfi
ptxas         .     264 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compile time = 15.850 ms
)";
  const std::vector<KernelResources> ks = ParsePtxasInfo(kLog);
  ASSERT_THAT(ks, SizeIs(2));
  EXPECT_EQ(ks[0].stack_frame, 1424);
  EXPECT_THAT(ks[0].ptxas_ms, DoubleEq(114.268));
  EXPECT_EQ(ks[1].mangled_name, "_Z5smallPi");
  EXPECT_EQ(ks[1].stack_frame, 0);
  EXPECT_THAT(ks[1].ptxas_ms, DoubleEq(1.494));
}

TEST(PtxasInfoTest, EmptyLog) {
  EXPECT_THAT(ParsePtxasInfo(""), IsEmpty());
  EXPECT_THAT(ParsePtxasInfo("\n\n"), IsEmpty());
  // Verbose output without any entry function (a program of device functions only).
  EXPECT_THAT(ParsePtxasInfo("ptxas info    : 0 bytes gmem\n"), IsEmpty());
}

TEST(PtxasInfoTest, CompileErrorLogHasNoKernels) {
  EXPECT_THAT(
      ParsePtxasInfo(
          R"(probe.cu(2): catastrophic error: could not open source file "cuda_fp16.h" (no directories in search list)
  #include <cuda_fp16.h>
                        ^

1 catastrophic error detected in the compilation of "probe.cu".
Compilation terminated.
)"),
      IsEmpty());
}

TEST(PtxasInfoTest, GarbageNeverFails) {
  constexpr char kLog[] = R"(ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'
ptxas info    : Used many registers, used -- barriers, x bytes smem
ptxas info    : Used 99999999999999999999999 registers
ptxas         .     bytes stack frame, , ,,, 7 bytes spill
ptxas info    : Compile time = fast ms
ptxas info    : Compile time = 12.5
ptxas info    : Used 12 registers, 3 bytes smem, 5 apples, 6 bytes cmem[0]
ptxas info    : Compiling entry function 'unterminated
ptxas info    : Compiling entry function
)";
  const std::vector<KernelResources> ks = ParsePtxasInfo(kLog);
  ASSERT_THAT(ks, SizeIs(3));
  EXPECT_EQ(ks[0].mangled_name, "_Z1kv");
  EXPECT_EQ(ks[0].registers, 12);  // the one well-formed line counts
  EXPECT_EQ(ks[0].static_smem, 3);
  EXPECT_EQ(ks[0].const_bytes, 6);
  EXPECT_EQ(ks[0].spill_stores, 0);
  EXPECT_THAT(ks[0].ptxas_ms, DoubleEq(0));
  EXPECT_EQ(ks[1].mangled_name, "");
  EXPECT_EQ(ks[1].arch, "");
  EXPECT_EQ(ks[2].mangled_name, "");

  // Arbitrary bytes, including NULs and a final line without a newline.
  std::string bytes;
  for (int i = 0; i < 4096; ++i) bytes.push_back(static_cast<char>((i * 131 + 7) % 256));
  bytes += "\nCompiling entry function 'x' for 'sm_90'\nUsed 3 registers";
  const std::vector<KernelResources> from_bytes = ParsePtxasInfo(bytes);
  ASSERT_THAT(from_bytes, SizeIs(1));
  EXPECT_EQ(from_bytes[0].mangled_name, "x");
  EXPECT_EQ(from_bytes[0].registers, 0);  // no "ptxas ...: Used" line, so not a report
}

}  // namespace
}  // namespace ktune
