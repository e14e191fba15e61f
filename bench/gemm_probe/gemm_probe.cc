// gemm_probe: a standalone harness for developing the gemm template's kernels outside
// ktune's service. It compiles candidates with NVRTC the way ktune does (the template's
// gemm.cu, its include folder, the launch-bounds defines), checks each against the
// template's reference kernel on random data, and times it next to cuBLAS in the same
// process with a read-flushed event timer. It talks to the driver, NVRTC and cuBLAS
// directly, on purpose: it is a development tool, not part of ktune (whose CUDA calls stay in
// server/worker and server/compile), and `ktune tune --top N` is the way to tune for real.
//
//   gemm_probe compile DTYPE CONFIG...          NVRTC only (no GPU): time, registers, spills
//   gemm_probe check DTYPE M N K CONFIG...      reference vs candidate: elements outside
//                                               atol * sqrt(k) + rtol |ref| and the worst
//                                               error over its bound, then two reruns
//                                               that must give the same bits (split-K's
//                                               counters reset); PROBE_SCALES="SX,SW" fixes
//                                               the fp8 scales (default: random in [0.5, 2))
//   gemm_probe time DTYPE M N K CONFIG...       median us over 30 read-flushed runs; cuBLAS
//                                               (cublasGemmEx) first for 16-bit dtypes
//   PROBE_DEFINES="-DNAME=VALUE ..." adds NVRTC options to every compile of the template.
//   PROBE_CLUSTER_CAP=1 caps a cluster kernel's grid at the clusters that can be resident.
//
// CONFIG is BM,BN,STAGES,SPLIT_K,GROUP,SWAP[,CLUSTER[,SHARE_W[,EPI[,TAIL]]]] for the Hopper kernels
// (sm_90a; EPI 1 is gemm_wgmma_tma_out_kernel), or
// mBM,BN,STAGES[,SPLIT_K] for gemm_mma_kernel (sm_90; PROBE_ARCH=sm_80 etc. for `compile`). DTYPE: bf16,
// f16, e4m3, e5m2. Templates come from $KTUNE_TEMPLATES (default ./kernel_templates). Built
// by CMake as bench target gemm_probe; it runs on a GPU host with the CUDA 13 libraries.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

#define CK(x)                                                                 \
  do {                                                                        \
    CUresult r_ = (x);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                 \
      const char* s_ = nullptr;                                               \
      cuGetErrorString(r_, &s_);                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);     \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)
#define NK(x)                                                                   \
  do {                                                                          \
    nvrtcResult r_ = (x);                                                       \
    if (r_ != NVRTC_SUCCESS) {                                                  \
      std::fprintf(stderr, "%s: %s\n", #x, nvrtcGetErrorString(r_));            \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

struct Config {
  int bm, bn, stages, split, group, swap, cluster = 1, share_w = 0, epi = 0, tail = 0;
  bool mma = false;  // gemm_mma_kernel (sm_90, no 'a'): config "mBM,BN,STAGES[,SPLIT_K]"
  int Threads() const { return mma ? 128 : 128 * (1 + bm / 64); }
  int Smem() const {
    return mma ? stages * (bm + bn) * 40 * 2
               : stages * (bm + bn) * 128 + (epi ? bm / 64 * 16384 : 0) + 1024 + 2 * stages * 8;
  }
  std::string Arch() const { return mma ? "sm_90" : "sm_90a"; }
};

std::string TypeName(const std::string& d) {
  if (d == "bf16") return "__nv_bfloat16";
  if (d == "f16") return "__half";
  if (d == "e4m3") return "__nv_fp8_e4m3";
  if (d == "e5m2") return "__nv_fp8_e5m2";
  std::fprintf(stderr, "unknown dtype %s\n", d.c_str());
  std::exit(2);
}
int ElemBytes(const std::string& d) { return d == "bf16" || d == "f16" ? 2 : 1; }

std::string ReadFile(const std::string& p) {
  std::ifstream f(p);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    std::exit(2);
  }
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string Templates() {
  const char* t = std::getenv("KTUNE_TEMPLATES");
  return t ? t : "kernel_templates";
}

// The probe's own fill kernel: a counter hash mapped to [-1, 1), rounded to T.
const char* kFillSource = R"(
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
template <typename T>
__global__ void probe_fill(T* p, long long count, unsigned seed, float lo, float hi) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    float u = (h >> 8) * (1.0f / 16777216.0f);
    p[i] = T(lo + (hi - lo) * u);
  }
}
// Reads the flush buffer (no writes to leave dirty lines in L2 for the timed kernel to
// write back), so the timed kernel starts with none of its data in L2.
__global__ void probe_flush(const int4* p, long long count, int* sink) {
  int acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) { int4 v = p[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (acc == 0x12345678) *sink = acc;
}
template <typename T>
__global__ void probe_to_float(const T* p, float* f, long long count) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) f[i] = float(p[i]);
}
)";

