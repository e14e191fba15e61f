// Rows whose start is not vector-aligned: the row-wise templates (softmax, rmsnorm,
// add_rmsnorm, layernorm, silu_and_mul) and elementwise keep their 16-byte accesses on any
// row length. A row of `len` elements that starts at linear element `start` of arrays based
// on 16-byte boundaries is cut into
//   the head: elements [0, head) before the first VEC-aligned element,
//   the body: num_vec whole aligned vectors from element head,
//   the tail: the fewer than VEC elements after the body.
// Head and tail together are fewer than 2 * VEC <= 16 elements (EDGE 2, whose body starts on
// a 128-byte line: 9 * VEC <= 72), so the first `count` threads of the row take one edge
// element each, in scalar accesses, beside their body vectors. Arrays indexed by the same
// linear element (x and out of a row-major matrix) share the cut; an array indexed by column
// only (a weight or bias read by every row) is not aligned where the body starts, and its
// body vectors come through LoadVectorAt's shifted forms (two aligned loads and a funnel
// shift, both mostly L1 hits since every row reads them), the shift found per load at run
// time or, under WithShift, fixed when a body is compiled for it.
//
// EDGE == 0 compiles to the aligned-only code (head = 0, count = 0 are constants), so a
// shape whose row length is a multiple of VEC loses nothing; the manifests pin EDGE to
// whether the row length is. Kernels put their edge code under `if constexpr (EDGE)`, not
// only under Has(): a branch that folds to false still moved ptxas's instruction schedule
// (seen in sm_90 SASS), and an EDGE = 0 candidate is meant to be the same machine code as
// before edges existed.
//
// Device code only, under the rules of "ktune/common.cuh" (which it includes).
#ifndef KTUNE_EDGES_CUH_
#define KTUNE_EDGES_CUH_

#include "ktune/common.cuh"

namespace ktune {

/// The cut of one row (see above).
///   VEC:  elements per vector access.
///   EDGE: 0: the caller guarantees start % VEC == 0 and len % VEC == 0 (no edges; the
///         specialization below, whose head and count are compile-time zeros); 1: any, the
///         body from the first VEC-aligned element; 2: any, for 16-byte vectors, the body
///         from the first element on a 128-byte line (8 vectors), so that each warp's 512
///         bytes fill four whole lines instead of straddling five: the head is then up to
///         8 * VEC - 1 elements, count < 9 * VEC. Lines are counted from the arrays' base,
///         which torch and cudaMalloc align to 256 bytes or more; a base aligned to 16 bytes
///         only is still cut correctly (the body stays VEC-aligned), just not on lines.
template <int VEC, int EDGE>
struct RowEdges {
  static_assert(EDGE == 1 || EDGE == 2, "EDGE must be 0, 1 or 2");
  // Where bodies start: on multiples of kAlign elements (so rows kAlign apart share a cut).
  static constexpr int kAlign = EDGE == 2 ? 8 * VEC : VEC;

  int head;     // edge elements before the body
  int num_vec;  // whole aligned vectors in the body
  int count;    // head + tail elements, < kAlign + VEC

  __device__ __forceinline__ RowEdges(long long start, int len) {
    const int mis = static_cast<int>(start % kAlign);
    head = min(len, mis == 0 ? 0 : kAlign - mis);
    num_vec = (len - head) / VEC;
    count = len - num_vec * VEC;
  }

  /// The row column of edge element e (e < count): the head's, then the tail's.
  __device__ __forceinline__ int Column(int e) const { return e < head ? e : e + num_vec * VEC; }

  /// Whether the row's thread t takes an edge element (element t, at Column(t)).
  __device__ __forceinline__ bool Has(int t) const { return t < count; }
};

template <int VEC>
struct RowEdges<VEC, 0> {
  static constexpr int kAlign = VEC;
  static constexpr int head = 0;
  static constexpr int count = 0;
  int num_vec;

