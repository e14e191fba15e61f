// silu_and_mul (SwiGLU): out[t, i] = silu(x[t, i]) * x[t, inter + i] for a row-major
// x [tokens, 2 * inter] and out [tokens, inter], silu(a) = a / (1 + exp(-a)), float math for
// every element type. The candidate kernel and its reference; the manifest
// (silu_and_mul.textproto) gives their launch geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"
#include "ktune/edges.cuh"

namespace ktune_silu_and_mul {

// silu(a) * b in float, in the reference's order. expf and the division are the accurate
// ones unless the candidate is compiled with --use_fast_math (then __expf and an
// approximate division: fewer instructions per element, which matters when the stream runs
// at the copy bandwidth and the ALUs are half busy).
__device__ __forceinline__ float SiluMul(float a, float b) {
  return a / (1.0f + expf(-a)) * b;
}

template <typename T, int VEC>
__device__ __forceinline__ ktune::AlignedVector<T, VEC> SiluMulVector(
    const ktune::AlignedVector<T, VEC>& gate, const ktune::AlignedVector<T, VEC>& up) {
  float g[VEC];
  float u[VEC];
  ktune::VectorToFloat(gate, g);
  ktune::VectorToFloat(up, u);
  float o[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) o[k] = SiluMul(g[k], u[k]);
  return ktune::FloatToVector<T>(o);
}

// One tile: output vectors first + u * BLOCK (u < UNROLL) of one row, those below num_vec.
// All 2 * UNROLL loads are issued before the first use, so each thread keeps
// 2 * UNROLL * VEC * sizeof(T) bytes in flight. A whole tile (every tile but a row's last
// when BLOCK * UNROLL does not divide num_vec) takes no bounds checks. GATE_SHIFT, UP_SHIFT:
// how gate (at x_row) and up (at x_row + inter) lie against vector boundaries, the SHIFT
// of ktune::LoadVectorAt (0: aligned).
template <int BLOCK, int VEC, int UNROLL, int GATE_SHIFT, int UP_SHIFT, typename T>
__device__ __forceinline__ void Tile(const T* __restrict__ x_row, T* __restrict__ out_row,
                                     int first, int num_vec, int inter) {
  using Vec = ktune::AlignedVector<T, VEC>;
  Vec gate[UNROLL];
  Vec up[UNROLL];
  const bool whole = first - static_cast<int>(threadIdx.x) + BLOCK * UNROLL <= num_vec;
  if (whole) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int idx = (first + u * BLOCK) * VEC;
      gate[u] = ktune::LoadVectorAt<VEC, GATE_SHIFT>(x_row + idx);
      up[u] = ktune::LoadVectorAt<VEC, UP_SHIFT>(x_row + inter + idx);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      ktune::StoreVector<VEC>(out_row + (first + u * BLOCK) * VEC, SiluMulVector(gate[u], up[u]));
    }
  } else {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int v = first + u * BLOCK;
      gate[u] = v < num_vec ? ktune::LoadVectorAt<VEC, GATE_SHIFT>(x_row + v * VEC) : Vec{};
      up[u] = v < num_vec ? ktune::LoadVectorAt<VEC, UP_SHIFT>(x_row + inter + v * VEC) : Vec{};
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int v = first + u * BLOCK;
      if (v < num_vec) ktune::StoreVector<VEC>(out_row + v * VEC, SiluMulVector(gate[u], up[u]));
    }
  }
}

