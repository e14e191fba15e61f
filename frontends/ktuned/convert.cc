#include "frontends/ktuned/convert.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/base/echo.h"
#include "server/base/status_macros.h"
#include "server/gpu/tensor_map_proto.h"
#include "server/templates/shape.h"

namespace ktune {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    // The whole text to the log, a head of it to the caller: a status is a summary.
    std::fprintf(stderr, "ktuned: status message cut for the caller (%zu bytes): %s\n",
                 message.size(), message.c_str());
    message = Clip(message, kMaxStatusMessageBytes);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(message));
}

v1::Knobs ToProto(const Knobs& knobs) {
  v1::Knobs k;
  k.set_maxrregcount(knobs.maxrregcount);
  k.set_min_blocks(knobs.min_blocks);
  k.set_fast_math(knobs.fast_math);
  k.set_target(knobs.target);
  return k;
}

v1::KernelMetrics ToProto(const TrialMetrics& m) {
  v1::KernelMetrics k;
  k.set_time_ns(m.time_ns);
  k.set_spread_ns(m.spread_ns);
  k.set_registers(m.registers);
  k.set_spill_bytes(m.spill_bytes);
  k.set_occupancy(m.occupancy);
  k.set_gbps(m.gbps);
  k.set_gflops(m.gflops);
  k.set_ceiling_fraction(m.ceiling_fraction);
  return k;
}

v1::KernelArg ToProto(const BoundArg& arg) {
  v1::KernelArg a;
  a.set_name(arg.name);
  a.set_is_buffer(arg.is_buffer);
  if (arg.is_buffer) {
    a.set_dtype(std::string(DTypeName(arg.dtype)));
    a.set_count(arg.count);
    a.set_role(arg.role);
    if (arg.role == v1::Buffer::SCRATCH) a.set_scratch_fill(arg.fill.kind());
    a.set_alignment(arg.alignment);
  } else {
    a.set_scalar_type(arg.scalar_type);
    a.set_int_value(arg.int_value);
    a.set_number(arg.number);
    if (arg.is_tensor_map()) *a.mutable_tensor_map() = TensorMapToProto(arg.tensor_map);
  }
  return a;
}

v1::TuneProgress ToProto(const JobProgress& p) {
  v1::TuneProgress t;
  t.set_job_id(p.job_id);
  t.set_done(p.done);
  t.set_total(p.total);
  t.set_elapsed_s(p.elapsed_s);
  t.set_eta_s(p.eta_s);
  t.mutable_best_params()->insert(p.best_params.begin(), p.best_params.end());
  t.set_best_time_ns(p.best_time_ns);
  t.set_last_outcome(p.last_outcome);
  return t;
}

v1::TemplateInfo ToProto(const KernelTemplate& tmpl) {
  const v1::TemplateManifest& m = tmpl.manifest();
  v1::TemplateInfo t;
  t.set_name(m.name());
  t.set_description(m.description());
  for (const std::string& d : m.dtypes()) t.add_dtypes(d);
  for (const v1::Dim& d : m.dims()) {
    v1::TemplateDim* td = t.add_dims();
    td->set_name(d.name());
    td->set_min(d.min());
    td->set_max(d.max());
    td->set_example(d.example());
  }
  for (const v1::Param& p : m.params()) {
    v1::TemplateParam* tp = t.add_params();
    tp->set_name(p.name());
    tp->set_description(p.description());
    for (int64_t v : p.values()) tp->add_values(v);
    tp->set_default_(p.default_());
  }
  t.set_source_hash(tmpl.source_hash());
  return t;
}

v1::EntrySummary ToProto(const store::EntrySummary& e, bool stale) {
  v1::EntrySummary s;
  s.set_entry_id(e.id);
  s.set_device_model(e.key.device_model);
  s.set_template_id(e.key.template_id);
  s.set_dtype(e.key.dtype);
  if (absl::StatusOr<Shape> shape = ParseShape(e.key.shape); shape.ok()) {
    s.mutable_shape()->insert(shape->begin(), shape->end());
  }
  s.mutable_params()->insert(e.config.params.begin(), e.config.params.end());
  *s.mutable_knobs() = ToProto(e.config.knobs);
  *s.mutable_metrics() = ToProto(e.metrics);
  s.mutable_metrics()->set_default_time_ns(e.default_time_ns);
  s.set_cubin_bytes(e.cubin_bytes);
  s.set_stale(stale);
  s.set_created_unix_ms(e.created_unix_ms);
  return s;
}

absl::StatusOr<v1::KernelArtifact> ToArtifact(const store::Entry& e, bool stale,
                                              const Instance& bound,
                                              v1::Provenance provenance) {
  v1::KernelArtifact a;
  a.set_cubin(e.cubin);
  a.set_cubin_sha256(e.cubin_sha256);
  // Tensor maps follow the config (a box is a tile size): `bound` may be the reference's
  // binding, so the entry's own config is bound for them.
  std::optional<Instance> own;
  bool has_tensor_map = false;
  for (const BoundArg& arg : bound.args) has_tensor_map |= arg.is_tensor_map();
  if (has_tensor_map && !(bound.config == e.config)) {
    KTUNE_ASSIGN_OR_RETURN(BindResult r,
                           Bind(bound.tmpl, bound.dtype, bound.shape, e.config, bound.target));
    if (!r.instance) {
      return absl::FailedPreconditionError(absl::StrCat(
          "entry ", e.id, ": its config does not bind for this shape: ", r.rejected_because));
    }
    own = *std::move(r.instance);
  }
  std::map<std::string, int> index;
  for (const BoundArg& arg : (own ? *own : bound).args) {
    index.emplace(arg.name, a.args_size());
    *a.add_args() = ToProto(arg);
  }
  for (const LaunchSpec& l : e.launches) {
    v1::KernelLaunch* kl = a.add_launches();
    kl->set_lowered_name(l.lowered_name);
    for (uint32_t g : l.grid) kl->add_grid(g);
    for (uint32_t b : l.block) kl->add_block(b);
    kl->set_shared_bytes(l.shared_bytes);
    kl->set_programmatic(l.programmatic);
    for (const std::string& name : l.args) {
      auto it = index.find(name);
      if (it == index.end()) {
        return absl::InternalError(absl::StrCat("launch ", l.lowered_name,
                                                " names argument '", name,
                                                "' that the template does not have"));
      }
      kl->add_args(it->second);
    }
  }
  a.mutable_params()->insert(e.config.params.begin(), e.config.params.end());
  *a.mutable_knobs() = ToProto(e.config.knobs);
  *a.mutable_metrics() = ToProto(e.metrics);
  a.mutable_metrics()->set_default_time_ns(e.default_time_ns);
  a.set_provenance(provenance);
  a.set_device_model(e.key.device_model);
  a.set_template_id(e.key.template_id);
  a.set_dtype(e.key.dtype);
  if (absl::StatusOr<Shape> shape = ParseShape(e.key.shape); shape.ok()) {
    a.mutable_shape()->insert(shape->begin(), shape->end());
  }
  a.set_template_source_hash(e.source_hash);
  a.set_nvrtc_version(e.nvrtc_version);
  a.set_stale(stale);
  a.set_entry_id(e.id);
  a.set_created_unix_ms(e.created_unix_ms);
  return a;
}

}  // namespace ktune
