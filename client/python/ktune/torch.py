"""ktune.torch: torch custom ops (torch.library, torch >= 2.4) over ktune's tuned kernels.

    import ktune.torch as kt
    kt.configure(target="unix:///run/ktune/ktuned.sock")      # optional; default target
    kt.prefetch([("rmsnorm", torch.bfloat16, {"tokens": 8, "hidden": 4096}), ...])
    y = kt.rms_norm(x, weight, 1e-6)                          # or torch.ops.ktune.rms_norm

Ops, each a function of this module and a torch.library custom op of namespace `ktune` with a
fake kernel, so torch.compile traces through it:

    rms_norm(x, weight, eps) -> out                      template rmsnorm
    fused_add_rms_norm(x, residual, weight, eps) -> out  add_rmsnorm; residual += x in place
    layer_norm(x, weight, bias, eps) -> out              layernorm (bias may be None)
    softmax(x) -> out                                    softmax over the last dim
    silu_and_mul(x) -> out                               silu(x[..., :d]) * x[..., d:]
    rotary_embedding(positions, q, k, head_dim, cos_sin, interleaved) -> None
                                                         rope; q and k rotated in place
                                                         (rope_qkv where they are views of
                                                         one fused qkv tensor's rows)
    linear(x, weight, bias) -> out                       gemm: x @ weight.T (+ bias)
    fp8_linear(x, weight, scale_x, scale_w, bias) -> out gemm in fp8 (e4m3 or e5m2) with
                                                         per-tensor scales, bf16 out

fused_add_rms_norm returns the normalized rows instead of overwriting x (vLLM's does): the
kernel's parameters are __restrict__, so out may not alias x.

kt.<op> in eager mode (plain tensors, no autograd recording, not under torch.compile) runs
its kernel at once; everywhere else it calls torch.ops.ktune.<op>, whose implementation is
the same. The dispatcher costs more host time per call than the launch itself (measured by
bench/torch_overhead.py), so eager callers should use kt.<op>. A kt.<op> call repeating an
earlier one of its thread (shapes, dtypes, device, stream and scalars) launches from C
without the op's Python (the hot path below; KTUNE_TORCH_HOT=0 turns it off).

Every op checks its tensors (CUDA, one device, the dtype, contiguous (rotary_embedding also
takes q and k as views of a fused qkv tensor: [tokens, ...] rows of q's heads, k's, v's, as
`qkv.split(...)` gives them), the shapes agree) and
raises ValueError or TypeError naming the argument. It then takes the kernel of its key
(template, dtype, shape, device) from a ktune.KernelCache (a dict lookup after the first call;
a FALLBACK kernel is replaced by the tuned one in the background) and launches it on torch's
current stream, with no host synchronisation, so launches record into a CUDA graph being
captured. Ask for every shape before capturing (prefetch, or one eager call each): the first
call of a shape asks ktuned and loads a module, which must not happen during a capture.

When ktuned cannot be reached, or cannot serve a shape (outside the template's bounds), the
op runs torch's own implementation instead and warns once (per op and error code): a server
without ktuned keeps working.
"""

import os
import threading
import warnings
from typing import Optional

import torch
import torch.nn.functional as F

import ktune
from ktune import _errors
from ktune._cache import KernelCache
from ktune._loaded import check_launch, cuda_check

