"""Python client of ktuned, the ktune kernel autotuning daemon.

    import ktune
    with ktune.Client("unix:///run/ktune/ktuned.sock") as client:
        art = client.get_kernel("rmsnorm", "bf16", {"tokens": 4096, "hidden": 8192},
                                policy="tune", timeout_s=600)
    # art.cubin -> cuModuleLoadData; art.launches[i].lowered_name -> cuModuleGetFunction;
    # grid/block/shared_bytes and the args (art.args[j] for j in launch.args) -> cuLaunchKernel.
    # With cuda-python, ktune.LoadedKernel(art) does all of that:
    with ktune.LoadedKernel(art) as kernel:
        kernel({"x": x.data_ptr(), "weight": w.data_ptr(), "out": out.data_ptr()}, stream)

Many keys at once: client.get_kernels(keys) (one GetKernels call). For servers, a
ktune.KernelCache keeps loaded kernels per (template, dtype, shape, gpu), refreshed in the
background when ktuned has tuned them; ktune.torch registers torch ops over it.

Errors are ktune.Error subclasses carrying the gRPC code and the daemon's message.
"""

try:
    from ktune.v1 import ktune_pb2 as _ktune_pb2  # noqa: F401
except ImportError as e:  # pragma: no cover - a source checkout before generate.sh
    raise ImportError(
        "ktune: the generated modules ktune.v1 are missing or do not import ({}); run "
        "client/python/generate.sh, or use the build tree's copy (BUILD/python)".format(e)
    ) from e

from ktune._errors import (  # noqa: E402
    AbortedError, AlreadyExistsError, CancelledError, DataLossError, DeadlineExceededError,
    Error, FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError,
    OutOfRangeError, PermissionDeniedError, ResourceExhaustedError, UnauthenticatedError,
    UnavailableError, UnimplementedError, UnknownError)
from ktune._types import (  # noqa: E402
    Device, DeviceInfo, Devices, EntrySummary, KernelArg, KernelArtifact, KernelKey,
    KernelLaunch, KernelMetrics, Knobs, TemplateDim, TemplateInfo, TemplateList,
    TemplateParam, TensorMap, TuneProgress)
from ktune._client import MAX_KERNELS_PER_CALL, Client, default_target  # noqa: E402
from ktune._cache import CachedKernel, KernelCache, cache_key  # noqa: E402
from ktune._launch import check_tensor_map, pack_kernel_params  # noqa: E402
from ktune._loaded import (  # noqa: E402
    BoundKernel, LoadedKernel, cuda_check, cuda_driver, encode_tensor_map)

__version__ = "0.1.0"
