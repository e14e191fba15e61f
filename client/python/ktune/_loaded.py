"""A ktune artifact loaded into the current CUDA context and launched with cuda-python.

    kernel = ktune.LoadedKernel(art)                 # cuModuleLoadData + cuModuleGetFunction
    kernel({"x": x.data_ptr(), ...}, stream)          # every launch, in order
    bound = kernel.bind({"x": x.data_ptr(), ...})    # params packed once, for a hot loop
    bound.launch(stream)
    kernel.close()                                    # cuModuleUnload

The CUDA context must be current on the calling thread (torch makes its primary context
current once it has a tensor on the device). cuda-python is imported on first use only, so
the rest of the client works without it; `driver` may be passed instead (any object with
cuda-python's driver functions: tests pass a fake).
"""

import ctypes
import os

from ktune._launch import check_tensor_map, pack_kernel_params

# cuLaunchKernel's default limit; above it a function must opt in (cuFuncSetAttribute).
_DEFAULT_DYNAMIC_SHARED = 48 * 1024


def cuda_driver():
    """cuda-python's driver module: cuda.bindings.driver (cuda-python 12.6 and later) or the
    older cuda.cuda."""
    try:
        from cuda.bindings import driver
    except ImportError:  # older cuda-python
        from cuda import cuda as driver
    return driver


_fast = []  # [fast launcher or None] once resolved (see fast_launcher)
_fast_maps = []  # [whether launch_with can replace a tensor map's address], resolved with it
_fast_ex = []  # [whether a plan's programmatic flag reaches cuLaunchKernelEx], resolved with it


def fast_launcher(driver):
    """ktune._fastlaunch's launch(plan, stream, params) -> CUresult (cuLaunchKernel called
    from C: a few us less per call than cuda-python's binding) where `driver` is cuda-python's
    own module and both the extension (built with the package) and libcuda's cuLaunchKernel
    are there, and KTUNE_FASTLAUNCH is not "0"; else None, and launches go through `driver`
    (a test's fake, say)."""
    if os.environ.get("KTUNE_FASTLAUNCH") == "0":
        return None
    try:
        if driver is not cuda_driver():
            return None
    except ImportError:
        return None
    if not _fast:
        launch, maps = None, False
        try:
            from ktune import _fastlaunch
            # The library cuda-python loaded: one driver, one set of contexts.
            libcuda = ctypes.CDLL("libcuda.so.1")
            _fastlaunch.set_launch(ctypes.cast(libcuda.cuLaunchKernel, ctypes.c_void_p).value)
            launch = _fastlaunch.launch
            # CUDA 12.0 and later; without it tensor-map kernels bind per set of addresses.
            _fastlaunch.set_replace_address(
                ctypes.cast(libcuda.cuTensorMapReplaceAddress, ctypes.c_void_p).value)
            maps = True
        except (ImportError, OSError, AttributeError):
            pass
        ex = False
        if launch is not None:
            try:  # CUDA 12.0 and later; without it every launch is a plain one
                _fastlaunch.set_launch_ex(
                    ctypes.cast(libcuda.cuLaunchKernelEx, ctypes.c_void_p).value)
                ex = True
            except AttributeError:
                pass
        _fast.append(launch)
        _fast_maps.append(maps)
        _fast_ex.append(ex)
    return _fast[0]


def fast_maps(fast):
    """Whether `fast` (what fast_launcher returned) comes with cuTensorMapReplaceAddress, so
    that launch_with can point an encoded tensor map at a call's buffer (layout kind 4)."""
    return fast is not None and bool(_fast_maps) and _fast_maps[0]


# Whether kernels launch programmatically where KTUNE_PROGRAMMATIC_LAUNCH is unset. Off
# until a GPU has measured what it gains a decode step and checked chains of ktune's kernels
# launched so (deploy/gpu-host/run.sh's programmatic stage); the C++ LoadedKernel's default
# is the same.
PROGRAMMATIC_LAUNCH_DEFAULT = False


def programmatic_launches(fast, asked=None):
    """Whether kernels loaded now launch programmatically where their artifact allows it
    (see launch_plan): `fast` (what fast_launcher returned) reaches cuLaunchKernelEx, and
    `asked` is true (None: KTUNE_PROGRAMMATIC_LAUNCH is "1", or, unset,
    PROGRAMMATIC_LAUNCH_DEFAULT)."""
    if asked is None:
        env = os.environ.get("KTUNE_PROGRAMMATIC_LAUNCH")
        asked = PROGRAMMATIC_LAUNCH_DEFAULT if env is None else env == "1"
    return bool(asked) and fast is not None and bool(_fast_ex) and _fast_ex[0]


