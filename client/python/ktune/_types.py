"""Plain dataclasses for what ktuned answers, made from the ktune.v1 messages at the edge.

Units are those of proto/ktune/v1/ktune.proto: times in nanoseconds, sizes in bytes unless a
name says elements. Enums become lowercase strings ("input", "exact", ...).
"""

import dataclasses
import hashlib
from typing import Dict, List, Optional, Tuple

from ktune import _errors
from ktune.v1 import ktune_pb2, manifest_pb2


def _enum_name(enum_type, value):
    """'input' for Buffer.Role.INPUT; '' for the zero (UNSPECIFIED) value or an unknown one."""
    if value == 0:
        return ""
    try:
        return enum_type.Name(value).lower()
    except ValueError:
        return str(value)


@dataclasses.dataclass(frozen=True)
class KernelLaunch:
    """One launch of an artifact, in launch order: cuModuleGetFunction(lowered_name), then
    cuLaunchKernel(grid, block, shared_bytes, params = artifact.args[i] for i in args)."""
    lowered_name: str
    grid: Tuple[int, int, int]
    block: Tuple[int, int, int]
    shared_bytes: int  # dynamic; above 48 KiB raise MAX_DYNAMIC_SHARED_SIZE_BYTES first
    args: Tuple[int, ...]  # indices into KernelArtifact.args, in kernel-parameter order
    # May start while the kernel before it in the stream finishes (it waits for that
    # kernel's results itself): launched with programmatic stream serialization through
    # cuLaunchKernelEx where ktune's C launcher has it. False from daemons that predate it.
    programmatic: bool = False


# Bytes per element of each dtype ktune knows.
DTYPE_SIZES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "f8e4m3": 1, "f8e5m2": 1}


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """A CUDA tensor map (CUtensorMap) over the buffer arg `buffer` (index `buffer_arg`),
    described by value; LoadedKernel encodes it with cuTensorMapEncodeTiled from the caller's
    pointer for that buffer. The enum fields carry the CUDA driver's values."""
    buffer: str
    buffer_arg: int
    dtype: str                           # element type, the buffer's
    dims: Tuple[int, ...]                # elements per dimension, innermost first
    strides: Tuple[int, ...]             # bytes, of dims[1:]
    box: Tuple[int, ...]                 # elements one copy moves per dimension
    element_strides: Tuple[int, ...]
    swizzle: int = 0       # CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
    interleave: int = 0    # CUtensorMapInterleave: 0 none, 1 16B, 2 32B
    l2_promotion: int = 0  # CUtensorMapL2promotion: 0 none, 1 64B, 2 128B, 3 256B
    oob_fill: int = 0      # CUtensorMapFloatOOBfill: 0 zeros, 1 NaN (request zero FMA)


@dataclasses.dataclass(frozen=True)
class KernelArg:
    """A device buffer the caller provides (is_buffer), a scalar ktune fixed for the shape, or
    a tensor map over a buffer (scalar_type "tensor_map", tensor_map set)."""
    name: str
    is_buffer: bool
    dtype: str = ""         # buffers: "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i32"
    count: int = 0          # buffers: elements, not bytes
    role: str = ""          # buffers: "input", "output", "inout", "scratch"
    # scratch: "zero" means zero it before each run, "zero_once" once when allocated (the
    # kernels leave it zeroed after every complete run)
    scratch_fill: str = ""
    # buffers: the byte alignment the kernels need of the device address (a power of two);
    # launches refuse a pointer off it. 0 from a daemon that predates it: not checked.
    alignment: int = 0
    scalar_type: str = ""   # scalars: "i32", "i64", "f32"; or "tensor_map"
    int_value: int = 0
    number: float = 0.0
    tensor_map: Optional[TensorMap] = None

    @property
    def value(self):
        """A scalar's value: int for i32/i64, float for f32. None for buffers."""
        if self.is_buffer:
            return None
        return self.number if self.scalar_type == "f32" else self.int_value


@dataclasses.dataclass(frozen=True)
class Knobs:
    maxrregcount: int = 0  # 0: no register cap
    min_blocks: int = 0
    fast_math: bool = False
    target: str = ""       # "sm_90" or "sm_90a"