struct Compiled {
  std::vector<char> cubin;
  std::vector<std::string> lowered;
  double ms = 0;
};

Compiled Compile(const std::string& source, const std::string& name,
                 const std::vector<std::string>& exprs, const std::string& arch,
                 int max_threads) {
  auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog;
  NK(nvrtcCreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr));
  for (auto& e : exprs) NK(nvrtcAddNameExpression(prog, e.c_str()));
  std::vector<std::string> opts = {
      "-std=c++17", "-minimal", "--gpu-architecture=" + arch,
      "--include-path=" + Templates() + "/include", "--include-path=/usr/local/cuda/include",
      "-DKTUNE_MAX_THREADS=" + std::to_string(max_threads), "-DKTUNE_MIN_BLOCKS=1",
      "-DKTUNE_LAUNCH_BOUNDS=__launch_bounds__(" + std::to_string(max_threads) + ", 1)",
      "-Xptxas=-v"};
  // PROBE_DEFINES: more NVRTC options, separated by spaces (e.g. -DNAME=VALUE overrides a
  // template's tuning constant for a side-by-side run).
  if (const char* extra = std::getenv("PROBE_DEFINES")) {
    std::istringstream words(extra);
    for (std::string w; words >> w;) opts.push_back(w);
  }
  std::vector<const char*> o;
  for (auto& s : opts) o.push_back(s.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog, o.size(), o.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    std::fprintf(stderr, "compile failed:\n%s\n", log.c_str());
    std::exit(1);
  }
  Compiled c;
  size_t size = 0;
  NK(nvrtcGetCUBINSize(prog, &size));
  c.cubin.resize(size);
  NK(nvrtcGetCUBIN(prog, c.cubin.data()));
  for (auto& e : exprs) {
    const char* l = nullptr;
    NK(nvrtcGetLoweredName(prog, e.c_str(), &l));
    c.lowered.push_back(l);
  }
  nvrtcDestroyProgram(&prog);
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // ptxas -v lines: registers and spills of the candidate.
  std::istringstream ls(log);
  for (std::string line; std::getline(ls, line);)
    if (line.find("gemm_wgmma") != std::string::npos || line.find("Used") != std::string::npos ||
        line.find("spill") != std::string::npos || line.find("arning") != std::string::npos)
      std::fprintf(stderr, "  %s\n", line.c_str());
  return c;
}

std::string KernelExpr(const std::string& dtype, const Config& c) {
  char b[256];
  if (c.mma) {
    std::snprintf(b, sizeof b, "gemm_mma_kernel<%s, %d, %d, %d, %d>", TypeName(dtype).c_str(),
                  c.bm, c.bn, c.stages, c.split);
    return b;
  }
  if (c.epi) {
    std::snprintf(b, sizeof b, "gemm_wgmma_tma_out_kernel<%s, %d, %d, %d, %d, %d, %d, %d>",
                  TypeName(dtype).c_str(), c.bm, c.bn, c.stages, c.group, c.cluster, c.share_w,
                  c.tail);
    return b;
  }
  std::snprintf(b, sizeof b, "gemm_wgmma_kernel<%s, %d, %d, %d, %d, %d, %d, %d, %d, %d>",
                TypeName(dtype).c_str(), c.bm, c.bn, c.stages, c.split, c.group, c.swap,
                c.cluster, c.share_w, c.tail);
  return b;
}

