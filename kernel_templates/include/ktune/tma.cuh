// Tensor maps and TMA for ktune's kernel templates: the parameter type of a manifest's
// `tensor_map` argument, thin wrappers over the PTX of bulk tensor copies into shared memory
// completed on mbarriers, and the cluster operations that let one copy feed several blocks.
//
// Device code only; NVRTC finds it with `#include "ktune/tma.cuh"`. It includes nothing:
// NVRTC cannot include <cuda.h>, so ktune::TensorMap restates CUtensorMap's layout (128
// opaque bytes, 64-byte aligned). A kernel takes it by value as
//   `const __grid_constant__ ktune::TensorMap x_map`
// and every launcher (ktune-worker, LoadedKernel in C++ and Python) fills it with
// cuTensorMapEncodeTiled from the caller's pointer of the buffer the manifest names. The
// PTX wrappers need sm_90 (compute capability 9.0), except SmemAddress, and are pure
// functions of their arguments; their memory effects are the instructions'.
#ifndef KTUNE_TMA_CUH_
#define KTUNE_TMA_CUH_

namespace ktune {

/// A CUtensorMap as the kernel receives it: 128 bytes, 64-byte aligned, never read by the
/// kernel except through TMA instructions (pass its address, see TmaLoad2d).
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "TensorMap must have CUtensorMap's size");

/// The shared-memory address PTX wants for a generic pointer into shared memory (written
/// as PTX rather than __cvta_generic_to_shared so nothing depends on NVRTC's -minimal set).
__device__ __forceinline__ unsigned SmemAddress(const void* p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return static_cast<unsigned>(a);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

/// Initializes a shared 64-bit mbarrier expecting `arrivals` arrivals per phase. One thread
/// does it, then FenceMbarrierInit and a __syncthreads before anyone uses the barrier.
__device__ __forceinline__ void MbarrierInit(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddress(bar)), "r"(arrivals)
               : "memory");
}

/// Makes initialized mbarriers visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void FenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// Arrives on `bar` and tells it to expect `bytes` more bytes of asynchronous copies in this
/// phase (a TMA box writes all of its bytes, out-of-bounds ones filled per the map).
__device__ __forceinline__ void MbarrierArriveExpectTx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddress(bar)),
               "r"(bytes)
               : "memory");
}

/// Spins until phase `parity` (0, 1, 0, ...) of the barrier at shared address `bar`
/// completes. (The overloads on shared addresses let a loop add a slot's offset to an
/// address it formed once, instead of converting a generic pointer every time.)
__device__ __forceinline__ void MbarrierWait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n\t"
      ".reg .pred p;\n\t"
      "KTUNE_MBAR_WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra KTUNE_MBAR_WAIT;\n\t"
      "}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void MbarrierWait(unsigned long long* bar, unsigned parity) {
  MbarrierWait(SmemAddress(bar), parity);
}

/// Whether phase `parity` of the barrier at shared address `bar` has completed, without
/// waiting for it.
__device__ __forceinline__ bool MbarrierTest(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n\t"
      ".reg .pred p;\n\t"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t"
      "}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

/// Copies the box at element coordinates (c0, c1) (c0 innermost) of a rank-2 `map` into
/// shared memory at `dst` (128-byte aligned for swizzled maps, 16 otherwise), completing
/// the bytes on `bar`. One thread issues it.
__device__ __forceinline__ void TmaLoad2d(void* dst, const TensorMap* map, int c0, int c1,
                                          unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(SmemAddress(bar))
      : "memory");
}

/// Pulls the box at (c0, c1) of a rank-2 `map` into L2 without waiting for it or landing it
/// anywhere else: a later TmaLoad2d of the same box then reads L2 instead of DRAM.
__device__ __forceinline__ void TmaPrefetchL2(const TensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(
                   reinterpret_cast<unsigned long long>(map)),
               "r"(c0), "r"(c1)
               : "memory");
}

/// One plain arrival on the barrier at shared address `bar`.
__device__ __forceinline__ void MbarrierArrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/// Fetches a tensor map into the copy engine's cache ahead of its first use.
__device__ __forceinline__ void PrefetchTensorMap(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(map))
               : "memory");
}

// --- Stores from shared memory -----------------------------------------------------------

/// Makes this thread's ordinary shared-memory writes visible to the copy engine (the async
/// proxy): each writer runs it before the barrier after which one thread issues TmaStore2d.
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/// Copies shared memory at `src` (laid out as `map`'s box, 128-byte aligned for swizzled
/// maps) to the box at element coordinates (c0, c1) of a rank-2 `map`; elements outside the
/// tensor are not written. Asynchronous: BulkCommitGroup closes the stores issued so far
/// into a group that BulkWaitGroupRead / BulkWaitGroup wait for. One thread issues it.
__device__ __forceinline__ void TmaStore2d(const TensorMap* map, const void* src, int c0,
                                           int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
          reinterpret_cast<unsigned long long>(map)),
      "r"(c0), "r"(c1), "r"(SmemAddress(src))
      : "memory");
}

/// Closes this thread's bulk stores issued since the last commit into one group.
__device__ __forceinline__ void BulkCommitGroup() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/// Waits until at most N of this thread's committed store groups still read shared memory:
/// the sources of the others may be written again.
template <int N>
__device__ __forceinline__ void BulkWaitGroupRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

/// Waits until at most N of this thread's committed store groups are incomplete (written to
/// global memory).
template <int N>
__device__ __forceinline__ void BulkWaitGroup() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// --- Thread-block clusters ---------------------------------------------------------------

/// This block's rank in its cluster (0 for a kernel launched without clusters).
__device__ __forceinline__ unsigned ClusterRank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

/// Every thread of every block of the cluster arrives and waits: shared-memory writes and
/// barrier initialisations before it are visible cluster-wide after it. All threads of the
/// block call it.
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

/// One arrival on the barrier at shared address `bar`'s offset in block `cta` of this cluster
/// (this block included). Release at CTA scope only: what it orders are this block's reads
/// of a slot by wgmma, complete before the arrival; a cluster-scope release here made a GEMM
/// 3.7x slower on the H200 (one per slot and block).
__device__ __forceinline__ void MbarrierArriveCluster(unsigned bar, unsigned cta) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

/// TmaLoad2d into the same shared-memory offset of every block in `cta_mask` (bit i: rank
/// i), completing the bytes on each one's barrier at `bar`'s offset.
__device__ __forceinline__ void TmaLoad2dMulticast(void* dst, const TensorMap* map, int c0,
                                                   int c1, unsigned long long* bar,
                                                   unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(SmemAddress(bar)),
      "h"(cta_mask)
      : "memory");
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace ktune

#endif  // KTUNE_TMA_CUH_