if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    raise ImportError("ktune.torch needs torch >= 2.4 (torch.library.custom_op); this torch is "
                      f"{torch.__version__}")

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
# fp8 inputs of fp8_linear (torch >= 2.1 has both types).
_FP8_DTYPES = {getattr(torch, name): ktune_name for name, ktune_name in
               (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2")) if hasattr(torch, name)}
_TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                 "i32": torch.int32}

_lock = threading.Lock()
_cache = None
_warned = set()
_streams = {}     # cudaStream_t handle -> the driver's CUstream
_constants = {}   # (device index, name) -> small tensors the kernels read (gemm's scales)
_scratches = {}   # (device index, stream handle, name) -> scratch buffers (see _scratch)
_scratch_epoch = [0]  # counts the scratch buffers (re)allocated (see _gemm_buffers)
_retired_scratches = []  # replaced scratch buffers, kept for graphs that captured them

# Each op's kernel args in the order its _launch call passes their values.
_RMS_NORM_ARGS = ("x", "weight", "out", "eps")
_ADD_RMS_NORM_ARGS = ("x", "residual", "weight", "out", "eps")
_LAYER_NORM_ARGS = ("x", "weight", "bias", "out", "eps")
_SOFTMAX_ARGS = ("x", "out", "out_f32", "partial")
_SILU_AND_MUL_ARGS = ("x", "out")
_ROPE_ARGS = ("q", "k", "cos_sin", "positions")
_ROPE_QKV_ARGS = ("qkv", "cos_sin", "positions")
_LINEAR_ARGS = ("x", "w", "out", "scale_x", "scale_w", "partial", "counters")
_GEMV_ARGS = ("x", "w", "y", "partial")
# float32 linear layers of at most this many rows run on the gemv template (CUDA cores, float
# FMAs) instead of gemm: gemm's f32 is tf32 tensor cores three times over on tiles of 64 rows,
# which at a decode step's 1-8 rows is mostly wasted work (6144 x 4096 at m = 1: on the H200
# gemm's portable path 226 us against cuBLAS's 32; on the H100 its Hopper path 80.9 us against
# cuBLAS's 41.7, and gemv 37.6 us at 90 % of the copy ceiling).
_GEMV_MAX_ROWS = 8


def configure(target=None, policy="fallback", refresh_s=10.0, retry_after_s=30.0, token=None,
              timeout_s=None, client=None, programmatic=None):
    """Sets up the kernel cache the ops use (replacing any earlier one): a ktune.Client for
    `target` (None: ktune.default_target()) unless `client` is given; see ktune.KernelCache
    for the rest (`programmatic`: each kernel may start while the one before it in the
    stream finishes; None: KTUNE_PROGRAMMATIC_LAUNCH decides, else off). Without a call, the
    first op configures the defaults. Returns the cache."""
    global _cache
    new = KernelCache(client if client is not None else
                      ktune.Client(target, token=token, timeout_s=timeout_s),
                      policy=policy, refresh_s=refresh_s, retry_after_s=retry_after_s,
                      timeout_s=timeout_s, programmatic=programmatic)
    with _lock:
        old, _cache = _cache, new
        _warned.clear()
        for table in _hot.values():  # plans of the old cache's kernels
            table.clear()
    if old is not None:
        old.close()
    return new


def cache():
    """The KernelCache the ops use."""
    if _cache is None:
        with _lock:
            if _cache is None:
                configure()
    return _cache


def prefetch(keys):
    """Fetches and loads, in one GetKernels call, the kernels of `keys`: (template, dtype,
    shape[, device index]) tuples, dtype a torch.dtype or "bf16"-style name, shape the
    template's dims. Call it with the device current, before capturing CUDA graphs. Returns one
    item per key: None when it is loaded, else the ktune.Error (the ops fall back to torch for
    that key); warns once when ktuned cannot be reached."""
    normal = [(k[0], _DTYPES.get(k[1], _FP8_DTYPES.get(k[1], k[1])), k[2], k[3] if len(k) > 3 else
               torch.cuda.current_device()) for k in keys]
    out = [None] * len(normal)
    for index in sorted({k[3] for k in normal}):  # each device's keys in its context
        mine = [i for i, k in enumerate(normal) if k[3] == index]
        device = torch.device("cuda", index)
        try:
            with torch.cuda.device(device):
                _current_context(device)
                answers = cache().prefetch([normal[i] for i in mine])
        except (ImportError, RuntimeError) as e:  # no cuda-python, or the driver refused
            answers = [_errors.FailedPreconditionError(str(e))] * len(mine)
        for i, answer in zip(mine, answers):
            out[i] = answer
    for error in out:
        if isinstance(error, (_errors.UnavailableError, _errors.FailedPreconditionError)):
            _warn_once("prefetch", error)
            break
    return out


# ---- checks ----

def _tensor(op, name, t, device=None, dtype=None, dim=None, contiguous=True):
    """Checks t and returns it; device is a CUDA device index (torch's get_device()).
    contiguous False: t may be a strided view (the caller checks its layout)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"ktune.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise ValueError(f"ktune.{op}: {name} is on {t.device}; ktune ops take CUDA tensors")
    if device is not None and t.get_device() != device:
        raise ValueError(f"ktune.{op}: {name} is on {t.device}, the input on cuda:{device}")
    if dtype is None:
        if t.dtype not in _DTYPES:
            raise ValueError(f"ktune.{op}: {name} is {t.dtype}; ktune ops take float32, "
                             f"float16 or bfloat16")
    elif t.dtype != dtype:
        raise ValueError(f"ktune.{op}: {name} is {t.dtype}; expected {dtype}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"ktune.{op}: {name} must be contiguous (call .contiguous() first)")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"ktune.{op}: {name} has {t.dim()} dims {tuple(t.shape)}; expected {dim}")
    return t


def _rows(op, x, last):
    """(rows, cols) of x seen as 2-D over its last dim, which must be `last` when given."""
    if x.dim() == 0:
        raise ValueError(f"ktune.{op}: x is a scalar; expected at least 1 dim")
    cols = x.shape[-1]
    if last is not None and cols != last:
        raise ValueError(f"ktune.{op}: x's last dim is {cols}; weight has {last}")
    return x.numel() // cols if cols else 0, cols


_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)


def _eager(*tensors):
    """Whether a call may run its kernel at once instead of through torch's dispatcher (which
    costs more host time than the kernel's own launch): not while torch.compile traces, not
    for tensor subclasses (fake tensors of a trace, dispatch modes' wrappers), not when
    autograd would record the op. Those calls go through torch.ops.ktune.*."""
    if _is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if type(t) is not torch.Tensor or (grad and t.requires_grad):
            return False
    return True


# ---- launching ----

def _warn_once(op, error):
    tag = ("*" if isinstance(error, _errors.UnavailableError) else op, error.code)
    if tag in _warned:
        return
    _warned.add(tag)
    who = "ktune.torch ops" if tag[0] == "*" else f"ktune.{op}"
    warnings.warn(f"{who} fall back to torch's own implementation: {error} (warned once)",
                  RuntimeWarning, stacklevel=5)


# torch's current stream of a device as its raw cudaStream_t, without building a Stream
# object per call (torch's own compiled code reads it this way).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_handle(device):
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream


def _stream(device, driver, handle=None):
    """The driver's CUstream for torch's current stream on device index `device` (whose raw
    handle the caller may have read already)."""
    if handle is None:
        handle = _stream_handle(device)
    stream = _streams.get(handle)
    if stream is None:
        stream = _streams[handle] = driver.CUstream(handle)
    return stream


def _current_context(device):
    """Makes `device`'s primary context (torch's) current on this thread when none is: a
    thread that has made no CUDA runtime call yet has none, and the kernel must be loaded
    into torch's context. The driver's own calls, so no synchronisation."""
    cu = ktune.cuda_driver()
    context = cuda_check(cu, cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if context is not None and int(context) != 0:
        return
    dev = cuda_check(cu, cu.cuDeviceGet(device.index), "cuDeviceGet")
    context = cuda_check(cu, cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    cuda_check(cu, cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")


def _entry(op, key):
    """The cached kernel of `key` (as ktune.cache_key makes it; the ops build it with the
    shape's dims in sorted order), or None (warned) when the op must fall back to torch."""
    c = _cache if _cache is not None else cache()
    entry = c.peek(key)
    if entry is not None:
        return entry
    # First use of the key: load it into the device's context, current on this thread.
    device = torch.device("cuda", key[3])
    try:
        with torch.cuda.device(device):
            _current_context(device)
            return c.get_key(key)
    except _errors.Error as e:
        _warn_once(op, e)
    except (ImportError, RuntimeError) as e:  # no cuda-python, or the driver refused
        _warn_once(op, _errors.FailedPreconditionError(str(e)))
    return None


def _misaligned(op, address):
    """Whether `address` (the or of a call's input addresses) is off a 16-byte boundary, said
    once per op. The templates' vector loads and tensor maps assume 16-byte aligned buffers,
    which torch's allocations and contiguous slices of rows whose bytes are a multiple of 16
    always are; a view at an odd offset (x.view(-1)[1:]) is not, and falls back to torch."""
    if not address & 15:
        return False
    if (op, "aligned") not in _warned:
        _warned.add((op, "aligned"))
        warnings.warn(f"ktune.{op}: an input is not 16-byte aligned (a view at an odd offset); "
                      f"such calls fall back to torch's own implementation (warned once)",
                      RuntimeWarning, stacklevel=4)
    return True


_one_gpu = None  # whether torch sees one GPU (then the current device needs no check)


def _launch(entry, device, handle, names, *values):
    """Enqueues the entry's kernel on torch's current stream of device index `device`
    (`handle`: that stream's raw handle, when the caller has read it; else None) with
    values[i] as its arg names[i] (CachedKernel.launcher: buffers' data_ptr()s, scalars)."""
    global _one_gpu
    run = entry.launcher(names)
    if entry.fast is not None:  # cuLaunchKernel from C: the raw handle is the CUstream
        stream = handle if handle is not None else _stream_handle(device)
    else:
        stream = _stream(device, entry.kernel.driver, handle)
    if _one_gpu is None:
        _one_gpu = torch.cuda.device_count() == 1
    if not _one_gpu and device != torch.cuda.current_device():
        with torch.cuda.device(device):
            run(stream, *values)
    else:
        run(stream, *values)


# ---- the hot path ----
#
# A call that repeats an earlier one (the same shapes, dtypes and device, on the same thread
# and stream, its scalars equal) skips the op's Python: ktune._fastlaunch.hot_call checks in
# C what may have changed since (tensor types, contiguity, autograd, torch.compile, the
# current device and stream, alignment, the kernel or a scratch buffer replaced), allocates
# the output and launches what the earlier call launched. The first call of each such
# signature takes the Python path, which checks and names every error, falls back to torch
# where it must, and records the plan (_remember) once its kernel is launched. An op with no
# plan yet (a server without ktuned: every call falls back) does not look one up; under
# torch.compile (dynamo must not meet the C call) none is looked up either. Only the
# module functions' eager calls record (their bodies' record=True): the registered ops run the
# same bodies for the dispatcher and torch.compile's graphs, which pay nothing for it. Each
# module function tries hot_call in its own first lines: a shared helper would put a Python
# call back on the path the hot path exists to shorten.

_current_device = getattr(torch._C, "_cuda_getDevice", None)


def _hot_setup():
    """ktune._fastlaunch.hot_call, set up with torch's objects; None where there is no C
    launch (KTUNE_FASTLAUNCH=0, no extension, a torch without CUDA) or KTUNE_TORCH_HOT=0."""
    if os.environ.get("KTUNE_FASTLAUNCH") == "0" or os.environ.get("KTUNE_TORCH_HOT") == "0":
        return None
    if _raw_stream is None or _current_device is None:
        return None
    try:
        from ktune import _fastlaunch
        # torch.compile: the ops test it before hot_call (dynamo must not meet a C call).
        _fastlaunch.hot_setup(torch.Tensor, torch.is_grad_enabled, _current_device,
                              _raw_stream, torch.empty_like)
        return _fastlaunch.hot_call
    except (ImportError, AttributeError):
        return None


_hot_call = _hot_setup()
# Per op: {signature: plan} (see _fastlaunch.c). Bounded: cleared past _HOT_MAX_PLANS.
_hot = {op: {} for op in ("rms_norm", "fused_add_rms_norm", "layer_norm", "softmax",
                          "silu_and_mul", "rotary_embedding", "linear", "fp8_linear")}
_HOT_MAX_PLANS = 4096
# A plan's sources, one per launch value: a tensor arg's address, the output's, an arg
# itself (a scalar), or one of the plan's constants (scratch buffers' addresses).
_POINTER, _OUT, _ARG, _CONST = 0, 1 << 8, 2 << 8, 3 << 8
# Its output: empty_like(args[i]), args[i].new_empty(shape), .new_empty(shape, **kwargs),
# or none (an in-place op: hot_call returns True).
_OUT_LIKE, _OUT_SHAPE, _OUT_SHAPE_KWARGS, _OUT_NONE = 0, 1, 2, 3


def _remember(op, args, key, entry, dev, handle, names, sources, consts=(),
              out_kind=_OUT_LIKE, out_arg=0, out_shape=None, scratch_epoch=None, convert=None,
              add=None):
    """Records the plan for calls of `op` repeating this one (`args`, as the op's function
    takes them), once its kernel was launched: entry, the kernel of `key`, with values for
    `names` drawn from `sources`; scratch_epoch: _scratch_epoch[0] as read before the op
    took its scratch buffers;
    convert: ((arg index, dtype), ...) of tensor args the kernel reads converted; add: the
    index of an arg added to the output after the launch (linear's bias)."""
    c = _cache
    if _hot_call is None or c is None:
        return
    generation = c.generation[0]
    if c.peek(key) is not entry:  # replaced meanwhile: the next call records the new one
        return
    ref = getattr(entry.launcher(names), "steps_ref", None)
    if not ref:  # launches through cuda-python (no C launch): nothing to replay
        return
    owner, steps = ref[0][0], tuple(ref[0][1])
    # hot_call looks plans up by the current device and its stream: a call whose tensors are
    # on another device (_launch switched to it) keeps the Python path.
    if _current_device() != dev:
        return
    stream = _stream_handle(dev)
    if handle is not None and handle != stream:
        return
    cu = entry.kernel.driver

    def on_error(i, err):
        check_launch(cu, err, steps[i][3])

    # Per arg, the address bits that must be 0: the alignment the artifact gives the buffers
    # it feeds (16 from a daemon that predates alignments, as the Python path assumes).
    masks = [0] * len(args)
    for name, source in zip(names, sources):
        if source & ~0xFF == _POINTER:
            masks[source & 0xFF] |= (_buffer_arg(entry, name).alignment or 16) - 1
    signature = (threading.get_ident(), dev, stream) + tuple(
        (a.shape, a.dtype, a.get_device()) if type(a) is torch.Tensor else a for a in args)
    try:
        hash(signature)
    except TypeError:  # an unhashable scalar: hot_call finds no plan for it either
        return
    table = _hot[op]
    if len(table) >= _HOT_MAX_PLANS:
        table.clear()
    table[signature] = (
        c.generation, generation, _scratch_epoch,
        _scratch_epoch[0] if scratch_epoch is None else scratch_epoch, steps, sources,
        tuple(masks), consts, out_kind, out_arg, out_shape, on_error, owner, convert, add)


def _buffer_arg(entry, name):
    args = entry.__dict__.get("_torch_buffers")
    if args is None:  # once per entry
        args = entry._torch_buffers = {a.name: a for a in entry.artifact.args if a.is_buffer}
    arg = args.get(name)
    if arg is None:
        raise RuntimeError(f"the {entry.artifact.key.template_id} artifact has no buffer "
                           f"'{name}'")
    return arg


def _scratch(entry, name, device, stream, zeroed=False):
    """The buffer for the artifact's scratch arg `name` on this device and stream (a handle):
    one per stream, grown to the largest count asked, since launches on one stream (or in
    one captured chain) run one after another. A fresh buffer per call would cost host time
    and, inside a CUDA graph, give every replayed launch cold lines to write (measured: +8 %
    GPU time for a split-K gemm). zeroed: allocated as zeros (gemm's ZERO_ONCE counters,
    which the kernels leave zeroed)."""
    a = _buffer_arg(entry, name)
    key = (device, stream, name)
    t = _scratches.get(key)
    if t is None or t.numel() < a.count or t.dtype != _TORCH_DTYPES[a.dtype]:
        if t is not None:
            # A CUDA graph captured with the buffer being replaced writes to it on every
            # replay: it stays allocated, not handed to the next tensor that asks. (It grows
            # only, so that is one buffer per growth.)
            _retired_scratches.append(t)
        make = torch.zeros if zeroed else torch.empty
        t = _scratches[key] = make(a.count, dtype=_TORCH_DTYPES[a.dtype],
                                   device=torch.device("cuda", device))
        _scratch_epoch[0] += 1
    return t


# ---- the ops ----
#
# Each op is a function that runs its kernel at once when _eager() allows, and otherwise calls
# the torch.library custom op of the same name (torch.ops.ktune.<op>), whose implementation
# is the same function body and whose fake kernel lets torch.compile trace it.

def _rms_norm(x, weight, eps, record=False):
    _tensor("rms_norm", "x", x)
    dev = x.get_device()
    _tensor("rms_norm", "weight", weight, dev, x.dtype, dim=1)
    tokens, hidden = _rows("rms_norm", x, weight.shape[0])
    key = ("rmsnorm", _DTYPES[x.dtype], (("hidden", hidden), ("tokens", tokens)), dev)
    entry = _entry("rms_norm", key)
    xp, wp = x.data_ptr(), weight.data_ptr()
    if entry is None or tokens == 0 or _misaligned("rms_norm", xp | wp):
        return F.rms_norm(x, (hidden,), weight, eps)
    out = torch.empty_like(x)
    _launch(entry, dev, None, _RMS_NORM_ARGS, xp, wp, out.data_ptr(), eps)
    if record:
        _remember("rms_norm", (x, weight, eps), key, entry, dev, None, _RMS_NORM_ARGS,
                  (_POINTER, _POINTER | 1, _OUT, _ARG | 2))
    return out


@torch.library.custom_op("ktune::rms_norm", mutates_args=())
def _rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _rms_norm(x, weight, eps)


@_rms_norm_op.register_fake
def _(x, weight, eps=1e-6):
    return torch.empty_like(x)


def rms_norm(x, weight, eps=1e-6):
    """x * rsqrt(mean(x^2, -1) + eps) * weight over the last dim (template rmsnorm)."""
    if _hot_call is not None and not _is_compiling() and _hot["rms_norm"]:
        out = _hot_call(_hot["rms_norm"], x, weight, eps)
        if out is not None:
            return out
    if _eager(x, weight):
        return _rms_norm(x, weight, eps, record=True)
    return _rms_norm_op(x, weight, eps)


def _fused_add_rms_norm(x, residual, weight, eps, record=False):
    op = "fused_add_rms_norm"
    _tensor(op, "x", x)
    dev = x.get_device()
    _tensor(op, "residual", residual, dev, x.dtype)
    if residual.shape != x.shape:
        raise ValueError(f"ktune.{op}: residual is {tuple(residual.shape)}, x "
                         f"{tuple(x.shape)}")
    _tensor(op, "weight", weight, dev, x.dtype, dim=1)
    tokens, hidden = _rows(op, x, weight.shape[0])
    key = ("add_rmsnorm", _DTYPES[x.dtype], (("hidden", hidden), ("tokens", tokens)), dev)
    entry = _entry(op, key)
    xp, rp, wp = x.data_ptr(), residual.data_ptr(), weight.data_ptr()
    if entry is None or tokens == 0 or _misaligned(op, xp | rp | wp):
        residual.add_(x)
        return F.rms_norm(residual, (hidden,), weight, eps)
    out = torch.empty_like(x)
    _launch(entry, dev, None, _ADD_RMS_NORM_ARGS, xp, rp, wp, out.data_ptr(), eps)
    if record:
        _remember(op, (x, residual, weight, eps), key, entry, dev, None, _ADD_RMS_NORM_ARGS,
                  (_POINTER, _POINTER | 1, _POINTER | 2, _OUT, _ARG | 3))
    return out


@torch.library.custom_op("ktune::fused_add_rms_norm", mutates_args=("residual",))
def _fused_add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float = 1e-6) -> torch.Tensor:
    return _fused_add_rms_norm(x, residual, weight, eps)


@_fused_add_rms_norm_op.register_fake
def _(x, residual, weight, eps=1e-6):
    return torch.empty_like(x)


def fused_add_rms_norm(x, residual, weight, eps=1e-6):
    """residual += x (in place); returns rms_norm(residual) (template add_rmsnorm)."""
    if _hot_call is not None and not _is_compiling() and _hot["fused_add_rms_norm"]:
        out = _hot_call(_hot["fused_add_rms_norm"], x, residual, weight, eps)
        if out is not None:
            return out
    if _eager(x, residual, weight):
        return _fused_add_rms_norm(x, residual, weight, eps, record=True)
    return _fused_add_rms_norm_op(x, residual, weight, eps)


def _layer_norm(x, weight, bias, eps, record=False):
    _tensor("layer_norm", "x", x)
    dev = x.get_device()
    _tensor("layer_norm", "weight", weight, dev, x.dtype, dim=1)
    if bias is not None:
        _tensor("layer_norm", "bias", bias, dev, x.dtype, dim=1)
        if bias.shape != weight.shape:
            raise ValueError(f"ktune.layer_norm: bias is {tuple(bias.shape)}, weight "
                             f"{tuple(weight.shape)}")
    tokens, hidden = _rows("layer_norm", x, weight.shape[0])
    key = ("layernorm", _DTYPES[x.dtype],
           (("hidden", hidden), ("tokens", tokens), ("with_bias", int(bias is not None))), dev)
    entry = _entry("layer_norm", key)
    # Without a bias the kernel reads none; its pointer must still be a valid address.
    xp, wp, bp = x.data_ptr(), weight.data_ptr(), (bias if bias is not None else weight).data_ptr()
    if entry is None or tokens == 0 or _misaligned("layer_norm", xp | wp | bp):
        return F.layer_norm(x, (hidden,), weight, bias, eps)
    out = torch.empty_like(x)
    _launch(entry, dev, None, _LAYER_NORM_ARGS, xp, wp, bp, out.data_ptr(), eps)
    if record:
        _remember("layer_norm", (x, weight, bias, eps), key, entry, dev, None, _LAYER_NORM_ARGS,
                  (_POINTER, _POINTER | 1, _POINTER | (2 if bias is not None else 1), _OUT,
                   _ARG | 3))
    return out


@torch.library.custom_op("ktune::layer_norm", mutates_args=())
def _layer_norm_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                   eps: float = 1e-5) -> torch.Tensor:
    return _layer_norm(x, weight, bias, eps)


