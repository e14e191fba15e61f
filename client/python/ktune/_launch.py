"""Kernel parameters for cuLaunchKernel, packed with ctypes (no CUDA import here).

cuLaunchKernel takes `void** kernelParams`: one pointer per kernel parameter, each to the
parameter's value. pack_kernel_params builds that array for one launch of an artifact; it
works with any CUDA binding that accepts the array's address as an integer (cuda-python's
cuda.bindings.driver.cuLaunchKernel does).
"""

import ctypes

_SCALAR_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}


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
        """The i-th parameter's value, for tests and logging."""
        return self._values[i].value


def pack_kernel_params(artifact, launch, pointers):
    """kernelParams for `launch` (a KernelLaunch of `artifact`, or its index), with device
    pointers (ints, e.g. torch's data_ptr()) for the buffers from `pointers`, a mapping of arg
    name to address. Scalars take the values the artifact fixed.

    Raises KeyError naming a buffer missing from `pointers`, ValueError for an unknown
    scalar type."""
    if isinstance(launch, int):
        launch = artifact.launches[launch]
    values = []
    for i in launch.args:
        arg = artifact.args[i]
        if arg.is_buffer:
            if arg.name not in pointers:
                raise KeyError(f"no device pointer for buffer '{arg.name}'")
            values.append(ctypes.c_uint64(int(pointers[arg.name])))
        else:
            ctype = _SCALAR_CTYPES.get(arg.scalar_type)
            if ctype is None:
                raise ValueError(f"arg '{arg.name}': unknown scalar type '{arg.scalar_type}'")
            values.append(ctype(arg.value))
    return PackedParams(values)