@dataclasses.dataclass(frozen=True)
class KernelMetrics:
    """Measured on the GPU it was tuned on; all zero for provenance "default"."""
    time_ns: float = 0.0
    spread_ns: float = 0.0
    registers: int = 0
    spill_bytes: int = 0
    occupancy: float = 0.0
    gbps: float = 0.0
    gflops: float = 0.0
    ceiling_fraction: float = 0.0
    default_time_ns: float = 0.0  # the default config's time in the same job; 0: not measured


@dataclasses.dataclass(frozen=True)
class KernelKey:
    """The key an artifact was made for; for provenance "nearest", the neighbour's shape."""
    device_model: str
    template_id: str
    dtype: str
    shape: Dict[str, int]
    template_source_hash: str
    nvrtc_version: str


@dataclasses.dataclass(frozen=True)
class KernelArtifact:
    """A cubin ready for cuModuleLoadData and the launches of one run. The cubin's sha256 was
    checked against cubin_sha256 when it was received."""
    cubin: bytes
    cubin_sha256: str
    launches: List[KernelLaunch]
    args: List[KernelArg]
    params: Dict[str, int]
    knobs: Knobs
    metrics: KernelMetrics
    provenance: str  # "exact", "nearest" or "default"
    key: KernelKey
    stale: bool  # made from another template source or NVRTC version than the daemon's
    entry_id: int = 0         # 0 unless read from the store
    created_unix_ms: int = 0  # 0 unless read from the store
    tuning_job_id: int = 0    # get_kernel: set when the call started or joined a tuning job

    def arg(self, name):
        """The argument called `name`; KeyError if there is none."""
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)


@dataclasses.dataclass(frozen=True)
class TuneProgress:
    job_id: int
    done: int    # candidates finished
    total: int   # candidates planned
    elapsed_s: float
    eta_s: float  # 0 until the first candidate is done
    best_params: Dict[str, int]  # empty while no candidate was correct
    best_time_ns: float
    last_outcome: str  # "ok", "wrong_result", ...


@dataclasses.dataclass(frozen=True)
class TemplateDim:
    name: str
    min: int
    max: int  # 0: no bound beyond int32
    example: int


@dataclasses.dataclass(frozen=True)
class TemplateParam:
    name: str
    description: str
    values: List[int]
    default: int


@dataclasses.dataclass(frozen=True)
class TemplateInfo:
    name: str
    description: str
    dtypes: List[str]
    dims: List[TemplateDim]
    params: List[TemplateParam]
    source_hash: str


@dataclasses.dataclass(frozen=True)
class TemplateList:
    """The daemon's templates, and "FILE:LINE: field: reason" for each that did not load.
    Iterating it iterates the templates."""
    templates: List[TemplateInfo]
    errors: List[str]

    def __iter__(self):
        return iter(self.templates)

    def __len__(self):
        return len(self.templates)


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """A GPU as the driver describes it (worker.proto DeviceInfo)."""
    ordinal: int
    name: str
    cc_major: int
    cc_minor: int
    sm_count: int
    l2_bytes: int
    memory_bus_bits: int
    memory_clock_khz: int
    total_memory_bytes: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_shared_per_block_optin: int
    registers_per_sm: int
    uuid: str
    driver_version: str


@dataclasses.dataclass(frozen=True)
class Device:
    info: DeviceInfo
    model_key: str     # what entries are stored under
    copy_gbps: float   # measured ceiling; 0 until the first tune measured it
    healthy: bool
    status: str        # why not healthy; empty when healthy


@dataclasses.dataclass(frozen=True)
class Devices:
    """The daemon's GPUs; compile_only when it runs without a usable GPU."""
    devices: List[Device]
    compile_only: bool

    def __iter__(self):
        return iter(self.devices)

    def __len__(self):
        return len(self.devices)


@dataclasses.dataclass(frozen=True)
class EntrySummary:
    entry_id: int
    device_model: str
    template_id: str
    dtype: str
    shape: Dict[str, int]
    params: Dict[str, int]
    knobs: Knobs
    metrics: KernelMetrics
    cubin_bytes: int
    stale: bool
    created_unix_ms: int


def _fields(cls, msg):
    """cls(**{field: msg.field}) for plain scalar fields of the same names."""
    return cls(**{f.name: getattr(msg, f.name) for f in dataclasses.fields(cls)})


def _knobs(m):
    return _fields(Knobs, m)


