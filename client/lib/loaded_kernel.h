// LoadedKernel: a KernelArtifact's cubin loaded into the caller's current CUDA context,
// its kernels looked up, ready to launch with the artifact's geometry and scalars.
//
//   // With the context current on this thread (cuCtxSetCurrent / cudaSetDevice):
//   ASSIGN_OR_RETURN(auto kernel, LoadedKernel::Load(artifact));
//   RETURN_IF_ERROR(kernel->Launch(stream, {{"x", x_ptr}, {"weight", w_ptr}, {"out", o_ptr}}));
//
// The driver is loaded at run time (cuda_api.h): a process without one gets kUnavailable
// from Load, never a loader error at start. Modules are memoized per (context, cubin
// sha256) in a process-wide cache guarded by a mutex, so loading the same artifact twice in
// one context shares one CUmodule; the module is unloaded when its last LoadedKernel goes.
//
// REQUIRES: every LoadedKernel of a context is destroyed before that context is.
// Thread-safety: Load is safe from any thread. Launch is const and safe from many threads
// at once, each with the kernel's context current. The destructor never throws.
#ifndef KTUNE_CLIENT_LIB_LOADED_KERNEL_H_
#define KTUNE_CLIENT_LIB_LOADED_KERNEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/lib/cuda_api.h"
#include "client/lib/ktune_client.h"

namespace ktune::client {

struct LoadOptions {
  // Whether the artifact's programmatic launches (KernelLaunch::programmatic) go through
  // cuLaunchKernelEx with programmatic stream serialization, so each kernel may start while
  // the one before it in the stream finishes; every other launch is plain. Unset: as
  // KTUNE_PROGRAMMATIC_LAUNCH says (1 on, 0 off), else off (the default until a GPU host has
  // measured it). Without cuLaunchKernelEx in the driver, plain.
  std::optional<bool> programmatic;
};

class LoadedKernel {
 public:
  // Checks the cubin's sha256 (kDataLoss), the launches (kInvalidArgument naming the
  // launch or arg: 3-value grid and block, arg indices in range, known scalar types, tensor
  // maps that cover a buffer arg and obey the driver's rules), then
  // loads the cubin into the calling thread's current context, gets every launch's
  // function (kNotFound naming a missing one) and raises
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES where a launch wants above 48 KiB.
  // kUnavailable without a driver, or for an artifact with a tensor map on a driver without
  // cuTensorMapEncodeTiled; kFailedPrecondition without a current context.
  static absl::StatusOr<std::unique_ptr<LoadedKernel>> Load(const KernelArtifact& artifact,
                                                            const LoadOptions& options = {});
  // The same through `api` (a fake in tests; LoadCudaApi()'s otherwise), which must outlive
  // the kernel.
  static absl::StatusOr<std::unique_ptr<LoadedKernel>> Load(const KernelArtifact& artifact,
                                                            const CudaApi& api,
                                                            const LoadOptions& options = {});

  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  // Runs the artifact's launches in order on `stream` (a CUstream; nullptr: the legacy
  // default stream), asynchronously. `buffers` has one entry per artifact arg, by index:
  // the device address (a CUdeviceptr cast to void*) of each buffer arg; entries of scalar
  // args are ignored (pass nullptr). Scalars come from the artifact. kInvalidArgument for
  // a wrong count, a null buffer or one off its arg's alignment (16 bytes for most: the
  // kernels' vector loads would fault on it, ending the context); kFailedPrecondition
  // unless the kernel's context is current on this thread. The caller owns zeroing
  // SCRATCH buffers with a ZERO fill.
  // Tensor-map args (scalar_type "tensor_map") take no entry of their own (pass nullptr):
  // each is encoded with cuTensorMapEncodeTiled from its buffer's pointer (which must be
  // 16-byte aligned) and passed by value.
  absl::Status Launch(void* stream, const std::vector<void*>& buffers) const;
  // The same with buffers by arg name; every buffer arg must be named, and nothing else.
  absl::Status Launch(void* stream, const std::map<std::string, void*>& buffers) const;

  // The CUcontext it was loaded into.
  void* context() const;
  const std::vector<KernelArg>& args() const { return args_; }

 private:
  struct Module;
  struct ResolvedLaunch {
    void* function = nullptr;  // CUfunction
    uint32_t grid[3] = {1, 1, 1};
    uint32_t block[3] = {1, 1, 1};
    uint32_t shared_bytes = 0;
    std::vector<int32_t> args;
    // The artifact's, where LoadOptions allow it and the driver has cuLaunchKernelEx.
    bool programmatic = false;
  };
  LoadedKernel() = default;
  // The checks and packing that need no driver (the artifact, scalars, tensor maps).
  static absl::StatusOr<std::unique_ptr<LoadedKernel>> Prepare(const KernelArtifact& artifact);
  // The module into the current context and every launch's function, through `api`.
  absl::Status LoadInto(const KernelArtifact& artifact, const CudaApi& api,
                        const LoadOptions& options);
  // Enqueues launch `l` (the artifact's `n`th) on `stream` with its kernelParams.
  absl::Status Enqueue(const ResolvedLaunch& l, size_t n, void* stream, void** params) const;

  std::shared_ptr<Module> module_;
  std::vector<ResolvedLaunch> launches_;
  std::vector<KernelArg> args_;
  // The tensor-map args some launch takes, by index: encoded at every Launch. A template's
  // map that no launch of this artifact names (another path's) is neither checked nor built.
  std::vector<size_t> map_args_;
  // Per arg: the scalar's bytes as the kernel takes them (unused for buffers).
  std::vector<uint64_t> scalar_values_;
};

}  // namespace ktune::client

#endif  // KTUNE_CLIENT_LIB_LOADED_KERNEL_H_
