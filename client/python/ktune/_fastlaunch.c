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
//
// Written against the stable ABI (Py_LIMITED_API, CMake defines it: 3.11), so one build
// loads in any CPython from 3.11 on, the GPU host's included. No libcuda link: the driver is
// whatever set_launch was given.
#include <Python.h>
#include <stdint.h>

typedef int (*LaunchFn)(void* function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                        unsigned block_x, unsigned block_y, unsigned block_z,
                        unsigned shared_bytes, void* stream, void** params, void** extra);

static LaunchFn g_launch = NULL;

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

static PyMethodDef kMethods[] = {
    {"set_launch", SetLaunch, METH_O, "set_launch(address): the cuLaunchKernel to call"},
    {"launch", (PyCFunction)(void (*)(void))Launch, METH_FASTCALL,
     "launch(plan, stream, params) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "ktune._fastlaunch",
    "cuLaunchKernel from C for ktune's hot path (see _fastlaunch.c)", -1, kMethods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastlaunch(void) { return PyModule_Create(&kModule); }