Config ParseConfig(const char* s) {
  Config c{};
  if (s[0] == 'm') {
    c.mma = true;
    c.split = c.group = 1;
    if (std::sscanf(s + 1, "%d,%d,%d,%d", &c.bm, &c.bn, &c.stages, &c.split) < 3) std::exit(2);
    return c;
  }
  int got = std::sscanf(s, "%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", &c.bm, &c.bn, &c.stages, &c.split,
                        &c.group, &c.swap, &c.cluster, &c.share_w, &c.epi, &c.tail);
  if (got < 6) {
    std::fprintf(stderr, "bad config %s\n", s);
    std::exit(2);
  }
  return c;
}

CUtensorMap MakeMap(CUdeviceptr base, int elem_bytes, long long rows, long long k, int box_rows) {
  CUtensorMap map;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(k * elem_bytes)};
  // 128 bytes of the inner dimension per box (64 columns of out for the TMA-store map).
  cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem_bytes),
                       static_cast<cuuint32_t>(box_rows)};
  cuuint32_t estr[2] = {1, 1};
  CK(cuTensorMapEncodeTiled(&map,
                            elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_UINT8,
                            2, reinterpret_cast<void*>(base), dims, strides, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

struct Problem {
  std::string dtype;
  long long m, n, k;
  CUdeviceptr x, w, out, ref, partial, counters, sx, sw, flush;
  size_t flush_bytes = 512ull << 20;
  CUmodule fill_mod;
  CUfunction fill, to_float_out, flush_fn;
};

void Launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned by, unsigned smem,
            void** args, unsigned gz = 1) {
  CK(cuLaunchKernel(f, gx, gy, gz, bx, by, 1, smem, nullptr, args, nullptr));
}

void Fill(Problem& p, CUfunction f, CUdeviceptr ptr, long long count, unsigned seed, float lo,
          float hi) {
  void* a[] = {&ptr, &count, &seed, &lo, &hi};
  Launch(f, 1024, 1, 256, 1, 0, a);
}

// PROBE_SCALES="SX,SW": both fp8 scales fixed (errors grow with them; atol does not), read
// before any GPU work so that a bad value exits 2 at once; unset: none.
std::optional<std::pair<float, float>> FixedScales() {
  const char* text = std::getenv("PROBE_SCALES");
  if (text == nullptr) return std::nullopt;
  float sx, sw;
  char extra;
  if (std::sscanf(text, "%f,%f%c", &sx, &sw, &extra) != 2 || !(sx > 0) || !(sw > 0)) {
    std::fprintf(stderr, "PROBE_SCALES: '%s' is not SX,SW (two positive numbers)\n", text);
    std::exit(2);
  }
  return std::make_pair(sx, sw);
}

// `scales`: FixedScales(), else the fills' random draws.
Problem Setup(const std::string& dtype, long long m, long long n, long long k,
              const std::optional<std::pair<float, float>>& scales) {
  Problem p{};
  p.dtype = dtype;
  p.m = m, p.n = n, p.k = k;
  int eb = ElemBytes(dtype);
  CK(cuMemAlloc(&p.x, m * k * eb));
  CK(cuMemAlloc(&p.w, n * k * eb));
  CK(cuMemAlloc(&p.out, m * n * 2));
  CK(cuMemAlloc(&p.ref, m * n * 2));
  // Split-K partials: 16 Mi floats whatever the shape, four times the manifest's cap (the
  // probe runs configs the manifest's constraints might exclude, and template copies).
  CK(cuMemAlloc(&p.partial, 16777216ll * 4));
  CK(cuMemAlloc(&p.counters, 4096 * 4));
  CK(cuMemsetD32(p.counters, 0, 4096));
  CK(cuMemAlloc(&p.sx, 4));
  CK(cuMemAlloc(&p.sw, 4));
  CK(cuMemAlloc(&p.flush, p.flush_bytes));
  std::string tn = TypeName(dtype);
  std::string out_tn = eb == 1 ? "__nv_bfloat16" : tn;
  std::vector<std::string> exprs = {"probe_fill<" + tn + ">", "probe_fill<float>",
                                    "probe_to_float<" + out_tn + ">", "probe_flush"};
  Compiled c = Compile(kFillSource, "fill.cu", exprs, "sm_90", 256);
  CK(cuModuleLoadData(&p.fill_mod, c.cubin.data()));
  CUfunction fill_t, fill_f;
  CK(cuModuleGetFunction(&fill_t, p.fill_mod, c.lowered[0].c_str()));
  CK(cuModuleGetFunction(&fill_f, p.fill_mod, c.lowered[1].c_str()));
  CK(cuModuleGetFunction(&p.to_float_out, p.fill_mod, c.lowered[2].c_str()));
  CK(cuModuleGetFunction(&p.flush_fn, p.fill_mod, c.lowered[3].c_str()));
  CK(cuMemsetD8(p.flush, 1, p.flush_bytes));
  Fill(p, fill_t, p.x, m * k, 17, -1, 1);
  Fill(p, fill_t, p.w, n * k, 29, -1, 1);
  Fill(p, fill_f, p.sx, 1, 3, 0.5, 2);
  Fill(p, fill_f, p.sw, 1, 5, 0.5, 2);
  if (scales) {
    CK(cuMemcpyHtoD(p.sx, &scales->first, 4));
    CK(cuMemcpyHtoD(p.sw, &scales->second, 4));
  }
  CK(cuCtxSynchronize());
  return p;
}

struct Kernel {
  CUmodule mod;
  CUfunction f, ref;
  Config c;
  double compile_ms;
};

Kernel Build(const std::string& dtype, const Config& c) {
  std::string src = ReadFile(Templates() + "/gemm/gemm.cu");
  std::vector<std::string> exprs = {KernelExpr(dtype, c),
                                    "gemm_reference<" + TypeName(dtype) + ">"};
  Compiled comp = Compile(src, "gemm.cu", exprs, c.Arch(), c.Threads());
  Kernel k{};
  k.c = c;
  k.compile_ms = comp.ms;
  CK(cuModuleLoadData(&k.mod, comp.cubin.data()));
  CK(cuModuleGetFunction(&k.f, k.mod, comp.lowered[0].c_str()));
  CK(cuModuleGetFunction(&k.ref, k.mod, comp.lowered[1].c_str()));
  CK(cuFuncSetAttribute(k.f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, c.Smem()));
  return k;
}

int SmCount() {
  CUdevice d;
  CK(cuCtxGetDevice(&d));
  int v;
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
  return v;
}

// A cluster kernel's persistent grid: as the manifest sizes it (SMs / CLUSTER clusters), or
// with PROBE_CLUSTER_CAP=1 no more clusters than the driver says can be resident at once
// (cuOccupancyMaxActiveClusters): clusters past that run only after others finish their
// whole walk. Asked once per kernel (not per timed launch) and printed then.
unsigned ClusterGrid(const Kernel& k, unsigned grid) {
  static std::map<CUfunction, int> resident;
  static const bool capped = [] {
    const char* cap = std::getenv("PROBE_CLUSTER_CAP");
    return cap && std::string(cap) == "1";
  }();
  auto it = resident.find(k.f);
  if (it == resident.end()) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = k.c.cluster;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = k.c.Threads();
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = k.c.Smem();
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int active = 0;
    CK(cuOccupancyMaxActiveClusters(&active, k.f, &cfg));
    it = resident.emplace(k.f, active).first;
    std::fprintf(stderr, "clusters of %d: %d resident at most%s\n", k.c.cluster, active,
                 capped ? " (grid capped there)" : "");
  }
  return capped ? std::min<unsigned>(grid, static_cast<unsigned>(it->second) * k.c.cluster)
                : grid;
}