@_layer_norm_op.register_fake
def _(x, weight, bias, eps=1e-5):
    return torch.empty_like(x)


def layer_norm(x, weight, bias, eps=1e-5):
    """torch's layer_norm over the last dim, bias optional (template layernorm)."""
    if _hot_call is not None and not _is_compiling() and _hot["layer_norm"]:
        out = _hot_call(_hot["layer_norm"], x, weight, bias, eps)
        if out is not None:
            return out
    if _eager(x, weight) and (bias is None or _eager(bias)):
        return _layer_norm(x, weight, bias, eps, record=True)
    return _layer_norm_op(x, weight, bias, eps)


def _softmax(x, record=False):
    _tensor("softmax", "x", x)
    dev = x.get_device()
    rows, cols = _rows("softmax", x, None)
    key = ("softmax", _DTYPES[x.dtype],
           (("cols", cols), ("out_bytes", x.element_size()), ("rows", rows)), dev)
    entry = _entry("softmax", key)
    xp = x.data_ptr()
    if entry is None or rows == 0 or _misaligned("softmax", xp):
        return torch.softmax(x, dim=-1)
    out = torch.empty_like(x)
    handle = _stream_handle(dev)
    epoch = _scratch_epoch[0]
    partial = _scratch(entry, "partial", dev, handle).data_ptr()
    # out_f32 is written only for f32 output of a narrower dtype (out_bytes 4): not here,
    # but its pointer must be a valid address.
    _launch(entry, dev, handle, _SOFTMAX_ARGS, xp, out.data_ptr(), partial, partial)
    if record:
        _remember("softmax", (x,), key, entry, dev, handle, _SOFTMAX_ARGS,
                  (_POINTER, _OUT, _CONST, _CONST), (partial,), scratch_epoch=epoch)
    return out


