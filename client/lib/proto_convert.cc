#include "client/lib/proto_convert.h"

#include <string>

namespace ktune::client {
namespace {

template <typename Map>
std::map<std::string, int64_t> ToMap(const Map& m) {
  return std::map<std::string, int64_t>(m.begin(), m.end());
}

template <typename Repeated>
auto ToVector(const Repeated& r) {
  return std::vector<typename Repeated::value_type>(r.begin(), r.end());
}

}  // namespace

absl::Status StatusFromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their numbering (both are the canonical
  // google.rpc.Code); anything out of range becomes kUnknown.
  const int code = static_cast<int>(status.error_code());
  const absl::StatusCode absl_code =
      code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)
          ? static_cast<absl::StatusCode>(code)
          : absl::StatusCode::kUnknown;
  return absl::Status(absl_code, status.error_message());
}

KernelArtifact ArtifactFromProto(const v1::KernelArtifact& p) {
  KernelArtifact a;
  a.cubin = p.cubin();
  a.cubin_sha256 = p.cubin_sha256();
  for (const v1::KernelLaunch& l : p.launches()) {
    KernelLaunch launch;
    launch.lowered_name = l.lowered_name();
    launch.grid = ToVector(l.grid());
    launch.block = ToVector(l.block());
    launch.shared_bytes = l.shared_bytes();
    launch.args = ToVector(l.args());
    launch.programmatic = l.programmatic();
    a.launches.push_back(std::move(launch));
  }
  for (const v1::KernelArg& g : p.args()) {
    KernelArg arg;
    arg.name = g.name();
    arg.is_buffer = g.is_buffer();
    arg.dtype = g.dtype();
    arg.count = g.count();
    arg.role = static_cast<BufferRole>(g.role());
    arg.scratch_fill = static_cast<FillKind>(g.scratch_fill());
    arg.alignment = g.alignment();
    arg.scalar_type = g.scalar_type();
    arg.int_value = g.int_value();
    arg.number = g.number();
    if (g.has_tensor_map()) {
      const v1::BoundTensorMap& m = g.tensor_map();
      TensorMapArg& t = arg.tensor_map;
      t.buffer = m.buffer();
      t.buffer_arg = m.buffer_arg();
      t.dtype = m.dtype();
      t.dims.assign(m.dims().begin(), m.dims().end());
      t.strides.assign(m.strides().begin(), m.strides().end());
      t.box.assign(m.box().begin(), m.box().end());
      t.element_strides.assign(m.element_strides().begin(), m.element_strides().end());
      t.swizzle = m.swizzle();
      t.interleave = m.interleave();
      t.l2_promotion = m.l2_promotion();
      t.oob_fill = m.oob_fill();
    }
    a.args.push_back(std::move(arg));
  }
  a.params = ToMap(p.params());
  a.knobs.maxrregcount = p.knobs().maxrregcount();
  a.knobs.min_blocks = p.knobs().min_blocks();
  a.knobs.fast_math = p.knobs().fast_math();
  a.knobs.target = p.knobs().target();
  const v1::KernelMetrics& m = p.metrics();
  a.metrics.time_ns = m.time_ns();
  a.metrics.spread_ns = m.spread_ns();
  a.metrics.registers = m.registers();
  a.metrics.spill_bytes = m.spill_bytes();
  a.metrics.occupancy = m.occupancy();
  a.metrics.gbps = m.gbps();
  a.metrics.gflops = m.gflops();
  a.metrics.ceiling_fraction = m.ceiling_fraction();
  a.metrics.default_time_ns = m.default_time_ns();
  a.provenance = static_cast<Provenance>(p.provenance());
  a.device_model = p.device_model();
  a.template_id = p.template_id();
  a.dtype = p.dtype();
  a.shape = ToMap(p.shape());
  a.template_source_hash = p.template_source_hash();
  a.nvrtc_version = p.nvrtc_version();
  a.stale = p.stale();
  a.entry_id = p.entry_id();
  a.created_unix_ms = p.created_unix_ms();
  return a;
}

TuneProgress ProgressFromProto(const v1::TuneProgress& p) {
  TuneProgress t;
  t.job_id = p.job_id();
  t.done = p.done();
  t.total = p.total();
  t.elapsed_s = p.elapsed_s();
  t.eta_s = p.eta_s();
  t.best_params = ToMap(p.best_params());
  t.best_time_ns = p.best_time_ns();
  t.last_outcome = p.last_outcome();
  return t;
}

TemplateList TemplatesFromProto(const v1::ListTemplatesResponse& p) {
  TemplateList list;
  for (const v1::TemplateInfo& t : p.templates()) {
    TemplateInfo info;
    info.name = t.name();
    info.description = t.description();
    info.dtypes = ToVector(t.dtypes());
    for (const v1::TemplateDim& d : t.dims()) {
      info.dims.push_back({d.name(), d.min(), d.max(), d.example()});
    }
    for (const v1::TemplateParam& q : t.params()) {
      info.params.push_back({q.name(), q.description(), ToVector(q.values()), q.default_()});
    }
    info.source_hash = t.source_hash();
    list.templates.push_back(std::move(info));
  }
  list.errors = ToVector(p.errors());
  return list;
}

DeviceList DevicesFromProto(const v1::GetDevicesResponse& p) {
  DeviceList list;
  list.compile_only = p.compile_only();
  for (const v1::Device& d : p.devices()) {
    Device dev;
    dev.ordinal = d.info().ordinal();
    dev.name = d.info().name();
    dev.cc_major = d.info().cc_major();
    dev.cc_minor = d.info().cc_minor();
    dev.sm_count = d.info().sm_count();
    dev.total_memory_bytes = d.info().total_memory_bytes();
    dev.uuid = d.info().uuid();
    dev.driver_version = d.info().driver_version();
    dev.model_key = d.model_key();
    dev.copy_gbps = d.copy_gbps();
    dev.healthy = d.healthy();
    dev.status = d.status();
    list.devices.push_back(std::move(dev));
  }
  return list;
}

v1::GetKernelRequest ToProto(const KernelRequest& r) {
  v1::GetKernelRequest p;
  p.set_template_id(r.template_id);
  p.set_dtype(r.dtype);
  for (const auto& [dim, size] : r.shape) (*p.mutable_shape())[dim] = size;
  p.set_policy(static_cast<v1::Policy>(r.policy));
  p.set_gpu(r.gpu);
  return p;
}

v1::TuneRequest ToProto(const TuneRequest& r) {
  v1::TuneRequest p;
  p.set_template_id(r.template_id);
  p.set_dtype(r.dtype);
  for (const auto& [dim, size] : r.shape) (*p.mutable_shape())[dim] = size;
  p.set_gpu(r.gpu);
  p.set_strategy(r.strategy);
  p.set_budget(r.budget);
  p.set_force(r.force);
  p.set_time_s(r.time_s);
  if (r.min_gain) p.set_min_gain(*r.min_gain);
  if (r.roofline_stop) p.set_roofline_stop(*r.roofline_stop);
  p.set_no_warm_start(!r.warm_start);
  p.set_yield_to_lease(r.yield_to_lease);
  return p;
}

}  // namespace ktune::client
