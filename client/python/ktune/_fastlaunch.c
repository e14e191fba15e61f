// ktune._fastlaunch: cuLaunchKernel called from C, for the hot path of ktune.KernelCache and
// ktune.torch. cuda-python's binding of it takes ~4 us a call from Python (argument objects
// converted, an enum result built); the driver's own work is a fraction of that. Here a
// launch is one C call with plain integers.
//
//   set_launch(address)                    the cuLaunchKernel to call: the driver's (ktune
//                                          resolves it from libcuda.so.1 with ctypes) or a
//                                          test's stand-in with the same signature
//   launch(plan, stream, params) -> int    plan: (function, grid x, y, z, block x, y, z,
//                                          dynamic shared bytes), all ints; stream: a
//                                          CUstream as an int (0: the legacy default);
//                                          params: the address of the void* kernelParams
//                                          array. Returns the CUresult (0: enqueued).
//   launch_with(plan, stream, params, layout, values) -> int
//                                          the same, after writing values[i] into the
//                                          parameter storage the layout names: layout is
//                                          bytes of 16-byte entries (the storage's address
//                                          as a native uint64, a kind as uint32: 0 u64,
//                                          1 i32, 2 i64, 3 f32, the index into the tuple
//                                          `values` as uint32), so a caller passes a call's
//                                          pointers and scalars in one C call instead of a
//                                          ctypes assignment each. Kind 4: the storage
//                                          is an encoded CUtensorMap and the value the
//                                          device address it must cover now, written with
//                                          cuTensorMapReplaceAddress (the map's shape,
//                                          box and swizzle stay as encoded), so a kernel
//                                          that takes tensor maps launches on any buffers
//                                          without encoding its maps again. A u64 kind may
//                                          carry an alignment in its upper 24 bits (kind |
//                                          A << 8, A a power of two): a value off it raises
//                                          ValueError before anything is launched (a
//                                          buffer's address that the kernel's vector loads
//                                          would fault on).
//   set_replace_address(address)           the cuTensorMapReplaceAddress kind 4 calls (the
//                                          driver's, or a test's stand-in)
//
// Written against the stable ABI (Py_LIMITED_API, CMake defines it: 3.11), so one build
// loads in any CPython from 3.11 on, the GPU host's included. No libcuda link: the driver is
// whatever set_launch was given.
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int (*LaunchFn)(void* function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                        unsigned block_x, unsigned block_y, unsigned block_z,
                        unsigned shared_bytes, void* stream, void** params, void** extra);

typedef int (*ReplaceFn)(void* tensor_map, void* global_address);

static LaunchFn g_launch = NULL;
static ReplaceFn g_replace = NULL;

static PyObject* SetLaunch(PyObject* self, PyObject* address) {
  (void)self;
  void* p = PyLong_AsVoidPtr(address);
  if (p == NULL) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "set_launch: the address is 0");
    }
    return NULL;
  }
  g_launch = (LaunchFn)p;
  Py_RETURN_NONE;
}

static PyObject* SetReplaceAddress(PyObject* self, PyObject* address) {
  (void)self;
  void* p = PyLong_AsVoidPtr(address);
  if (p == NULL) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "set_replace_address: the address is 0");
    }
    return NULL;
  }
  g_replace = (ReplaceFn)p;
  Py_RETURN_NONE;
}

// The plan's 8 fields: the function as a pointer, then 7 unsigned ints. Returns 0 with an
// exception set on a bad plan.
static int ParsePlan(PyObject* plan, void** function, unsigned dims[7]) {
  if (!PyTuple_Check(plan) || PyTuple_Size(plan) != 8) {
    PyErr_SetString(PyExc_TypeError,
                    "launch: plan must be a tuple (function, grid x, y, z, block x, y, z, "
                    "shared bytes)");
    return 0;
  }
  *function = PyLong_AsVoidPtr(PyTuple_GetItem(plan, 0));
  if (*function == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "launch: plan's function is 0");
    return 0;
  }
  for (int i = 0; i < 7; ++i) {
    const unsigned long v = PyLong_AsUnsignedLong(PyTuple_GetItem(plan, i + 1));
    if (PyErr_Occurred()) return 0;
    if (v > 0xFFFFFFFFul) {
      PyErr_Format(PyExc_OverflowError, "launch: plan[%d] = %lu does not fit 32 bits", i + 1,
                   v);
      return 0;
    }
    dims[i] = (unsigned)v;
  }
  return 1;
}

static PyObject* Launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "launch(plan, stream, params) takes 3 arguments");
    return NULL;
  }
  if (g_launch == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "launch: no cuLaunchKernel yet (call set_launch)");
    return NULL;
  }
  void* function;
  unsigned d[7];
  if (!ParsePlan(args[0], &function, d)) return NULL;
  // 0 is a valid stream (the legacy default) and its conversion's error signal: check.
  void* stream = PyLong_AsVoidPtr(args[1]);
  if (stream == NULL && PyErr_Occurred()) return NULL;
  void** params = (void**)PyLong_AsVoidPtr(args[2]);
  if (params == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "launch: params is 0");
    return NULL;
  }
  // The GIL stays held: an enqueue takes a few microseconds, less than releasing and
  // taking it back would cost the caller.
  const int result = g_launch(function, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream,
                              params, NULL);
  return PyLong_FromLong(result);
}

// One entry of launch_with's layout.
typedef struct {
  uint64_t address;
  uint32_t kind;
  uint32_t index;
} Slot;