def launch_plan(function, launch, programmatic=False):
    """What ktune._fastlaunch.launch takes for one launch: (function as an int, grid x, y, z,
    block x, y, z, dynamic shared bytes, flags). Flags bit 0, set when `programmatic` and the
    artifact marks the launch so: cuLaunchKernelEx with programmatic stream serialization,
    so that the kernel is placed on the GPU, sets up and pulls its weight into L2 while the
    kernel before it in the stream finishes (it waits for that kernel's results itself)."""
    flags = 1 if programmatic and launch.programmatic else 0
    return (int(function), *launch.grid, *launch.block, launch.shared_bytes, flags)


def check_launch(driver, err, launch):
    """Raises RuntimeError naming the launch when `err` (a CUresult, as an int or the
    driver's own type, or cuda-python's (err,)) is not success."""
    if int(err[0] if isinstance(err, tuple) else err) != 0:
        if isinstance(err, int) and hasattr(driver, "CUresult"):
            err = driver.CUresult(err)
        cuda_check(driver, err, f"cuLaunchKernel({launch.lowered_name})")


def cuda_check(driver, result, call):
    """cuda-python returns (err,) or (err, value, ...): raises RuntimeError naming `call` and
    the error on failure, else returns the value (or the values, or None)."""
    if not isinstance(result, tuple):
        result = (result,)
    err, rest = result[0], result[1:]
    if int(err) != 0:
        name = driver.cuGetErrorName(err)
        name = name[1] if isinstance(name, tuple) and len(name) > 1 else err
        raise RuntimeError(f"{call} failed: {name!r} ({int(err)})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


# CUtensorMapDataType's values per ktune dtype (fp8 moves as bytes: UINT8).
_TENSOR_MAP_DTYPES = {"i32": 3, "f16": 6, "f32": 7, "bf16": 9, "f8e4m3": 0,
                      "f8e5m2": 0}


def encode_tensor_map(driver, tensor_map, address):
    """The 128 bytes of a CUtensorMap for `tensor_map` (a ktune.TensorMap) over the device
    address `address`, from cuda-python's cuTensorMapEncodeTiled. Raises RuntimeError when the
    driver binding has none (cuda-python before 12.0) or the driver refuses."""
    cu = driver
    if not hasattr(cu, "cuTensorMapEncodeTiled"):
        raise RuntimeError("this cuda-python has no cuTensorMapEncodeTiled (12.0 or later is "
                           "needed to launch kernels that take tensor maps)")
    t = tensor_map
    dtype = _TENSOR_MAP_DTYPES.get(t.dtype)
    if dtype is None:
        raise ValueError(f"tensor map over '{t.buffer}': unknown dtype '{t.dtype}'")
    # cuda-python takes the sizes as its own integer types, not ints (13.x raises TypeError
    # "Cannot convert int to cuuint32_t" otherwise, seen on the H200 host).
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    encoded = cuda_check(cu, cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType(dtype), u32(len(t.dims)), address, [u64(v) for v in t.dims],
        [u64(v) for v in t.strides], [u32(v) for v in t.box],
        [u32(v) for v in t.element_strides], cu.CUtensorMapInterleave(t.interleave),
        cu.CUtensorMapSwizzle(t.swizzle), cu.CUtensorMapL2promotion(t.l2_promotion),
        cu.CUtensorMapFloatOOBfill(t.oob_fill)), f"cuTensorMapEncodeTiled({t.buffer})")
    return ctypes.string_at(encoded.getPtr(), 128)


class BoundKernel:
    """A LoadedKernel with its device pointers fixed: every launch's kernelParams packed once.
    Keep the buffers alive as long as it is used."""

    def __init__(self, kernel, pointers):
        self._kernel = kernel
        def encode(tensor_map, address):
            return encode_tensor_map(kernel.driver, tensor_map, address)
        self._params = [pack_kernel_params(kernel.artifact, launch, pointers, encode)
                        for launch in kernel.artifact.launches]

    @property
    def params(self):
        """Each launch's PackedParams (its tensor maps encoded), in the artifact's order."""
        return self._params

    def launch(self, stream):
        """Enqueues every launch of the artifact, in order, on `stream` (a CUstream, or its
        handle as an int, or 0)."""
        k = self._kernel
        if k.fast is not None:
            handle = stream if type(stream) is int else int(stream)
            for plan, launch, params in zip(k.plans, k.artifact.launches, self._params):
                err = k.fast(plan, handle, params.address)
                if err != 0:
                    check_launch(k.driver, err, launch)
            return
        launch_kernel = k.driver.cuLaunchKernel
        for fn, launch, params in zip(k.functions, k.artifact.launches, self._params):
            err = launch_kernel(fn, *launch.grid, *launch.block, launch.shared_bytes, stream,
                                params.address, 0)
            check_launch(k.driver, err, launch)