@torch.library.custom_op("ktune::softmax", mutates_args=())
def _softmax_op(x: torch.Tensor) -> torch.Tensor:
    return _softmax(x)


@_softmax_op.register_fake
def _(x):
    return torch.empty_like(x)


def softmax(x):
    """softmax over the last dim (template softmax)."""
    if _hot_call is not None and not _is_compiling() and _hot["softmax"]:
        out = _hot_call(_hot["softmax"], x)
        if out is not None:
            return out
    if _eager(x):
        return _softmax(x, record=True)
    return _softmax_op(x)


def _silu_and_mul(x, record=False):
    _tensor("silu_and_mul", "x", x)
    rows, cols = _rows("silu_and_mul", x, None)
    if cols % 2:
        raise ValueError(f"ktune.silu_and_mul: x's last dim is {cols}; expected 2 * inter "
                         f"(gate, then up)")
    inter = cols // 2
    dev = x.get_device()
    key = ("silu_and_mul", _DTYPES[x.dtype], (("inter", inter), ("tokens", rows)), dev)
    entry = _entry("silu_and_mul", key)
    xp = x.data_ptr()
    if entry is None or rows == 0 or _misaligned("silu_and_mul", xp):
        return F.silu(x[..., :inter]) * x[..., inter:]
    shape = (*x.shape[:-1], inter)
    out = x.new_empty(shape)  # x's dtype and device, less host time
    _launch(entry, dev, None, _SILU_AND_MUL_ARGS, xp, out.data_ptr())
    if record:
        _remember("silu_and_mul", (x,), key, entry, dev, None, _SILU_AND_MUL_ARGS,
                  (_POINTER, _OUT), out_kind=_OUT_SHAPE, out_shape=shape)
    return out


