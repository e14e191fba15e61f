// KtuneClient: the typed C++ client of ktuned (proto/ktune/v1/ktune.proto), for inference
// servers. GetKernel answers with a KernelArtifact, a plain struct holding the cubin, its
// sha256 (checked on receipt) and the launches ready for LoadedKernel (loaded_kernel.h).
//
//   ASSIGN_OR_RETURN(auto client, ktune::client::Connect("unix:///run/ktune/ktuned.sock", {}));
//   ASSIGN_OR_RETURN(KernelArtifact a, client->GetKernel({"rmsnorm", "bf16",
//                                        {{"tokens", 4096}, {"hidden", 8192}}}));
//
// Proto messages stop at this edge: nothing here exposes a protobuf or gRPC type. Errors are
// the daemon's gRPC status as an absl::Status with the same code and message (see
// ktune.proto's header for what each code means); kDataLoss when an artifact's cubin does
// not match its sha256; kUnavailable naming the target when the daemon cannot be reached.
//
// Thread-safety: a KtuneClient is safe for concurrent calls from many threads (one gRPC
// channel, multiplexed). Connect never blocks on the network: a missing daemon shows on
// the first call.
#ifndef KTUNE_CLIENT_LIB_KTUNE_CLIENT_H_
#define KTUNE_CLIENT_LIB_KTUNE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ktune::client {

// Named dims and their sizes, e.g. {tokens: 4096, hidden: 8192}.
using Shape = std::map<std::string, int64_t>;

// The most keys the daemon takes in one GetKernels call (ktune.proto's MAX_KERNELS_PER_CALL).
inline constexpr int kMaxKernelsPerCall = 256;

// What GetKernel does on a miss; see ktune.proto's Policy.
enum class Policy { kUnspecified = 0, kCacheOnly = 1, kTune = 2, kFallback = 3 };
// Where an artifact came from; see ktune.proto's Provenance.
enum class Provenance { kUnspecified = 0, kExact = 1, kNearest = 2, kDefault = 3 };
enum class BufferRole { kUnspecified = 0, kInput = 1, kOutput = 2, kInOut = 3, kScratch = 4 };
// A SCRATCH buffer's fill: kZero means zero it before each run, kZeroOnce once when it is
// allocated (the kernels leave it zeroed after every complete run).
enum class FillKind {
  kUnspecified = 0,
  kUniform = 1,
  kNormal = 2,
  kConstant = 3,
  kZero = 4,
  kZeroOnce = 5
};

// "cache_only", "tune", "fallback", "unspecified"; and back (kInvalidArgument otherwise).
const char* PolicyName(Policy policy);
absl::StatusOr<Policy> ParsePolicy(const std::string& name);
// "exact", "nearest", "default", "unspecified".
const char* ProvenanceName(Provenance provenance);

// One kernel launch, in launch order.
struct KernelLaunch {
  std::string lowered_name;            // for cuModuleGetFunction
  std::vector<uint32_t> grid;          // 3 values
  std::vector<uint32_t> block;         // 3 values
  uint32_t shared_bytes = 0;           // dynamic shared memory, bytes
  std::vector<int32_t> args;           // indices into KernelArtifact::args, in param order
  // May start while the kernel before it in the stream finishes (it waits for that
  // kernel's results itself): LoadedKernel launches it with programmatic stream
  // serialization where the driver has cuLaunchKernelEx.
  bool programmatic = false;
};

// A CUDA tensor map (CUtensorMap) over one of the artifact's buffer args, described by
// value: LoadedKernel builds it with cuTensorMapEncodeTiled from the caller's pointer for
// that buffer at every launch. Enum fields carry the CUDA driver's values.
struct TensorMapArg {
  std::string buffer;   // the buffer arg's name
  int32_t buffer_arg = -1;  // its index in KernelArtifact::args
  std::string dtype;    // element type, the buffer's
  std::vector<int64_t> dims;             // elements, innermost first (rank 1..5)
  std::vector<int64_t> strides;          // bytes of dims[1..] (rank - 1)
  std::vector<int64_t> box;              // elements per copy (rank)
  std::vector<int64_t> element_strides;  // rank values
  int swizzle = 0;       // CUtensorMapSwizzle
  int interleave = 0;    // CUtensorMapInterleave
  int l2_promotion = 0;  // CUtensorMapL2promotion
  int oob_fill = 0;      // CUtensorMapFloatOOBfill
};

