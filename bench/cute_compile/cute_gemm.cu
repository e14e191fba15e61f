// The gemm template's Hopper kernel (kernel_templates/gemm/gemm.cu, gemm_wgmma_kernel) written
// again with CUTLASS's CuTe instead of ktune's own PTX wrappers, to time what NVRTC takes
// to compile each way (bench/cute_compile/README.md). The same design: a persistent grid,
// warpgroup 0's first thread copying 128-byte K slices of A and B into a ring of STAGES
// shared-memory slots with TMA, full / empty mbarriers per slot, BM / 64 consumer
// warpgroups multiplying from shared memory with wgmma (CuTe's TiledMMA over GMMA atoms,
// 128-byte swizzled K-major layouts), accumulators written straight out, bounds-checked.
// Device code only; compiled, never launched: it exists for the compile-time comparison.
// CUTLASS 4.2's headers need NVRTC's -default-device (constexpr functions without
// __host__ __device__) and a declaration of cudaStream_t (nvrtc_shim.h).
#include "nvrtc_shim.h"
#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

namespace cute_gemm {

using namespace cute;

template <class T, int BM, int BN, int STAGES>
struct Config {
  static constexpr int kBK = 128 / static_cast<int>(sizeof(T));  // one 128-byte swizzle span
  using Atom = GMMA::Layout_K_SW128_Atom<T>;
  using SmemA = decltype(tile_to_shape(Atom{}, make_shape(Int<BM>{}, Int<kBK>{}, Int<STAGES>{})));
  using SmemB = decltype(tile_to_shape(Atom{}, make_shape(Int<BN>{}, Int<kBK>{}, Int<STAGES>{})));
  using Mma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BN>, Int<kBK>>, GMMA::Major::K,
                           GMMA::Major::K>(),
      Layout<Shape<Int<BM / 64>, _1, _1>>{}));
  struct alignas(1024) Shared {
    alignas(1024) T a[cosize_v<SmemA>];
    alignas(1024) T b[cosize_v<SmemB>];
    uint64_t full[STAGES];
    uint64_t empty[STAGES];
  };
};

}  // namespace cute_gemm

/// out[m, n] = x[m, k] . w[n, k]^T, T = cutlass::bfloat16_t or cutlass::half_t; tm_a and tm_b
/// as gemm_wgmma_kernel's (K innermost, box 128 bytes x BM or BN rows, 128-byte swizzle).
template <class T, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(128 * (BM / 64 + 1), 1)
cute_gemm_kernel(const __grid_constant__ cute::TmaDescriptor tm_a,
                 const __grid_constant__ cute::TmaDescriptor tm_b, T* out, int m, int n, int k) {
  using namespace cute;
  using C = cute_gemm::Config<T, BM, BN, STAGES>;
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& shared = *reinterpret_cast<typename C::Shared*>(smem_raw);
  Tensor sA = make_tensor(make_smem_ptr(shared.a), typename C::SmemA{});  // (BM, BK, STAGES)
  Tensor sB = make_tensor(make_smem_ptr(shared.b), typename C::SmemB{});  // (BN, BK, STAGES)

  constexpr int kConsumers = BM / 64;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      Full::init(&shared.full[s], 1);
      Empty::init(&shared.empty[s], kConsumers);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
  const int kblocks = (k + C::kBK - 1) / C::kBK;
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<40>();
    if (threadIdx.x != 0) return;
    int slot = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
      const int tm = tile % tiles_m, tn = tile / tiles_m;
      for (int kb = 0; kb < kblocks; ++kb) {
        Empty::wait(&shared.empty[slot], phase ^ 1);
        Full::arrive_and_expect_tx(&shared.full[slot], (BM + BN) * 128);
        SM90_TMA_LOAD_2D::copy(&tm_a, &shared.full[slot], 0, &sA(0, 0, slot), kb * C::kBK,
                               tm * BM);
        SM90_TMA_LOAD_2D::copy(&tm_b, &shared.full[slot], 0, &sB(0, 0, slot), kb * C::kBK,
                               tn * BN);
        if (++slot == STAGES) {
          slot = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<232>();
  typename C::Mma mma;
  auto thr = mma.get_thread_slice(threadIdx.x - 128);
  Tensor tCsA = thr.partition_A(sA);  // (MMA, MMA_M, MMA_K, STAGES)
  Tensor tCsB = thr.partition_B(sB);
  Tensor tCrA = thr.make_fragment_A(tCsA);  // wgmma descriptors
  Tensor tCrB = thr.make_fragment_B(tCsB);
  Tensor mC = make_tensor(make_gmem_ptr(out), make_shape(m, n), make_stride(n, _1{}));
  Tensor cC = make_identity_tensor(make_shape(m, n));  // coordinates, for the bounds checks
  int slot = 0;
  uint32_t phase = 0;
  for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    const int tm = tile % tiles_m, tn = tile / tiles_m;
    auto tiler = make_shape(Int<BM>{}, Int<BN>{});
    Tensor tCgC = thr.partition_C(local_tile(mC, tiler, make_coord(tm, tn)));
    Tensor tCcC = thr.partition_C(local_tile(cC, tiler, make_coord(tm, tn)));
    Tensor acc = thr.partition_fragment_C(local_tile(mC, tiler, make_coord(tm, tn)));
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    for (int kb = 0; kb < kblocks; ++kb) {
      Full::wait(&shared.full[slot], phase);
      warpgroup_fence_operand(acc);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int kk = 0; kk < size<2>(tCrA); ++kk) {
        cute::gemm(mma, tCrA(_, _, kk, slot), tCrB(_, _, kk, slot), acc);
        mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc);
      if (threadIdx.x % 128 == 0) Empty::arrive(&shared.empty[slot]);
      if (++slot == STAGES) {
        slot = 0;
        phase ^= 1;
      }
    }
    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      if (get<0>(tCcC(i)) < m && get<1>(tCcC(i)) < n) tCgC(i) = T(acc(i));
    }
  }
}