@torch.library.custom_op("ktune::silu_and_mul", mutates_args=())
def _silu_and_mul_op(x: torch.Tensor) -> torch.Tensor:
    return _silu_and_mul(x)


@_silu_and_mul_op.register_fake
def _(x):
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


def silu_and_mul(x):
    """silu(x[..., :d]) * x[..., d:] (template silu_and_mul)."""
    if _hot_call is not None and not _is_compiling() and _hot["silu_and_mul"]:
        out = _hot_call(_hot["silu_and_mul"], x)
        if out is not None:
            return out
    if _eager(x):
        return _silu_and_mul(x, record=True)
    return _silu_and_mul_op(x)


def _rope_torch(positions, q, k, head_dim, cos_sin, interleaved):
    """The rotation in torch, in place (the fallback): cos_sin[p] holds head_dim / 2 cosines
    then head_dim / 2 sines; neox pairs x[i] with x[i + head_dim / 2], interleaved x[2i]
    with x[2i + 1]."""
    half = head_dim // 2
    angles = cos_sin.index_select(0, positions.reshape(-1).long())
    cos, sin = angles[:, None, :half], angles[:, None, half:]
    for t in (q, k):
        v = t.view(positions.numel(), -1, head_dim).float()
        if interleaved:
            a, b = v[..., 0::2], v[..., 1::2]
            rotated = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
        else:
            a, b = v[..., :half], v[..., half:]
            rotated = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
        t.copy_(rotated.view(t.shape).to(t.dtype))