def _metrics(m):
    return _fields(KernelMetrics, m)


def _tensor_map(t):
    return TensorMap(buffer=t.buffer, buffer_arg=t.buffer_arg, dtype=t.dtype,
                     dims=tuple(t.dims), strides=tuple(t.strides), box=tuple(t.box),
                     element_strides=tuple(t.element_strides), swizzle=int(t.swizzle),
                     interleave=int(t.interleave), l2_promotion=int(t.l2_promotion),
                     oob_fill=int(t.oob_fill))


def artifact_from_proto(m, tuning_job_id=0):
    """The KernelArtifact of a ktune.v1.KernelArtifact, after checking the cubin's sha256.

    Raises DataLossError when the cubin's sha256 is not cubin_sha256 (or that is empty):
    a corrupted cubin must never reach cuModuleLoadData."""
    cubin = bytes(m.cubin)
    actual = hashlib.sha256(cubin).hexdigest()
    if not m.cubin_sha256 or actual != m.cubin_sha256.lower():
        raise _errors.DataLossError(
            f"artifact of {m.template_id or '?'}: cubin sha256 is {actual} but the artifact says "
            f"'{m.cubin_sha256}' ({len(cubin)} bytes); refusing a corrupted cubin")
    launches = [
        KernelLaunch(lowered_name=l.lowered_name, grid=tuple(l.grid), block=tuple(l.block),
                     shared_bytes=l.shared_bytes, args=tuple(l.args),
                     programmatic=l.programmatic)
        for l in m.launches]
    args = [
        KernelArg(name=a.name, is_buffer=a.is_buffer, dtype=a.dtype, count=a.count,
                  role=_enum_name(manifest_pb2.Buffer.Role, a.role),
                  scratch_fill=_enum_name(manifest_pb2.Fill.Kind, a.scratch_fill),
                  alignment=a.alignment,
                  scalar_type=a.scalar_type, int_value=a.int_value, number=a.number,
                  tensor_map=_tensor_map(a.tensor_map) if a.HasField("tensor_map") else None)
        for a in m.args]
    key = KernelKey(device_model=m.device_model, template_id=m.template_id, dtype=m.dtype,
                    shape=dict(m.shape), template_source_hash=m.template_source_hash,
                    nvrtc_version=m.nvrtc_version)
    return KernelArtifact(
        cubin=cubin, cubin_sha256=m.cubin_sha256, launches=launches, args=args,
        params=dict(m.params), knobs=_knobs(m.knobs), metrics=_metrics(m.metrics),
        provenance=_enum_name(ktune_pb2.Provenance, m.provenance), key=key, stale=m.stale,
        entry_id=m.entry_id, created_unix_ms=m.created_unix_ms, tuning_job_id=tuning_job_id)


def progress_from_proto(m):
    return TuneProgress(job_id=m.job_id, done=m.done, total=m.total, elapsed_s=m.elapsed_s,
                        eta_s=m.eta_s, best_params=dict(m.best_params),
                        best_time_ns=m.best_time_ns, last_outcome=m.last_outcome)


def templates_from_proto(m):
    templates = [
        TemplateInfo(
            name=t.name, description=t.description, dtypes=list(t.dtypes),
            dims=[_fields(TemplateDim, d) for d in t.dims],
            params=[TemplateParam(name=p.name, description=p.description,
                                  values=list(p.values), default=p.default)
                    for p in t.params],
            source_hash=t.source_hash)
        for t in m.templates]
    return TemplateList(templates=templates, errors=list(m.errors))


def devices_from_proto(m):
    devices = [Device(info=_fields(DeviceInfo, d.info), model_key=d.model_key,
                      copy_gbps=d.copy_gbps, healthy=d.healthy, status=d.status)
               for d in m.devices]
    return Devices(devices=devices, compile_only=m.compile_only)


def entries_from_proto(m):
    return [EntrySummary(entry_id=e.entry_id, device_model=e.device_model,
                         template_id=e.template_id, dtype=e.dtype, shape=dict(e.shape),
                         params=dict(e.params), knobs=_knobs(e.knobs),
                         metrics=_metrics(e.metrics), cubin_bytes=e.cubin_bytes,
                         stale=e.stale, created_unix_ms=e.created_unix_ms)
            for e in m.entries]
