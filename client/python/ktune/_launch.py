"""Kernel parameters for cuLaunchKernel, packed with ctypes (no CUDA import here).

cuLaunchKernel takes `void** kernelParams`: one pointer per kernel parameter, each to the
parameter's value. pack_kernel_params builds that array for one launch of an artifact; it
works with any CUDA binding that accepts the array's address as an integer (cuda-python's
cuda.bindings.driver.cuLaunchKernel does).
"""

import ctypes

from ktune._types import DTYPE_SIZES

_SCALAR_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}

# A CUtensorMap: 128 bytes; the driver wants 64-byte alignment, CUDA 13's header declares
# 128, so host copies are 128-byte aligned.
TENSOR_MAP_BYTES = 128
_TENSOR_MAP_ALIGN = 128


def check_tensor_map(artifact, index):
    """Raises ValueError naming the field when tensor-map arg `index` of `artifact` breaks the
    CUDA driver's rules for cuTensorMapEncodeTiled (the checks of server/base/tensor_map.h):
    it must cover a buffer arg, have rank 1..5 with rank - 1 byte strides (multiples of 16,
    below 2^40), box values 1..256 with box[0] * element bytes a multiple of 16 and within
    the swizzle's span, and stay inside its buffer."""
    arg = artifact.args[index]
    t = arg.tensor_map
    where = f"arg '{arg.name}' tensor_map"
    if t is None:
        raise ValueError(f"{where}: missing")
    if not 0 <= t.buffer_arg < len(artifact.args) or not artifact.args[t.buffer_arg].is_buffer:
        raise ValueError(f"{where}.buffer_arg: {t.buffer_arg} is not a buffer arg")
    elem = DTYPE_SIZES.get(t.dtype)
    if elem is None:
        raise ValueError(f"{where}.dtype: unknown '{t.dtype}'")
    rank = len(t.dims)
    if not 1 <= rank <= 5:
        raise ValueError(f"{where}.dims: rank {rank} is outside 1..5")
    if len(t.strides) != rank - 1 or len(t.box) != rank or len(t.element_strides) != rank:
        raise ValueError(f"{where}: strides, box and element_strides need rank - 1, rank and "
                         f"rank values for rank {rank}")
    for i, d in enumerate(t.dims):
        if not 1 <= d <= 1 << 32:
            raise ValueError(f"{where}.dims[{i}]: {d} is outside 1..2^32")
    for i, s in enumerate(t.strides):
        if s <= 0 or s % 16 or s >= 1 << 40:
            raise ValueError(f"{where}.strides[{i}]: {s} bytes is not a positive multiple of "
                             f"16 below 2^40")
    for i, b in enumerate(t.box):
        if not 1 <= b <= 256:
            raise ValueError(f"{where}.box[{i}]: {b} is outside 1..256")
    for i, e in enumerate(t.element_strides):
        if not 1 <= e <= 8:
            raise ValueError(f"{where}.element_strides[{i}]: {e} is outside 1..8")
    inner = t.box[0] * elem
    if t.interleave == 0 and inner % 16:
        raise ValueError(f"{where}.box[0]: {inner} bytes is not a multiple of 16")
    if t.interleave == 0 and t.swizzle and inner > 16 << t.swizzle:
        raise ValueError(f"{where}.box[0]: {inner} bytes exceed the {16 << t.swizzle}-byte "
                         f"swizzle span")
    buffer = artifact.args[t.buffer_arg]
    extent = t.dims[0] * elem + sum((d - 1) * s for d, s in zip(t.dims[1:], t.strides))
    if extent > buffer.count * DTYPE_SIZES.get(buffer.dtype, 0):
        raise ValueError(f"{where}.dims: the map reaches {extent} bytes into buffer "
                         f"'{buffer.name}' of {buffer.count} {buffer.dtype}")