def _qkv_row(q, k, tokens, head_dim):
    """The row length, in elements, of the fused qkv tensor whose rows q and k are strided
    views of (each row q's heads, k's, then v's as many as k's: a fused QKV projection's
    output split by columns), or None where they are not: q and k each [tokens, ...] with
    contiguous rows the same stride apart, k's row starting where q's ends, the stride q's
    row + 2 k's. Views of one token's row are contiguous tensors (a dim of size 1 has no
    stride to keep): None, and rope takes them as they are, with its hot path."""
    if (not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor) or tokens < 2
            or q.is_contiguous() or k.is_contiguous() or head_dim <= 0 or q.dim() < 2 or k.dim() < 2 or q.shape[0] != tokens
            or k.shape[0] != tokens or q.dtype != k.dtype or not q[0].is_contiguous()
            or not k[0].is_contiguous()):
        return None
    q_len, k_len = q[0].numel(), k[0].numel()
    row = q_len + 2 * k_len
    if (q_len % head_dim or k_len % head_dim or q.stride(0) != row or k.stride(0) != row
            or k.data_ptr() != q.data_ptr() + q_len * q.element_size()):
        return None
    return row


def _rotary_embedding(positions, q, k, head_dim, cos_sin, interleaved, record=False):
    op = "rotary_embedding"
    # q and k in place inside fused qkv rows are taken where they are (template rope_qkv):
    # the copies that would make them tensors of their own cost two kernels a call.
    fused = (isinstance(positions, torch.Tensor)
             and _qkv_row(q, k, positions.numel(), head_dim) is not None)
    _tensor(op, "q", q, contiguous=not fused)
    dev = q.get_device()
    _tensor(op, "k", k, dev, q.dtype, contiguous=not fused)
    _tensor(op, "cos_sin", cos_sin, dev, torch.float32, dim=2)
    if positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"ktune.{op}: positions is {positions.dtype}; expected int32 or int64")
    _tensor(op, "positions", positions, dev, positions.dtype)
    tokens = positions.numel()
    if tokens == 0:
        return
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"ktune.{op}: head_dim is {head_dim}; expected a positive even number")
    if cos_sin.shape[1] != head_dim:
        raise ValueError(f"ktune.{op}: cos_sin is {tuple(cos_sin.shape)}; expected "
                         f"[max_position, head_dim={head_dim}]")
    for name, t in (("q", q), ("k", k)):
        if t.numel() % (tokens * head_dim):
            raise ValueError(f"ktune.{op}: {name} is {tuple(t.shape)}; expected "
                             f"{tokens} tokens x heads x head_dim={head_dim}")
    heads, kv_heads = q.numel() // (tokens * head_dim), k.numel() // (tokens * head_dim)
    key = ("rope_qkv" if fused else "rope", _DTYPES[q.dtype],
           (("head_dim", head_dim), ("heads", heads), ("interleaved", int(interleaved)),
            ("kv_heads", kv_heads), ("tokens", tokens)), dev)
    entry = _entry(op, key)
    qp, kp, cp = q.data_ptr(), k.data_ptr(), cos_sin.data_ptr()
    if entry is None or _misaligned(op, qp | kp | cp):
        _rope_torch(positions, q, k, head_dim, cos_sin, interleaved)
        return
    # The kernel reads int32 positions (vLLM passes int64): one small conversion kernel.
    pos = positions if positions.dtype == torch.int32 else positions.to(torch.int32)
    if fused:  # no plan: hot_call takes contiguous tensors only
        _launch(entry, dev, None, _ROPE_QKV_ARGS, qp, cp, pos.data_ptr())
        return
    _launch(entry, dev, None, _ROPE_ARGS, qp, kp, cp, pos.data_ptr())
    if record:  # int64 positions: the plan converts them too
        _remember(op, (positions, q, k, head_dim, cos_sin, interleaved), key, entry, dev, None,
                  _ROPE_ARGS, (_POINTER | 1, _POINTER | 2, _POINTER | 4, _POINTER),
                  out_kind=_OUT_NONE, convert=None if pos is positions else ((0, torch.int32),))


