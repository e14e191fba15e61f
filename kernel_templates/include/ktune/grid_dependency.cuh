// Programmatic dependent launch (sm_90 and later): how a ktune kernel lets the next kernel of
// its stream start before it ends, and waits for the one before it.
//
// Between two kernels of one stream a GPU normally drains the first (its last blocks, the
// flush of its writes) before it places a block of the second, then the second ramps up
// from nothing: a few microseconds per kernel boundary. A decode step is a chain of
// ten-odd kernels of 2-20 us each, so those boundaries are a large share of its time. A
// kernel launched with the programmatic-stream-serialization attribute may instead be
// placed as soon as every block of the kernel before it has executed `launch_dependents`
// (or exited); its blocks then do what needs no result of that kernel (barrier set-up, the
// weight's first tiles pulled into L2) and execute `wait`, which returns once the kernel
// before it has completed and its writes are visible.
//
// The rule a template's kernel must keep for its manifest launch to say `programmatic:
// true`: no global memory access before GridDependencyWait() other than prefetches into L2
// (a prefetch reads no value into a register, and L2 is where every SM's writes land, so a
// line fetched early is still current when it is read after the wait). Writes wait too: the
// kernel before may still be reading the buffer this one writes.
//
// Both instructions do nothing on a kernel launched without the attribute, so an artifact
// runs the same under a launcher that does not know them. Below sm_90 they compile to
// nothing, and the server marks no launch of such a target programmatic.
#ifndef KTUNE_GRID_DEPENDENCY_CUH_
#define KTUNE_GRID_DEPENDENCY_CUH_

namespace ktune {

/// Lets the kernel after this one be placed once every block of this one has called it (or
/// exited). Called first thing: the next kernel's blocks then take the SM room this kernel's
/// last wave leaves, and sit in their own GridDependencyWait until this kernel completes.
__device__ __forceinline__ void GridDependencyLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Returns once the kernel before this one (launched programmatically) has completed and its
/// writes are visible; at once otherwise. Every thread that touches global memory calls it
/// before doing so.
__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Both, for a kernel with nothing to do before its inputs are ready: its first statement.
__device__ __forceinline__ void GridDependencyBegin() {
  GridDependencyLaunch();
  GridDependencyWait();
}

}  // namespace ktune

#endif  // KTUNE_GRID_DEPENDENCY_CUH_