  __device__ __forceinline__ RowEdges(long long /*start*/, int len) : num_vec(len / VEC) {}
  __device__ __forceinline__ int Column(int e) const { return e; }
  __device__ __forceinline__ bool Has(int /*t*/) const { return false; }
};

/// The row's edge element that thread t takes (RowEdges::Has), as loaded; T{} (zero, which
/// adds nothing to a sum) where it takes none. `row` is a row of x, or a row-length array
/// (weight, bias), whose edge columns are the same for every row with this cut: a kernel
/// loads those once where it starts, so an edge element's store at the end of a row waits on
/// no load. Callers convert it (ToFloat) only after the row's vector loads are issued: a
/// conversion next to the load waits out its DRAM latency there, and the warp's vector loads
/// with it (seen in the SASS of each row template's odd candidates; add_rmsnorm's odd rows
/// ran 12 % slower on the H200 while its edge loads were converted up front).
template <typename T, int VEC, int EDGE>
__device__ __forceinline__ T EdgeElement(const RowEdges<VEC, EDGE>& edges,
                                         const T* __restrict__ row, int t) {
  return edges.Has(t) ? row[edges.Column(t)] : T{};
}

/// The vector that starts q words and, where half, a 16-bit element more into the pair of
/// aligned vectors lo, hi (lo first in memory): runtime word selects and a funnel shift,
/// which fold away where q and half are constants after inlining (LoadShiftedVectorBy).
/// REQUIRES: 0 <= q < words per vector, and (q, half) not (0, false) unless hi is unused.
template <typename T, int VEC>
__device__ __forceinline__ AlignedVector<T, VEC> ShiftedWords(const AlignedVector<T, VEC>& lo,
                                                              const AlignedVector<T, VEC>& hi,
                                                              int q, bool half) {
  constexpr int kW = AlignedVector<T, VEC>::kWords;
  unsigned int w[2 * kW];
#pragma unroll
  for (int i = 0; i < kW; ++i) {
    w[i] = lo.words[i];
    w[kW + i] = hi.words[i];
  }
  AlignedVector<T, VEC> out;
#pragma unroll
  for (int i = 0; i < kW; ++i) {
    unsigned int a = w[i];
    unsigned int b = w[i + 1];
#pragma unroll
    for (int c = 1; c < kW; ++c) {
      if (q == c) {
        a = w[i + c];
        b = w[i + c + 1];
      }
    }
    out.words[i] = half ? __funnelshift_r(a, b, 16) : a;
  }
  return out;
}

/// The VEC elements at p, p not necessarily aligned to VEC * sizeof(T): the aligned vector
/// holding p[0] and, where p is not aligned, the next one, shifted into place (runtime word
/// selects and a 16-bit funnel shift: no local memory). An aligned p costs one load.
/// REQUIRES: p[0 .. VEC - 1] are elements of one array based on a VEC * sizeof(T) boundary
/// (so neither aligned load leaves the allocation) that no thread of the kernel writes.
template <int VEC, typename T>
__device__ __forceinline__ AlignedVector<T, VEC> LoadShiftedVector(const T* p) {
  using V = AlignedVector<T, VEC>;
  if constexpr (V::kBytes <= static_cast<int>(sizeof(T))) {
    return LoadVector<VEC>(p);  // one element: always aligned
  } else {
    const unsigned long long addr = reinterpret_cast<unsigned long long>(p);
    const int off = static_cast<int>(addr % V::kBytes);  // a multiple of sizeof(T)
    // The aligned vectors by pointer arithmetic on p and through the read-only path: loaded
    // from a pointer made of the integer address they compiled to generic loads (LD, where
    // the aligned kernels' are LDG.E.128.CONSTANT; seen in sm_90 SASS of the odd-length
    // norms), which lose the read-only cache and __restrict__'s freedom to reorder.
    const T* base = p - off / static_cast<int>(sizeof(T));
    const V lo = LoadReadOnlyVector<VEC>(base);
    if (off == 0) return lo;
    const V hi = LoadReadOnlyVector<VEC>(base + VEC);
    return ShiftedWords(lo, hi, off / 4, off % 4 != 0);
  }
}

/// The SHIFT argument of LoadVectorAt (and of LoadRowVectors, RowVectors): where the
/// vectors read from an array lie against its VEC-element boundaries. 0: on them (one load
/// each); s, 0 < s < VEC: s elements past one, known when the kernel is compiled (WithShift;
/// two loads and at most a funnel shift per word, the word selects folded); kAnyShift:
/// anywhere, found per load at run time (LoadShiftedVector's word selects).
constexpr int kAnyShift = -1;

/// LoadShiftedVector for p exactly S elements past a VEC-element boundary (0 < S < VEC):
/// the same values, with the word selects resolved at compile time, so a shift of whole
/// 32-bit words costs no instruction beyond the two loads and a 16-bit one a funnel shift
/// per word. REQUIRES: as LoadShiftedVector, and p's distance from its array's base is
/// S modulo VEC elements.
template <int VEC, int S, typename T>
__device__ __forceinline__ AlignedVector<T, VEC> LoadShiftedVectorBy(const T* p) {
  using V = AlignedVector<T, VEC>;
  static_assert(S > 0 && S < VEC, "LoadShiftedVectorBy: S must be in (0, VEC)");
  static_assert(V::kBytes >= 4, "a vector of one 16-bit element is never shifted");
  constexpr int kOff = S * static_cast<int>(sizeof(T));  // bytes past the boundary
  const V lo = LoadReadOnlyVector<VEC>(p - S);
  const V hi = LoadReadOnlyVector<VEC>(p - S + VEC);
  return ShiftedWords(lo, hi, kOff / 4, kOff % 4 != 0);
}

/// The VEC elements at p, as SHIFT says p lies (kAnyShift, 0, or 1 .. VEC - 1; see above).
template <int VEC, int SHIFT, typename T>
__device__ __forceinline__ AlignedVector<T, VEC> LoadVectorAt(const T* p) {
  static_assert(SHIFT == kAnyShift || (SHIFT >= 0 && SHIFT < VEC), "SHIFT out of range");
  if constexpr (SHIFT == kAnyShift) {
    return LoadShiftedVector<VEC>(p);
  } else if constexpr (SHIFT == 0) {
    return LoadVector<VEC>(p);
  } else {
    return LoadShiftedVectorBy<VEC, SHIFT>(p);
  }
}

/// A shift as a type, for WithShift's body: ShiftConstant<S>::value == S.
template <int S>
struct ShiftConstant {
  static constexpr int value = S;
};

/// Runs body(ShiftConstant<SHIFT>()) with the SHIFT argument a kernel's shifted loads take
/// for an array read `shift` elements past a VEC boundary (0 <= shift < VEC, the same for
/// every thread that calls, e.g. a block's cut of weight). EDGE 0 (no edges, so never
/// shifted): SHIFT 0. DISPATCH 0: kAnyShift, one body that selects each load's words at run
/// time. DISPATCH 1: the body compiled once per shift (VEC copies of it) and the one for
/// `shift` taken by a branch every thread takes alike; the selects fold away, which is most
/// of what a shifted vector costs beyond its loads, for VEC times the machine code.
template <int VEC, int EDGE, int DISPATCH, int S = 0, typename Body>
__device__ __forceinline__ void WithShift(int shift, Body&& body) {
  static_assert(DISPATCH == 0 || DISPATCH == 1, "DISPATCH must be 0 or 1");
  if constexpr (EDGE == 0) {
    body(ShiftConstant<0>());
  } else if constexpr (DISPATCH == 0) {
    body(ShiftConstant<kAnyShift>());
  } else {
    if constexpr (S + 1 < VEC) {
      if (shift != S) {
        WithShift<VEC, EDGE, DISPATCH, S + 1>(shift, body);
        return;
      }
    }
    body(ShiftConstant<S>());
  }
}

}  // namespace ktune

#endif  // KTUNE_EDGES_CUH_