@torch.library.custom_op("ktune::rotary_embedding", mutates_args=("q", "k"))
def _rotary_embedding_op(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                         head_dim: int, cos_sin: torch.Tensor, interleaved: bool = False) -> None:
    _rotary_embedding(positions, q, k, head_dim, cos_sin, interleaved)


@_rotary_embedding_op.register_fake
def _(positions, q, k, head_dim, cos_sin, interleaved=False):
    return None


def rotary_embedding(positions, q, k, head_dim, cos_sin, interleaved=False):
    """Rotates q and k in place by the angles of cos_sin at `positions` (template rope)."""
    if (_hot_call is not None and not _is_compiling() and _hot["rotary_embedding"]
            and _hot_call(_hot["rotary_embedding"], positions, q, k, head_dim, cos_sin,
                          interleaved) is not None):
        return
    if _eager(positions, q, k, cos_sin):
        _rotary_embedding(positions, q, k, head_dim, cos_sin, interleaved, record=True)
    else:
        _rotary_embedding_op(positions, q, k, head_dim, cos_sin, interleaved)


def _gemm_buffers(entry, device, handle):
    """The addresses of the scale 1.0, the split-K partials and the counters for the entry's
    launches on this device and stream: found once per entry and stream, again only after
    a scratch buffer was reallocated (the addresses kept would be stale)."""
    memo = getattr(entry, "_torch_gemm_buffers", None)
    if memo is None:  # the entry's first linear call (no dict built per call after it)
        memo = entry._torch_gemm_buffers = {}
    hit = memo.get((device, handle))
    if hit is not None and hit[0] == _scratch_epoch[0]:
        return hit[1]
    one = _constant(device, "one", 1.0, torch.float32)
    partial = _scratch(entry, "partial", device, handle)
    counters = _scratch(entry, "counters", device, handle, zeroed=True)
    addresses = (one.data_ptr(), partial.data_ptr(), counters.data_ptr())
    memo[(device, handle)] = (_scratch_epoch[0], addresses)
    return addresses


def _constant(device, name, value, dtype):
    t = _constants.get((device, name))
    if t is None:
        t = _constants[(device, name)] = torch.full((1,), value, dtype=dtype,
                                                    device=torch.device("cuda", device))
    return t


def _linear_dims(op, x, weight, bias, dev, bias_dtype):
    """(m, k, n) of a linear layer x [..., k] . weight [n, k]^T (+ bias [n]), after checking
    weight and bias against x (which is checked already, on device index `dev`)."""
    _tensor(op, "weight", weight, dev, x.dtype, dim=2)
    if bias is not None:
        _tensor(op, "bias", bias, dev, bias_dtype, dim=1)
        if bias.shape[0] != weight.shape[0]:
            raise ValueError(f"ktune.{op}: bias has {bias.shape[0]} elements; weight has "
                             f"{weight.shape[0]} rows")
    m, k = _rows(op, x, None)
    if weight.shape[1] != k:
        raise ValueError(f"ktune.{op}: weight is {tuple(weight.shape)}; x's last dim is {k}")
    return m, k, weight.shape[0]


def _linear(x, weight, bias, record=False):
    op = "linear"
    _tensor(op, "x", x)
    dev = x.get_device()
    m, k, n = _linear_dims(op, x, weight, bias, dev, x.dtype)
    gemv = x.dtype == torch.float32 and 0 < m <= _GEMV_MAX_ROWS
    if gemv:
        key = ("gemv", "f32", (("batch", m), ("k", k), ("n", n)), dev)
    else:
        key = ("gemm", _DTYPES[x.dtype], (("k", k), ("m", m), ("n", n)), dev)
    entry = _entry(op, key)
    xp, wp = x.data_ptr(), weight.data_ptr()
    if entry is None or m == 0 or _misaligned(op, xp | wp):
        return F.linear(x, weight, bias)
    shape = (*x.shape[:-1], n)
    out = x.new_empty(shape)  # x's dtype and device, less host time
    handle = _stream_handle(dev)
    epoch = _scratch_epoch[0]
    if gemv:
        partial = _scratch(entry, "partial", dev, handle).data_ptr()
        _launch(entry, dev, handle, _GEMV_ARGS, xp, wp, out.data_ptr(), partial)
        names, sources, consts = _GEMV_ARGS, (_POINTER, _POINTER | 1, _OUT, _CONST), (partial,)
    else:
        consts = _gemm_buffers(entry, dev, handle)  # one, partial, counters
        _launch(entry, dev, handle, _LINEAR_ARGS, xp, wp, out.data_ptr(), consts[0], consts[0],
                consts[1], consts[2])
        names = _LINEAR_ARGS
        sources = (_POINTER, _POINTER | 1, _OUT, _CONST, _CONST, _CONST | 1, _CONST | 2)
    if bias is not None:
        out.add_(bias)
    if record:
        _remember(op, (x, weight, bias), key, entry, dev, handle, names, sources, consts,
                  _OUT_SHAPE, 0, shape, epoch, add=None if bias is None else 2)
    return out


