// CUTLASS 4.2 under NVRTC: its host adapter's declarations name cudaStream_t, which NVRTC
// does not declare (it compiles device code only). A header of its own, so that every line
// before the kernel is an #include and NVRTC's automatic precompiled header can cover them.
#ifndef KTUNE_BENCH_NVRTC_SHIM_H_
#define KTUNE_BENCH_NVRTC_SHIM_H_
#if defined(__CUDACC_RTC__)
typedef struct CUstream_st* cudaStream_t;
#endif
#endif  // KTUNE_BENCH_NVRTC_SHIM_H_