// One row's tile `tile`: its vectors (Tile), and with tile 0 the row's edge elements
// (ktune/edges.cuh). The vectors are cut in out's frame, so stores stay aligned; gate and
// up start `inter` elements apart, so with EDGE at least one of them is read shifted (both
// are, which costs no DRAM bytes: the second aligned load is the neighbour's first).
// PER_SHIFT 1: the tile compiled once per shift of gate (ktune::WithShift), up's found at
// run time; a shift of both at compile time would be VEC * VEC tiles.
template <int BLOCK, int VEC, int UNROLL, int EDGE, int PER_SHIFT, typename T>
__device__ __forceinline__ void RowTile(const T* __restrict__ x, T* __restrict__ out,
                                        long long row, int tile, int inter) {
  const ktune::RowEdges<VEC, EDGE> edges(row * inter, inter);
  const T* __restrict__ x_row = x + row * 2 * inter;
  T* __restrict__ out_row = out + row * inter;
  // The edge element's gate and up are loaded before the tile's vectors, so their latency
  // overlaps the vectors' instead of following the tile's stores at the block's end. They
  // stay in T until the tile is issued: converted where they are loaded, the conversion
  // waited out their DRAM latency before the tile's first vector load.
  const bool has_edge = EDGE && tile == 0 && edges.Has(threadIdx.x);
  const int edge_col = edges.Column(threadIdx.x);
  T edge_gate{};
  T edge_up{};
  if constexpr (EDGE) {
    if (has_edge) {
      edge_gate = x_row[edge_col];
      edge_up = x_row[inter + edge_col];
    }
  }
  const int gate_shift = static_cast<int>((row * 2 * inter + edges.head) % VEC);
  ktune::WithShift<VEC, EDGE, PER_SHIFT>(gate_shift, [&](auto shift) {
    constexpr int kGateShift = decltype(shift)::value;
    constexpr int kUpShift = EDGE ? ktune::kAnyShift : 0;
    Tile<BLOCK, VEC, UNROLL, kGateShift, kUpShift>(
        x_row + edges.head, out_row + edges.head,
        tile * BLOCK * UNROLL + static_cast<int>(threadIdx.x), edges.num_vec, inter);
  });
  if constexpr (EDGE) {
    if (has_edge) {
      out_row[edge_col] =
          ktune::FromFloat<T>(SiluMul(ktune::ToFloat(edge_gate), ktune::ToFloat(edge_up)));
    }
  }
}

// GRID_STRIDE 3: out's vectors as one flat sequence cut into tiles of BLOCK * UNROLL, so a
// row whose vectors are no multiple of the tile leaves no nearly empty block behind it (4096
// x 14338 bf16 in 4-byte vectors: 7169 a row, 15 tiles of 512 with 1 vector in the last),
// and rows shorter than a tile share one. The vector at out's flat element f (f = row *
// inter + col) reads gate at x + f + row * inter (x's rows are 2 * inter long) and up inter
// after it. One division per thread finds its first vector's row; the later ones step BLOCK
// vectors on without dividing.
//   SHIFTED false (EDGE 0): inter % VEC == 0, so gate and up are aligned and every vector
// lies in one row.
//   SHIFTED (EDGE 1): any inter >= VEC. out's tokens * inter elements are cut into whole
// vectors from its base; gate and up are read shifted by the row's (row * inter) % VEC
// (found per load at run time). A vector that ends in the next row (one a row at most)
// takes its elements from there in the same frame: that row's gate lies where this row's up
// does (f + (row + 1) * inter), and its up one inter further, one more shifted load. The
// fewer than VEC elements after the last vector go one per thread of the last block. Every
// out store is a whole aligned vector, which the edge path per row cannot give at a row
// length no multiple of VEC.
template <int BLOCK, int VEC, int UNROLL, bool SHIFTED, typename T>
__device__ __forceinline__ void FlatTile(const T* __restrict__ x, T* __restrict__ out,
                                         int tokens, int inter) {
  using Vec = ktune::AlignedVector<T, VEC>;
  constexpr int kTile = BLOCK * UNROLL;
  constexpr int kShift = SHIFTED ? ktune::kAnyShift : 0;
  const long long elems = static_cast<long long>(tokens) * inter;
  const long long total = elems / VEC;  // whole output vectors
  const long long tile_first = static_cast<long long>(blockIdx.x) * kTile;
  const long long first = tile_first + threadIdx.x;
  long long row;
  int col;  // of the first element of the thread's first vector
  if (elems + static_cast<long long>(kTile) * VEC <= 0xffffffffLL) {
    // Unsigned 32-bit division where it fits: far cheaper.
    const unsigned f = static_cast<unsigned>(first * VEC);
    const unsigned r = f / static_cast<unsigned>(inter);
    row = r;
    col = static_cast<int>(f - r * static_cast<unsigned>(inter));
  } else {
    row = first * VEC / inter;
    col = static_cast<int>(first * VEC - row * inter);
  }
  const int step_rows = BLOCK * VEC / inter;
  const int step_cols = BLOCK * VEC % inter;
  long long gate_at[UNROLL];  // element offsets in x of this thread's gate vectors
  int in_row[UNROLL];         // how many of a vector's elements lie in its first row
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    gate_at[u] = (first + u * BLOCK) * VEC + row * inter;
    in_row[u] = SHIFTED ? min(VEC, inter - col) : VEC;
    row += step_rows;
    col += step_cols;
    if (col >= inter) {
      col -= inter;
      ++row;
    }
  }
  // All 2 * UNROLL loads are issued before the first use; a whole tile takes no bounds checks.
  const bool whole = tile_first + kTile <= total;
  Vec gate[UNROLL];
  Vec up[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const bool inside = whole || first + u * BLOCK < total;
    gate[u] = inside ? ktune::LoadVectorAt<VEC, kShift>(x + gate_at[u]) : Vec{};
    up[u] = inside ? ktune::LoadVectorAt<VEC, kShift>(x + gate_at[u] + inter) : Vec{};
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (!whole && first + u * BLOCK >= total) continue;
    Vec o;
    if (!SHIFTED || in_row[u] == VEC) {
      o = SiluMulVector(gate[u], up[u]);
    } else {
      // Crosses into the next row: its elements' gate is up's, their up one inter further.
      const Vec next_up = ktune::LoadVectorAt<VEC, kShift>(x + gate_at[u] + 2 * inter);
      float g[VEC], a[VEC], b[VEC], r[VEC];
      ktune::VectorToFloat(gate[u], g);
      ktune::VectorToFloat(up[u], a);
      ktune::VectorToFloat(next_up, b);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        r[j] = j < in_row[u] ? SiluMul(g[j], a[j]) : SiluMul(a[j], b[j]);
      }
      o = ktune::FloatToVector<T>(r);
    }
    ktune::StoreVector<VEC>(out + (first + u * BLOCK) * VEC, o);
  }
  if constexpr (SHIFTED) {
    // The last elements, after the last whole vector: one per thread of the last block.
    const int tail = static_cast<int>(elems - total * VEC);
    if (blockIdx.x == gridDim.x - 1 && static_cast<int>(threadIdx.x) < tail) {
      const long long f = total * VEC + threadIdx.x;
      const long long at = f + f / inter * inter;
      out[f] = ktune::FromFloat<T>(SiluMul(ktune::ToFloat(x[at]), ktune::ToFloat(x[at + inter])));
    }
  }
}

}  // namespace ktune_silu_and_mul