def check_alignment(arg, address):
    """Raises ValueError naming buffer arg `arg` when `address` is off the alignment its
    kernels need: their vector loads would fault there, and a fault ends the CUDA context
    (a view at an odd element offset is the usual cause)."""
    if arg.alignment > 1 and address % arg.alignment:
        raise ValueError(f"buffer '{arg.name}' at {address:#x} is not {arg.alignment}-byte "
                         f"aligned, as the kernel needs")


def _aligned_map(data):
    """A ctypes array of the 128 map bytes at a 128-byte aligned address (cuLaunchKernel
    copies the value, but keep the alignment CUtensorMap has)."""
    if len(data) != TENSOR_MAP_BYTES:
        raise ValueError(f"a tensor map is {TENSOR_MAP_BYTES} bytes, got {len(data)}")
    raw = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + _TENSOR_MAP_ALIGN))()
    offset = -ctypes.addressof(raw) % _TENSOR_MAP_ALIGN
    view = (ctypes.c_uint8 * TENSOR_MAP_BYTES).from_buffer(raw, offset)  # keeps raw alive
    ctypes.memmove(view, bytes(data), TENSOR_MAP_BYTES)
    return view


class PackedParams:
    """The void* array for one launch and the values it points to; keep it alive until the
    launch call has returned. `address` is the integer to pass as kernelParams."""

    def __init__(self, values):
        self._values = values  # keeps the pointed-to ctypes objects alive
        self._array = (ctypes.c_void_p * len(values))(
            *[ctypes.addressof(v) for v in values])
        self.address = ctypes.addressof(self._array)

    def __len__(self):
        return len(self._values)

    def value(self, i):
        """The i-th parameter's value, for tests and logging (bytes for a tensor map)."""
        v = self._values[i]
        return bytes(v) if isinstance(v, ctypes.Array) else v.value

    def address_of(self, i):
        """Where the i-th parameter's value lies (a tensor map's is 128-byte aligned)."""
        return ctypes.addressof(self._values[i])


def pack_kernel_params(artifact, launch, pointers, encode_tensor_map=None):
    """kernelParams for `launch` (a KernelLaunch of `artifact`, or its index), with device
    pointers (ints, e.g. torch's data_ptr()) for the buffers from `pointers`, a mapping of arg
    name to address. Scalars take the values the artifact fixed. A tensor-map arg is built by
    `encode_tensor_map(tensor_map, address)` (128 bytes: LoadedKernel passes one over
    cuTensorMapEncodeTiled) from the pointer of the buffer it covers, and passed by value.

    Raises KeyError naming a buffer missing from `pointers`, ValueError for an unknown
    scalar type or a tensor map without `encode_tensor_map`."""
    if isinstance(launch, int):
        launch = artifact.launches[launch]
    values = []
    for i in launch.args:
        arg = artifact.args[i]
        if arg.scalar_type == "tensor_map" and not arg.is_buffer:
            if encode_tensor_map is None:
                raise ValueError(f"arg '{arg.name}' is a tensor map: launch it with "
                                 f"ktune.LoadedKernel, which builds it with "
                                 f"cuTensorMapEncodeTiled")
            check_tensor_map(artifact, i)
            buffer = artifact.args[arg.tensor_map.buffer_arg].name
            if buffer not in pointers:
                raise KeyError(f"no device pointer for buffer '{buffer}' (tensor map "
                               f"'{arg.name}')")
            address = int(pointers[buffer])
            if address % 16:
                raise ValueError(f"buffer '{buffer}' is not 16-byte aligned, as tensor map "
                                 f"'{arg.name}' needs")
            values.append(_aligned_map(encode_tensor_map(arg.tensor_map, address)))
            continue
        if arg.is_buffer:
            if arg.name not in pointers:
                raise KeyError(f"no device pointer for buffer '{arg.name}'")
            address = int(pointers[arg.name])
            check_alignment(arg, address)
            values.append(ctypes.c_uint64(address))
        else:
            ctype = _SCALAR_CTYPES.get(arg.scalar_type)
            if ctype is None:
                raise ValueError(f"arg '{arg.name}': unknown scalar type '{arg.scalar_type}'")
            values.append(ctype(arg.value))
    return PackedParams(values)
