"""cuLaunchKernel called straight from libcuda through ctypes, for the launch hot paths.

cuda-python's cuLaunchKernel converts every argument through its own handle and integer
types: about 4 us of host time a call on the H200 host, most of a cached kernel's launch. A
ctypes call to the same driver entry point with fixed argument types does the same work
without that conversion. Used only with cuda-python's own driver module (whose handles give
their raw values with int()); a driver passed in by a caller (a fake in tests) keeps its own
cuLaunchKernel.
"""

import ctypes

_libcuda_launch = None  # the ctypes function, once found


def raw_launcher(driver):
    """cuLaunchKernel of libcuda as a ctypes function taking (function handle, grid x, y, z,
    block x, y, z, shared bytes, stream handle, kernelParams address, extra) as ints and
    returning the CUresult as an int; None when `driver` is not cuda-python's module or
    libcuda cannot be opened."""
    global _libcuda_launch
    if getattr(driver, "__name__", "") not in ("cuda.bindings.driver", "cuda.cuda"):
        return None
    if _libcuda_launch is None:
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
        except (OSError, AttributeError):
            return None
        u = ctypes.c_uint
        fn.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _libcuda_launch = fn
    return _libcuda_launch


def handle(value):
    """The raw value of a cuda-python handle (CUfunction, CUstream) or of an int."""
    return value if type(value) is int else int(value)