void RunCandidate(const Kernel& k, Problem& p) {
  const Config& c = k.c;
  if (c.mma) {
    int m = p.m, n = p.n, kk = p.k;
    void* a[] = {&p.x, &p.w, &p.out, &p.partial, &p.counters, &p.sx, &p.sw, &m, &n, &kk};
    Launch(k.f, (p.n + c.bn - 1) / c.bn, (p.m + c.bm - 1) / c.bm, 128, 1, c.Smem(), a, c.split);
    return;
  }
  int eb = ElemBytes(p.dtype);
  long long rows_p = c.swap ? p.n : p.m, rows_q = c.swap ? p.m : p.n;
  // The cluster's neighbours lie along p (sharing B's tile) or along q (sharing A's).
  bool along_p = c.swap ? !c.share_w : c.share_w;
  CUtensorMap ma =
      MakeMap(c.swap ? p.w : p.x, eb, rows_p, p.k, along_p ? c.bm : c.bm / c.cluster);
  CUtensorMap mb =
      MakeMap(c.swap ? p.x : p.w, eb, rows_q, p.k, along_p ? c.bn / c.cluster : c.bn);
  long long tp = (rows_p + c.bm - 1) / c.bm, tq = (rows_q + c.bn - 1) / c.bn;
  if (along_p) tp = (tp + c.cluster - 1) / c.cluster; else tq = (tq + c.cluster - 1) / c.cluster;
  long long units = tp * tq * c.split;
  unsigned grid =
      static_cast<unsigned>(std::min<long long>(units, SmCount() / c.cluster) * c.cluster);
  if (c.cluster > 1) grid = ClusterGrid(k, grid);
  int m = p.m, n = p.n, kk = p.k;
  if (c.epi) {
    // out as [m rows, n columns], boxes of 64 columns x 16 rows (its element type is 2
    // bytes: bf16 bits are all the map needs to move).
    CUtensorMap mo = MakeMap(p.out, 2, p.m, p.n, 16);
    void* a[] = {&ma, &mb, &mo, &p.partial, &p.counters, &p.sx, &p.sw, &m, &n, &kk};
    Launch(k.f, grid, 1, c.Threads(), 1, c.Smem(), a);
    return;
  }
  void* a[] = {&ma, &mb, &p.out, &p.partial, &p.counters, &p.sx, &p.sw, &m, &n, &kk};
  Launch(k.f, grid, 1, c.Threads(), 1, c.Smem(), a);
}

