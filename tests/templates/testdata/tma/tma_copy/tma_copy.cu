// The tests' tensor-map template: out = x, where x is read tile by tile through a TMA
// tensor map (cp.async.bulk.tensor.2d into shared memory, completed on an mbarrier) and the
// tile is then written out by the block's threads. sm_90 and later.
#include <cuda_bf16.h>

#include "ktune/tma.cuh"

/// BOX_COLS x BOX_ROWS: the tile one TMA copy moves (the map's box), elements.
/// PATH: 0 the portable path; 1 stands for a Hopper-only one and compiles for sm_90a only
/// (the manifest's "PATH == 0 || KTUNE_ARCH_SPECIFIC" keeps it off plain sm_90).
template <typename T, int BOX_COLS, int BOX_ROWS, int PATH>
__global__ void KTUNE_LAUNCH_BOUNDS tma_copy(const __grid_constant__ ktune::TensorMap x_map,
                                             T* __restrict__ out, int rows, int cols) {
  static_assert(BOX_COLS * sizeof(T) % 16 == 0, "a box row must be a multiple of 16 bytes");
  static_assert(PATH == 0 || PATH == 1, "PATH is 0 or 1");
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(PATH == 0, "PATH 1 needs the arch-specific target sm_90a");
#endif
  __shared__ alignas(128) T tile[BOX_ROWS * BOX_COLS];
  __shared__ alignas(8) unsigned long long bar;
  const int col0 = blockIdx.x * BOX_COLS;
  const int row0 = blockIdx.y * BOX_ROWS;
  if (threadIdx.x == 0) {
    ktune::MbarrierInit(&bar, 1);
    ktune::FenceMbarrierInit();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ktune::MbarrierArriveExpectTx(&bar, sizeof(tile));
    ktune::TmaLoad2d(tile, &x_map, col0, row0, &bar);
  }
  ktune::MbarrierWait(&bar, 0);
  for (int i = threadIdx.x; i < BOX_ROWS * BOX_COLS; i += blockDim.x) {
    const int r = row0 + i / BOX_COLS;
    const int c = col0 + i % BOX_COLS;
    if (r < rows && c < cols) out[static_cast<long long>(r) * cols + c] = tile[i];
  }
}

template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS tma_copy_ref(const T* __restrict__ x, T* __restrict__ out,
                                                 int rows, int cols) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < static_cast<long long>(rows) * cols) out[i] = x[i];
}