// A device buffer the caller provides (is_buffer), a scalar ktune fixed for the shape, or a
// tensor map over a buffer (scalar_type "tensor_map").
struct KernelArg {
  std::string name;
  bool is_buffer = false;
  // Buffers: element type ("f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i32"), elements (not
  // bytes), role; a
  // SCRATCH buffer with kZero fill must be zeroed by the caller before each run.
  std::string dtype;
  int64_t count = 0;
  BufferRole role = BufferRole::kUnspecified;
  FillKind scratch_fill = FillKind::kUnspecified;
  // Buffers: the byte alignment the kernels need of the device address (a power of two;
  // LoadedKernel::Launch refuses a pointer off it). 0 from a daemon that predates it.
  int alignment = 0;
  // Scalars: "i32", "i64" or "f32"; int_value for integers, number for f32.
  std::string scalar_type;
  int64_t int_value = 0;
  double number = 0;
  // Set iff scalar_type == "tensor_map".
  TensorMapArg tensor_map;
};

struct Knobs {
  int64_t maxrregcount = 0;  // 0: no register cap
  int64_t min_blocks = 0;
  bool fast_math = false;
  std::string target;  // "sm_90", "sm_90a"
};

// Measured on the GPU it was tuned on; all zero for Provenance::kDefault.
struct KernelMetrics {
  double time_ns = 0;  // median of one run (all launches)
  double spread_ns = 0;
  int64_t registers = 0;
  int64_t spill_bytes = 0;
  double occupancy = 0;
  double gbps = 0;
  double gflops = 0;
  double ceiling_fraction = 0;
  // The template's default config's time in the same job (ns): the speed-up's baseline;
  // 0 when not measured.
  double default_time_ns = 0;
};

// ktune.v1.KernelArtifact as a plain value.
struct KernelArtifact {
  std::string cubin;
  std::string cubin_sha256;  // lowercase hex; checked by GetKernel/Tune and LoadedKernel
  std::vector<KernelLaunch> launches;
  std::vector<KernelArg> args;
  std::map<std::string, int64_t> params;
  Knobs knobs;
  KernelMetrics metrics;
  Provenance provenance = Provenance::kUnspecified;
  // The key it was made for (for kNearest: the neighbour's shape).
  std::string device_model;
  std::string template_id;
  std::string dtype;
  Shape shape;
  std::string template_source_hash;
  std::string nvrtc_version;
  bool stale = false;
  int64_t entry_id = 0;         // 0 unless read from the store
  int64_t created_unix_ms = 0;  // 0 unless read from the store
  // From GetKernelResponse, not the artifact: the tuning job this call started or joined;
  // 0 if none.
  int64_t tuning_job_id = 0;
};

struct KernelRequest {
  std::string template_id;  // required
  std::string dtype;        // "f32", "f16", "bf16"; required
  Shape shape;              // every dim of the template
  Policy policy = Policy::kCacheOnly;
  int32_t gpu = 0;  // ordinal among the daemon's visible GPUs
  // This call's deadline; zero: ClientOptions::default_deadline.
  absl::Duration deadline = absl::ZeroDuration();
};

struct TuneRequest {
  std::string template_id;
  std::string dtype;
  Shape shape;
  int32_t gpu = 0;
  std::string strategy;  // "guided" (empty), "exhaustive" or "random"
  int64_t budget = 0;    // most candidates to measure; 0: the strategy's default
  bool force = false;    // re-tune even when a fresh entry exists
  double time_s = 0;     // stop starting candidates after this; 0: no limit
  // Guided: stop when the next batch is expected to gain less (unset: the daemon's 0.01).
  std::optional<double> min_gain;
  // Guided and random: stop at this fraction of the roofline (unset: 1.0; 0: never).
  std::optional<double> roofline_stop;
  bool warm_start = true;  // guided: start from neighbouring keys' winners
  // A daemon with a fleet tier: ABORTED at once when another host is tuning the key,
  // instead of waiting for its winner.
  bool yield_to_lease = false;
  // Tuning takes minutes: zero means no deadline here (not the client's default).
  absl::Duration deadline = absl::ZeroDuration();
};

struct TuneProgress {
  int64_t job_id = 0;
  int64_t done = 0;
  int64_t total = 0;
  double elapsed_s = 0;
  double eta_s = 0;  // 0 until the first candidate is done
  std::map<std::string, int64_t> best_params;  // empty if none yet
  double best_time_ns = 0;                     // 0 if none yet
  std::string last_outcome;
};

