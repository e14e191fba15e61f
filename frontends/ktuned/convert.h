// The edge between proto messages (ktune.proto) and ktune's plain C++ values, and the one
// mapping from absl::Status to grpc::Status. Every conversion of the service lives here, so
// the handlers never read a proto field past validation.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_SERVICE_CONVERT_H_
#define KTUNE_SERVER_SERVICE_CONVERT_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "ktune/v1/ktune.pb.h"
#include "server/base/knobs.h"
#include "server/base/trial_metrics.h"
#include "server/store/store.h"
#include "server/templates/instance.h"
#include "server/templates/kernel_template.h"
#include "server/tuning/tuning_queue.h"

namespace ktune {

// The most a status message carries to a caller; a longer one (a compiler log, an echo of
// a huge input) is cut, and written whole to stderr, ktuned's log.
inline constexpr size_t kMaxStatusMessageBytes = 4096;

// Same code (the two enums agree number for number), same message up to
// kMaxStatusMessageBytes.
grpc::Status ToGrpcStatus(const absl::Status& status);

v1::Knobs ToProto(const Knobs& knobs);
v1::KernelMetrics ToProto(const TrialMetrics& metrics);
v1::KernelArg ToProto(const BoundArg& arg);
v1::TuneProgress ToProto(const JobProgress& progress);
v1::TemplateInfo ToProto(const KernelTemplate& tmpl);
// `stale`: computed by the caller against its current template and NVRTC version.
v1::EntrySummary ToProto(const store::EntrySummary& entry, bool stale);

// The artifact of `entry` (its cubin, launches, config, metrics, key and provenance) with
// the arguments of `bound` (any binding of the request's template, dtype and shape: they
// all have the same arguments); each launch's args become indices into them. kInternal if a
// launch names an argument `bound` does not have. Tensor maps depend on the config (a box
// is a tile): when `bound` has one and another config, the entry's config is bound for
// them (kFailedPrecondition if it does not bind).
absl::StatusOr<v1::KernelArtifact> ToArtifact(const store::Entry& entry, bool stale,
                                              const Instance& bound,
                                              v1::Provenance provenance);

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_CONVERT_H_