void RunReference(const Kernel& k, Problem& p) {
  int m = p.m, n = p.n, kk = p.k;
  void* a[] = {&p.x, &p.w, &p.ref, &p.sx, &p.sw, &m, &n, &kk};
  Launch(k.ref, (n + 15) / 16, (m + 15) / 16, 16, 16, 0, a);
}

std::vector<float> ToHost(Problem& p, CUdeviceptr src) {
  long long count = p.m * p.n;
  CUdeviceptr f;
  CK(cuMemAlloc(&f, count * 4));
  void* a[] = {&src, &f, &count};
  Launch(p.to_float_out, 1024, 1, 256, 1, 0, a);
  std::vector<float> h(count);
  CK(cuMemcpyDtoH(h.data(), f, count * 4));
  CK(cuMemFree(f));
  return h;
}

// Returns the number of elements outside atol + rtol * |ref|; *worst is the largest error
// over its element's bound (1: at the bar).
long long Check(const Kernel& k, Problem& p, double* max_err, double* worst) {
  RunReference(k, p);
  CK(cuMemsetD16(p.out, 0x7fc0, p.m * p.n));  // NaN poison (bf16 / f16 both NaN)
  RunCandidate(k, p);
  CK(cuCtxSynchronize());
  std::vector<float> got = ToHost(p, p.out), want = ToHost(p, p.ref);
  double atol = (ElemBytes(p.dtype) == 1 ? 1.2e-3 : 1e-4) * std::sqrt(static_cast<double>(p.k)),
         rtol = 1.6e-2;
  long long bad = 0;
  *max_err = 0;
  *worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::fabs(got[i] - want[i]);
    *worst = std::max(*worst, e / (atol + rtol * std::fabs(want[i])));
    if (!(e <= atol + rtol * std::fabs(want[i]))) {
      if (bad < 5)
        std::fprintf(stderr, "  mismatch at %zu (m %lld n %lld): got %g want %g\n", i,
                     static_cast<long long>(i) / p.n, static_cast<long long>(i) % p.n, got[i],
                     want[i]);
      ++bad;
    }
    if (e > *max_err || std::isnan(e)) *max_err = e;
  }
  // Run twice more: the split-K counters must be back at zero.
  RunCandidate(k, p);
  RunCandidate(k, p);
  CK(cuCtxSynchronize());
  std::vector<float> again = ToHost(p, p.out);
  for (size_t i = 0; i < got.size(); ++i)
    if (!(again[i] == got[i]) && !(std::isnan(again[i]) && std::isnan(got[i]))) {
      std::fprintf(stderr, "  rerun differs at %zu: %g vs %g\n", i, again[i], got[i]);
      ++bad;
      break;
    }
  return bad;
}