struct TemplateDim {
  std::string name;
  int64_t min = 0;
  int64_t max = 0;  // 0: no bound beyond int32
  int64_t example = 0;
};
struct TemplateParam {
  std::string name;
  std::string description;
  std::vector<int64_t> values;
  int64_t default_value = 0;
};
struct TemplateInfo {
  std::string name;
  std::string description;
  std::vector<std::string> dtypes;
  std::vector<TemplateDim> dims;
  std::vector<TemplateParam> params;
  std::string source_hash;
};
struct TemplateList {
  std::vector<TemplateInfo> templates;
  std::vector<std::string> errors;  // templates that did not load
};

// One GPU of the daemon (ktune.v1.Device with its DeviceInfo flattened in).
struct Device {
  int32_t ordinal = 0;
  std::string name;
  int32_t cc_major = 0;
  int32_t cc_minor = 0;
  int32_t sm_count = 0;
  int64_t total_memory_bytes = 0;
  std::string uuid;
  std::string driver_version;
  std::string model_key;
  double copy_gbps = 0;  // 0 until measured
  bool healthy = false;
  std::string status;  // why not healthy
};
struct DeviceList {
  std::vector<Device> devices;
  bool compile_only = false;  // the daemon has no usable GPU
};

struct ClientOptions {
  // Sent as "authorization: Bearer <token>" on every call; empty: none.
  std::string bearer_token;
  // TLS: used when use_tls or any PEM below is set. Empty root certs: gRPC's defaults.
  // A client cert chain and key together give mTLS.
  bool use_tls = false;
  std::string tls_root_certs_pem;
  std::string tls_client_cert_chain_pem;
  std::string tls_client_key_pem;
  // Per-call deadline unless a request sets its own; absl::InfiniteDuration(): none.
  absl::Duration default_deadline = absl::Seconds(30);
  // Largest response accepted; above the largest cubin.
  int max_receive_message_bytes = 256 << 20;
};

class KtuneClient {
 public:
  virtual ~KtuneClient() = default;

  // The artifact, its sha256 checked (kDataLoss otherwise).
  virtual absl::StatusOr<KernelArtifact> GetKernel(const KernelRequest& request) = 0;

  // Many keys at once (the GetKernels RPC; split over several calls past the daemon's
  // kMaxKernelsPerCall, and asked again for answers it left for another call): one result
  // per request, in order, each what GetKernel would have returned (sha256 checked), its
  // message naming the request's index here ("requests[3].shape: ..."). The call's deadline
  // is the longest of the requests' (zero: the client's default). The outer status fails
  // only when no key could be asked (kUnavailable naming the target, kUnauthenticated, a
  // deadline). A daemon that predates GetKernels is asked key by key. No requests: none.
  virtual absl::StatusOr<std::vector<absl::StatusOr<KernelArtifact>>> GetKernels(
      const std::vector<KernelRequest>& requests) = 0;

  // Calls `on_progress` for each progress event, in order, on the calling thread, then
  // returns the final artifact (sha256 checked). `on_progress` returning false cancels the
  // call (kCancelled); the daemon's job goes on for other callers. kInternal if the stream
  // ends without an artifact.
  virtual absl::StatusOr<KernelArtifact> Tune(
      const TuneRequest& request, const std::function<bool(const TuneProgress&)>& on_progress) = 0;

  virtual absl::StatusOr<TemplateList> ListTemplates() = 0;
  virtual absl::StatusOr<DeviceList> GetDevices() = 0;

  // What Connect was given, e.g. "unix:///run/ktune/ktuned.sock".
  virtual const std::string& target() const = 0;
};

// A client of the daemon at `target`: "unix:///absolute/path" or "host:port" (any gRPC
// target). kInvalidArgument for an empty target or a client key without a cert chain (and
// vice versa). Does not wait for the daemon.
absl::StatusOr<std::unique_ptr<KtuneClient>> Connect(const std::string& target,
                                                     const ClientOptions& options);

// Where `ktune get` looks for ktuned when not told: $KTUNE_DAEMON, else
// unix://$XDG_RUNTIME_DIR/ktune/ktuned.sock, else unix:///tmp/ktune-$UID/ktuned.sock.
std::string DefaultDaemonTarget();

// kDataLoss naming both digests unless sha256(artifact.cubin) == artifact.cubin_sha256.
absl::Status VerifyArtifact(const KernelArtifact& artifact);

}  // namespace ktune::client

#endif  // KTUNE_CLIENT_LIB_KTUNE_CLIENT_H_