class LoadedKernel:
    """The artifact's cubin as a module of the current context, with one function per launch
    (dynamic shared memory above 48 KiB opted into). A context manager: leaving it unloads
    the module. `programmatic`: whether the artifact's programmatic launches go through
    cuLaunchKernelEx with programmatic stream serialization (the C launch only; see
    launch_plan); None: as KTUNE_PROGRAMMATIC_LAUNCH says, else off."""

    def __init__(self, artifact, driver=None, programmatic=None):
        self.artifact = artifact
        self.driver = driver if driver is not None else cuda_driver()
        cu = self.driver
        self.module = None
        # Refuse what cannot be launched before loading anything: an unknown scalar type, a
        # tensor map that breaks the driver's rules or that this binding cannot build.
        # A template's tensor map that no launch of this artifact takes (another path's) is
        # neither checked nor built.
        launched = {a for launch in artifact.launches for a in launch.args}
        for i, arg in enumerate(artifact.args):
            if arg.is_buffer:
                a = arg.alignment
                if a < 0 or a > 256 or a & (a - 1):
                    raise ValueError(f"arg '{arg.name}': alignment {a} is not a power of two "
                                     f"in 1..256 (0: unchecked)")
                continue
            if arg.scalar_type == "tensor_map":
                if i not in launched:
                    continue
                check_tensor_map(artifact, i)
                if not hasattr(cu, "cuTensorMapEncodeTiled"):
                    raise RuntimeError(
                        f"arg '{arg.name}' is a tensor map and this cuda-python has no "
                        f"cuTensorMapEncodeTiled (12.0 or later is needed)")
            elif arg.scalar_type not in ("i32", "i64", "f32"):
                raise ValueError(f"arg '{arg.name}': unknown scalar type '{arg.scalar_type}'")
        # A ctypes copy passed by address: every cuda-python version takes an int for void*,
        # and cuModuleLoadData copies the image.
        image = ctypes.create_string_buffer(artifact.cubin, len(artifact.cubin))
        self.module = cuda_check(cu, cu.cuModuleLoadData(ctypes.addressof(image)),
                                 "cuModuleLoadData")
        self.functions = []
        try:
            for launch in artifact.launches:
                fn = cuda_check(cu, cu.cuModuleGetFunction(self.module,
                                                           launch.lowered_name.encode()),
                                f"cuModuleGetFunction({launch.lowered_name})")
                if launch.shared_bytes > _DEFAULT_DYNAMIC_SHARED:
                    cuda_check(cu, cu.cuFuncSetAttribute(
                        fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        launch.shared_bytes), f"cuFuncSetAttribute({launch.lowered_name})")
                self.functions.append(fn)
        except Exception:
            self.close()
            raise
        # cuLaunchKernel from C where the driver is cuda-python's (fast_launcher), with each
        # launch's plan made once here; None: launches go through `driver`.
        self.fast = fast_launcher(cu)
        # Whether the C launch can also re-point this kernel's tensor maps per call.
        self.fast_maps = fast_maps(self.fast)
        programmatic = programmatic_launches(self.fast, programmatic)
        self.plans = ([launch_plan(fn, launch, programmatic) for fn, launch in
                       zip(self.functions, artifact.launches)]
                      if self.fast is not None else None)

    def bind(self, pointers):
        """A BoundKernel for these device pointers (buffer name -> address, e.g. a torch
        tensor's data_ptr()). Raises KeyError naming a buffer missing from `pointers`."""
        return BoundKernel(self, pointers)

    def __call__(self, pointers, stream):
        """Packs the params and enqueues every launch on `stream`."""
        self.bind(pointers).launch(stream)

    def close(self):
        """Unloads the module (once)."""
        if self.module is not None:
            module, self.module = self.module, None
            cuda_check(self.driver, self.driver.cuModuleUnload(module), "cuModuleUnload")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