/// SwiGLU: out[t, i] = silu(x[t, i]) * x[t, inter + i], float math.
///   T:           float, __half or __nv_bfloat16.
///   BLOCK:       threads per block (== blockDim.x); a multiple of 32, at most
///                KTUNE_MAX_THREADS.
///   VEC_BYTES:   bytes per vector access, 2, 4, 8 or 16 and at least sizeof(T); a vector
///                holds VEC = VEC_BYTES / sizeof(T) elements.
///   UNROLL:      output vectors per thread per tile (a tile is BLOCK * UNROLL vectors of
///                one row); 1 to 16.
///   GRID_STRIDE: 0: one tile per block, grid = [tokens, tiles per row] (blockIdx.x is the
///                row, blockIdx.y the tile); 1: each block walks the tokens * tiles-per-row
///                tiles (row-major) with stride gridDim.x, grid.y = 1; 2: the same walk with
///                one block per tile (grid.x = tokens * tiles per row), so blocks in launch
///                order stream each row's tiles in turn; 3: one block per tile of the
///                tokens * (inter / VEC) vectors taken as one flat sequence, tiles crossing
///                rows (grid.x = ceil(tokens * (inter / VEC) / (BLOCK * UNROLL))); with EDGE
///                1, out's tokens * inter elements as whole vectors from its base, gate and
///                up read shifted, the last < VEC elements by the last block (grid.x =
///                ceil(tokens * inter / VEC / (BLOCK * UNROLL)); inter >= VEC, PER_SHIFT 0).
///   EDGE:        0: inter % VEC == 0 (the up half and every row start VEC-aligned); 1: any
///                inter: each row's vectors start at out's first aligned element, gate and
///                up read shifted, the fewer than 2 * VEC elements around them one per
///                thread of the row's tile 0 (ktune/edges.cuh); 2: as 1, 16-byte vectors
///                from out's first 128-byte line in the row (up to 9 * VEC - 1 edge
///                elements: BLOCK >= 9 * VEC).
///   PER_SHIFT:   with EDGE: 0: gate and up read shifted with the shift found per load at
///                run time; 1: the tile compiled once per shift of gate (VEC copies), up's
///                still found at run time.
/// REQUIRES: inter % VEC == 0 unless EDGE; inter >= VEC with GRID_STRIDE 3 and EDGE; x and
/// out aligned to VEC * sizeof(T) bytes; out does not overlap x; tokens * 2 * inter elements
/// in x, tokens * inter in out.
template <typename T, int BLOCK, int VEC_BYTES, int UNROLL, int GRID_STRIDE, int EDGE,
          int PER_SHIFT>
