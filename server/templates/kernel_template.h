// A kernel template loaded from kernel_templates/NAME/: its manifest, validated, with every
// expression parsed once, and its CUDA source.
//
// Immutable after LoadKernelTemplate; safe to share between threads.
#ifndef KTUNE_SERVER_TEMPLATES_KERNEL_TEMPLATE_H_
#define KTUNE_SERVER_TEMPLATES_KERNEL_TEMPLATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ktune/v1/manifest.pb.h"
#include "server/base/dtype.h"
#include "server/templates/expression.h"

namespace ktune {

// Identifiers every expression may name beside the dims and params (manifest.proto).
inline constexpr const char* kKnobIdentifiers[] = {
    "KTUNE_MAXRREG",  "KTUNE_MIN_BLOCKS",     "KTUNE_FAST_MATH",  "KTUNE_SM",
    "KTUNE_MAX_THREADS", "KTUNE_SM_COUNT", "KTUNE_THREADS_PER_SM", "KTUNE_REGS_PER_SM",
    "KTUNE_ARCH_SPECIFIC"};

// Of those, the ones that differ between the knob choices of one target: a config's knobs
// (maxrregcount, min_blocks, fast_math, the sm_XY or sm_XYa target) and the block size
// bound beside them.
inline constexpr const char* kPerKnobIdentifiers[] = {
    "KTUNE_MAXRREG", "KTUNE_MIN_BLOCKS", "KTUNE_FAST_MATH", "KTUNE_ARCH_SPECIFIC",
    "KTUNE_MAX_THREADS"};

// A buffer's device-address alignment in bytes when its manifest leaves it unset (0): the
// widest vector access of any template (16-byte loads, TMA's global address); and the most
// a manifest may ask.
inline constexpr int kDefaultBufferAlignment = 16;
inline constexpr int kMaxBufferAlignment = 256;

// The alignment the kernels need of `buffer`'s address. REQUIRES: a validated manifest's.
inline int BufferAlignment(const v1::Buffer& buffer) {
  return buffer.alignment() > 0 ? buffer.alignment() : kDefaultBufferAlignment;
}

// A buffer's element type for request dtype `request`: its dtype_for entry, else its
// `dtype` ("dtype" meaning `request`). REQUIRES: a validated manifest's buffer.
DType BufferDType(const v1::Buffer& buffer, DType request);

class KernelTemplate {
 public:
  const std::string& name() const { return manifest_.name(); }
  const v1::TemplateManifest& manifest() const { return manifest_; }
  // The .cu file's bytes, what NVRTC compiles.
  const std::string& source() const { return source_; }
  // "kernel_templates/rmsnorm/rmsnorm.cu", for NVRTC's diagnostics.
  const std::string& source_path() const { return source_path_; }
  // sha256 over the .cu, the manifest and the shared headers the registry was given:
  // whatever changes a candidate's binary or its meaning. Entries made from another hash
  // are stale.
  const std::string& source_hash() const { return source_hash_; }
  const std::vector<DType>& dtypes() const { return dtypes_; }
  bool SupportsDType(DType t) const;

  // Evaluates one of the manifest's expressions (by its text, as it appears in the
  // manifest). REQUIRES: `text` is an expression of this manifest (an empty text of an
  // optional field evaluates to its default, given by the caller's `if_empty`).
  absl::StatusOr<int64_t> Evaluate(const std::string& text, const Scope& scope,
                                   int64_t if_empty = 0) const;

  // Whether the manifest's constraints[i] reads none of kPerKnobIdentifiers, so its value
  // is the same for every knob choice of a param point. REQUIRES: i < constraints_size().
  bool ConstraintReadsNoKnob(int i) const { return constraint_reads_no_knob_[i]; }
  // Whether the manifest's constraints[i] reads identifier `id` (a param, a dim, a knob).
  // REQUIRES: i < constraints_size().
  bool ConstraintReads(int i, const std::string& id) const;
  // The manifest's constraints[i], parsed: what Evaluate(constraints(i), ...) evaluates,
  // without finding it by its text. REQUIRES: i < constraints_size().
  const Expression& Constraint(int i) const { return *constraints_[static_cast<size_t>(i)]; }

 private:
  friend absl::StatusOr<std::shared_ptr<const KernelTemplate>> LoadKernelTemplate(
      const std::string& dir, const std::string& shared_headers_digest);
  KernelTemplate() = default;

  v1::TemplateManifest manifest_;
  std::string source_;
  std::string source_path_;
  std::string source_hash_;
  std::vector<DType> dtypes_;
  absl::flat_hash_map<std::string, Expression> expressions_;
  std::vector<bool> constraint_reads_no_knob_;  // per manifest constraint
  // Per manifest constraint: its entry of expressions_, which nothing changes after load.
  std::vector<const Expression*> constraints_;
};

// Loads and validates the template in folder `dir` (NAME/NAME.textproto and NAME/NAME.cu).
// `shared_headers_digest` goes into source_hash (the registry passes a digest of the shared
// include folder). kInvalidArgument on any defect, starting with "FILE:LINE: " and naming
// the field and the reason, e.g.
//   "kernel_templates/rmsnorm/rmsnorm.textproto:31: launches[0].grid.x: unknown identifier
//    'rows' in 'rows'".
absl::StatusOr<std::shared_ptr<const KernelTemplate>> LoadKernelTemplate(
    const std::string& dir, const std::string& shared_headers_digest = "");

}  // namespace ktune

#endif  // KTUNE_SERVER_TEMPLATES_KERNEL_TEMPLATE_H_