enum { kU64 = 0, kI32 = 1, kI64 = 2, kF32 = 3, kMapAddress = 4 };

// Writes `value` into the slot as its kind says. Returns 0 with an exception set (naming the
// value's index) when the value does not convert or fit.
static int WriteSlot(const Slot* slot, PyObject* value) {
  void* at = (void*)(uintptr_t)slot->address;
  const uint32_t kind = slot->kind & 0xFFu;
  switch (kind) {
    case kU64: {
      const unsigned long long v = PyLong_AsUnsignedLongLong(value);
      if (PyErr_Occurred()) break;
      const uint32_t alignment = slot->kind >> 8;
      if (alignment > 1 && v % alignment != 0) {
        PyErr_Format(PyExc_ValueError,
                     "launch_with: values[%u] = %p is not %u-byte aligned, as the kernel "
                     "needs",
                     slot->index, (void*)(uintptr_t)v, (unsigned)alignment);
        return 0;
      }
      *(uint64_t*)at = (uint64_t)v;
      return 1;
    }
    case kI32: {
      const long long v = PyLong_AsLongLong(value);
      if (PyErr_Occurred()) break;
      if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "launch_with: values[%u] = %lld does not fit i32",
                     slot->index, v);
        return 0;
      }
      *(int32_t*)at = (int32_t)v;
      return 1;
    }
    case kI64: {
      const long long v = PyLong_AsLongLong(value);
      if (PyErr_Occurred()) break;
      *(int64_t*)at = (int64_t)v;
      return 1;
    }
    case kF32: {
      const double v = PyFloat_AsDouble(value);
      if (PyErr_Occurred()) break;
      *(float*)at = (float)v;
      return 1;
    }
    case kMapAddress: {
      const unsigned long long v = PyLong_AsUnsignedLongLong(value);
      if (PyErr_Occurred()) break;
      // The driver's rule for a map's global address (no interleaved maps here).
      if (v % 16 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "launch_with: values[%u] = %p is not 16-byte aligned, as the "
                     "tensor map over it needs",
                     slot->index, (void*)(uintptr_t)v);
        return 0;
      }
      if (g_replace == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "launch_with: no cuTensorMapReplaceAddress yet (call "
                        "set_replace_address)");
        return 0;
      }
      const int result = g_replace(at, (void*)(uintptr_t)v);
      if (result != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "launch_with: cuTensorMapReplaceAddress for values[%u] = %p failed: "
                     "CUresult %d",
                     slot->index, (void*)(uintptr_t)v, result);
        return 0;
      }
      return 1;
    }
    default:
      PyErr_Format(PyExc_ValueError, "launch_with: layout kind %u is none of 0..4", kind);
      return 0;
  }
  // Keep the conversion's own exception type, with the index in front.
  PyObject *type, *text, *trace;
  PyErr_Fetch(&type, &text, &trace);
  PyObject* message = text ? PyObject_Str(text) : NULL;
  PyErr_Format(type ? type : PyExc_TypeError, "launch_with: values[%u]: %U", slot->index,
               message ? message : Py_None);
  Py_XDECREF(message);
  Py_XDECREF(type);
  Py_XDECREF(text);
  Py_XDECREF(trace);
  return 0;
}

static PyObject* LaunchWith(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError,
                    "launch_with(plan, stream, params, layout, values) takes 5 arguments");
    return NULL;
  }
  if (!PyBytes_Check(args[3]) || PyBytes_Size(args[3]) % (Py_ssize_t)sizeof(Slot) != 0) {
    PyErr_SetString(PyExc_TypeError, "launch_with: layout must be bytes of 16-byte entries");
    return NULL;
  }
  if (!PyTuple_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError, "launch_with: values must be a tuple");
    return NULL;
  }
  const Py_ssize_t count = PyBytes_Size(args[3]) / (Py_ssize_t)sizeof(Slot);
  const Py_ssize_t nvalues = PyTuple_Size(args[4]);
  const char* layout = PyBytes_AsString(args[3]);
  for (Py_ssize_t i = 0; i < count; ++i) {
    Slot slot;
    memcpy(&slot, layout + i * (Py_ssize_t)sizeof(Slot), sizeof(Slot));  // bytes: unaligned
    if (slot.address == 0) {
      PyErr_SetString(PyExc_ValueError, "launch_with: a layout address is 0");
      return NULL;
    }
    if ((Py_ssize_t)slot.index >= nvalues) {
      PyErr_Format(PyExc_IndexError, "launch_with: layout wants values[%u]; %zd given",
                   slot.index, nvalues);
      return NULL;
    }
    if (!WriteSlot(&slot, PyTuple_GetItem(args[4], slot.index))) return NULL;
  }
  return Launch(self, args, 3);
}

static PyMethodDef kMethods[] = {
    {"set_launch", SetLaunch, METH_O, "set_launch(address): the cuLaunchKernel to call"},
    {"set_replace_address", SetReplaceAddress, METH_O,
     "set_replace_address(address): the cuTensorMapReplaceAddress layout kind 4 calls"},
    {"launch", (PyCFunction)(void (*)(void))Launch, METH_FASTCALL,
     "launch(plan, stream, params) -> CUresult"},
    {"launch_with", (PyCFunction)(void (*)(void))LaunchWith, METH_FASTCALL,
     "launch_with(plan, stream, params, layout, values) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "ktune._fastlaunch",
    "cuLaunchKernel from C for ktune's hot path (see _fastlaunch.c)", -1, kMethods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastlaunch(void) { return PyModule_Create(&kModule); }