__global__ void KTUNE_LAUNCH_BOUNDS silu_and_mul_kernel(const T* __restrict__ x,
                                                        T* __restrict__ out, int tokens,
                                                        int inter) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK>());
  static_assert(VEC_BYTES == 2 || VEC_BYTES == 4 || VEC_BYTES == 8 || VEC_BYTES == 16,
                "VEC_BYTES must be 2, 4, 8 or 16");
  static_assert(VEC_BYTES >= sizeof(T), "VEC_BYTES must hold at least one element");
  constexpr int VEC = VEC_BYTES / static_cast<int>(sizeof(T));
  static_assert(UNROLL >= 1 && UNROLL <= 16, "UNROLL must be from 1 to 16");
  static_assert(GRID_STRIDE >= 0 && GRID_STRIDE <= 3, "GRID_STRIDE must be 0, 1, 2 or 3");
  static_assert(GRID_STRIDE != 3 || EDGE <= 1, "GRID_STRIDE 3 takes EDGE 0 or 1");
  static_assert(PER_SHIFT == 0 || EDGE > 0, "PER_SHIFT is for EDGE > 0");
  static_assert(GRID_STRIDE != 3 || PER_SHIFT == 0, "GRID_STRIDE 3 finds shifts at run time");

  constexpr int kTile = BLOCK * UNROLL;
  if constexpr (GRID_STRIDE == 3) {
    ktune_silu_and_mul::FlatTile<BLOCK, VEC, UNROLL, EDGE == 1>(x, out, tokens, inter);
  } else if constexpr (GRID_STRIDE == 0) {
    ktune_silu_and_mul::RowTile<BLOCK, VEC, UNROLL, EDGE, PER_SHIFT>(x, out, blockIdx.x,
                                                                     blockIdx.y, inter);
  } else {
    // 1 and 2 alike (with 2 the loop runs once per block). inter / VEC vectors bound every
    // row's body (fewer where the row has edges), and a row of edges only still has tile 0.
    int tiles_per_row = (inter / VEC + kTile - 1) / kTile;
    if constexpr (EDGE) tiles_per_row = max(1, tiles_per_row);
    const long long tiles = static_cast<long long>(tokens) * tiles_per_row;
#pragma unroll 1
    for (long long id = blockIdx.x; id < tiles; id += gridDim.x) {
      const long long row = id / tiles_per_row;
      const int tile = static_cast<int>(id - row * tiles_per_row);
      ktune_silu_and_mul::RowTile<BLOCK, VEC, UNROLL, EDGE, PER_SHIFT>(x, out, row, tile, inter);
    }
  }
}

/// The reference: one row per 32-thread block, each thread a strided slice of the row;
/// silu and the product in double, rounded to T once. Launched with grid = tokens,
/// block = 32 (manifest), so it fits under any KTUNE_MAX_THREADS.
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS silu_and_mul_reference(const T* __restrict__ x,
                                                           T* __restrict__ out, int tokens,
                                                           int inter) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  const long long row = blockIdx.x;
  if (row >= tokens) return;
  for (int i = threadIdx.x; i < inter; i += blockDim.x) {
    const double a = ktune::ToFloat(x[row * 2 * inter + i]);
    const double b = ktune::ToFloat(x[row * 2 * inter + inter + i]);
    out[row * inter + i] = ktune::FromFloat<T>(static_cast<float>(a / (1.0 + exp(-a)) * b));
  }
}
