// The launch gate: a one-thread kernel that holds its stream until the host stores a value
// to mapped host memory (launch_gate.h). The worker enqueues it before a timed batch, then
// the start event, the batch's launches and the stop event, and only then opens it: the
// batch runs back to back on the GPU however slowly the host enqueued it. Without it a
// kernel of a few microseconds was timed at the host's launch rate (a cuLaunchKernel takes
// 2-4 us of a core, more while the compile pool keeps every core busy), not at its own.
//
// Compiled to PTX by NVRTC when ktune is built (embed_ptx_main.cc); no includes.

// Spins until *flag reaches `value` (in wrapping order) or `timeout_ns` pass on the GPU's
// global timer, whichever is first, so a host that never opens it cannot hold the GPU.
extern "C" __global__ void ktune_launch_gate(const volatile unsigned* flag, unsigned value,
                                             unsigned long long timeout_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (static_cast<int>(*flag - value) < 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) return;
  }
}