template <typename F>
double TimeMedianUs(Problem& p, F run, int reps = 30) {
  CUevent a, b;
  CK(cuEventCreate(&a, 0));
  CK(cuEventCreate(&b, 0));
  std::vector<float> t;
  for (int i = 0; i < 3; ++i) run();
  for (int i = 0; i < reps; ++i) {
    long long n16 = static_cast<long long>(p.flush_bytes / 16);
    CUdeviceptr sink = p.counters + 4000 * 4;
    void* fa[] = {&p.flush, &n16, &sink};
    Launch(p.flush_fn, 132 * 4, 1, 512, 1, 0, fa);
    CK(cuEventRecord(a, nullptr));
    run();
    CK(cuEventRecord(b, nullptr));
    CK(cuEventSynchronize(b));
    float ms;
    CK(cuEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000);
  }
  std::sort(t.begin(), t.end());
  cuEventDestroy(a);
  cuEventDestroy(b);
  return t[t.size() / 2];
}

double CublasUs(Problem& p) {
  static cublasHandle_t h = nullptr;
  if (!h) cublasCreate(&h);
  cudaDataType t = p.dtype == "bf16" ? CUDA_R_16BF : CUDA_R_16F;
  float alpha = 1, beta = 0;
  return TimeMedianUs(p, [&] {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, p.n, p.m, p.k, &alpha,
                 reinterpret_cast<void*>(p.w), t, p.k, reinterpret_cast<void*>(p.x), t, p.k,
                 &beta, reinterpret_cast<void*>(p.out), t, p.n, CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT);
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: see the header of gemm_probe.cc\n");
    return 2;
  }
  std::string mode = argv[1], dtype = argv[2];
  if (mode == "compile") {
    for (int i = 3; i < argc; ++i) {
      Config c = ParseConfig(argv[i]);
      std::string src = ReadFile(Templates() + "/gemm/gemm.cu");
      const char* arch = std::getenv("PROBE_ARCH");
      Compiled comp = Compile(src, "gemm.cu", {KernelExpr(dtype, c)}, arch ? arch : c.Arch(),
                              c.Threads());
      std::printf("compile %s %s: %.0f ms, %zu bytes\n", dtype.c_str(), argv[i], comp.ms,
                  comp.cubin.size());
    }
    return 0;
  }
  const std::optional<std::pair<float, float>> scales = FixedScales();
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  long long m = std::atoll(argv[3]), n = std::atoll(argv[4]), k = std::atoll(argv[5]);
  Problem p = Setup(dtype, m, n, k, scales);
  double flops = 2.0 * m * n * k;
  double bytes = (m * k + n * k) * ElemBytes(dtype) + m * n * 2.0;
  if (mode == "time" && dtype != "e4m3" && dtype != "e5m2") {
    double us = CublasUs(p);
    std::printf("RESULT cublas %s m=%lld n=%lld k=%lld %.2f us %.0f TFLOP/s %.0f GB/s\n",
                dtype.c_str(), m, n, k, us, flops / us / 1e6, bytes / us / 1e3);
  }
  for (int i = 6; i < argc; ++i) {
    Kernel kern = Build(dtype, ParseConfig(argv[i]));
    if (mode == "check") {
      double err, worst;
      long long bad = Check(kern, p, &err, &worst);
      std::printf("RESULT check %s m=%lld n=%lld k=%lld cfg=%s: %s (%lld bad, max err %g, "
                  "worst err / bound %.3f)\n",
                  dtype.c_str(), m, n, k, argv[i], bad ? "FAIL" : "ok", bad, err, worst);
    } else {
      double us = TimeMedianUs(p, [&] { RunCandidate(kern, p); });
      std::printf("RESULT ktune %s m=%lld n=%lld k=%lld cfg=%s %.2f us %.0f TFLOP/s %.0f GB/s\n",
                  dtype.c_str(), m, n, k, argv[i], us, flops / us / 1e6, bytes / us / 1e3);
    }
    cuModuleUnload(kern.mod);
  }
  return 0;
}