@torch.library.custom_op("ktune::linear", mutates_args=())
def _linear_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
               ) -> torch.Tensor:
    return _linear(x, weight, bias)


@_linear_op.register_fake
def _(x, weight, bias=None):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def linear(x, weight, bias=None):
    """x @ weight.T (+ bias), weight [n, k] as nn.Linear's (template gemm; float32 of at
    most 8 rows: template gemv)."""
    if _hot_call is not None and not _is_compiling() and _hot["linear"]:
        out = _hot_call(_hot["linear"], x, weight, bias)
        if out is not None:
            return out
    if _eager(x, weight) and (bias is None or _eager(bias)):
        return _linear(x, weight, bias, record=True)
    return _linear_op(x, weight, bias)


def _fp8_linear_torch(x2, weight, scale_x, scale_w):
    """fp8_linear in torch (the fallback), x2 [m, k]: cuBLAS's fp8 GEMM where it takes the
    operands (e4m3, k and n multiples of 16, 16-byte aligned, sm_89 or later), else in
    float."""
    if (x2.dtype == getattr(torch, "float8_e4m3fn", None) and x2.shape[0] > 0
            and not (x2.data_ptr() | weight.data_ptr()) & 15 and x2.shape[1] % 16 == 0
            and weight.shape[0] % 16 == 0 and hasattr(torch, "_scaled_mm")
            and torch.cuda.get_device_capability(x2.device) >= (8, 9)):
        # weight.t() of the row-major [n, k] weight is the column-major operand it wants.
        out = torch._scaled_mm(x2, weight.t(), scale_a=scale_x.reshape(()),
                               scale_b=scale_w.reshape(()), out_dtype=torch.bfloat16)
        return out[0] if isinstance(out, tuple) else out  # torch < 2.5: (out, amax)
    return ((x2.float() @ weight.float().t()) * (scale_x.float() * scale_w.float())).to(
        torch.bfloat16)


def _fp8_linear(x, weight, scale_x, scale_w, bias, record=False):
    op = "fp8_linear"
    if isinstance(x, torch.Tensor) and x.dtype not in _FP8_DTYPES:
        raise ValueError(f"ktune.{op}: x is {x.dtype}; expected torch.float8_e4m3fn or "
                         f"torch.float8_e5m2 (16-bit and float32 layers: ktune.linear)")
    _tensor(op, "x", x, dtype=getattr(x, "dtype", None))
    dev = x.get_device()
    m, k, n = _linear_dims(op, x, weight, bias, dev, torch.bfloat16)
    for name, s in (("scale_x", scale_x), ("scale_w", scale_w)):
        _tensor(op, name, s, dev, torch.float32)
        if s.numel() != 1:
            raise ValueError(f"ktune.{op}: {name} has {s.numel()} elements; expected 1 (a "
                             f"per-tensor scale)")
    key = ("gemm", _FP8_DTYPES[x.dtype], (("k", k), ("m", m), ("n", n)), dev)
    entry = _entry(op, key)
    xp, wp = x.data_ptr(), weight.data_ptr()
    shape = (*x.shape[:-1], n)
    if entry is None or m == 0 or _misaligned(op, xp | wp):
        out = _fp8_linear_torch(x.reshape(m, k), weight, scale_x, scale_w).reshape(shape)
        return out if bias is None else out.add_(bias)
    out = x.new_empty(shape, dtype=torch.bfloat16)
    handle = _stream_handle(dev)
    epoch = _scratch_epoch[0]
    _, partial, counters = _gemm_buffers(entry, dev, handle)
    _launch(entry, dev, handle, _LINEAR_ARGS, xp, wp, out.data_ptr(), scale_x.data_ptr(),
            scale_w.data_ptr(), partial, counters)
    if bias is not None:
        out.add_(bias)
    if record:
        _remember(op, (x, weight, scale_x, scale_w, bias), key, entry, dev, handle,
                  _LINEAR_ARGS, (_POINTER, _POINTER | 1, _OUT, _POINTER | 2, _POINTER | 3,
                                 _CONST, _CONST | 1),
                  (partial, counters), _OUT_SHAPE_KWARGS, 0, (shape, {"dtype": torch.bfloat16}),
                  epoch, add=None if bias is None else 4)
    return out


@torch.library.custom_op("ktune::fp8_linear", mutates_args=())
def _fp8_linear_op(x: torch.Tensor, weight: torch.Tensor, scale_x: torch.Tensor,
                   scale_w: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _fp8_linear(x, weight, scale_x, scale_w, bias)


@_fp8_linear_op.register_fake
def _(x, weight, scale_x, scale_w, bias=None):
    return x.new_empty(*x.shape[:-1], weight.shape[0], dtype=torch.bfloat16)


def fp8_linear(x, weight, scale_x, scale_w, bias=None):
    """(x @ weight.T) * scale_x * scale_w (+ bias), in bf16: x [..., k] and weight [n, k]
    (nn.Linear's layout) of one fp8 type (float8_e4m3fn or float8_e5m2), scale_x and scale_w
    float32 tensors of one element (per-tensor scales, as torch._scaled_mm takes), bias bf16
    [n] or None (template gemm; sm_89 or later)."""
    if _hot_call is not None and not _is_compiling() and _hot["fp8_linear"]:
        out = _hot_call(_hot["fp8_linear"], x, weight, scale_x, scale_w, bias)
        if out is not None:
            return out
    if _eager(x, weight, scale_x, scale_w) and (bias is None or _eager(bias)):
        return _fp8_linear(x, weight, scale_x, scale_w, bias, record=True)
    return _fp8_linear_op(x, weight, scale_x, scale_w, bias)
