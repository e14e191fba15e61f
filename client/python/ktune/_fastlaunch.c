// ktune._fastlaunch: cuLaunchKernel called from C, for the hot path of ktune.KernelCache and
// ktune.torch. cuda-python's binding of it takes ~4 us a call from Python (argument objects
// converted, an enum result built); the driver's own work is a fraction of that. Here a
// launch is one C call with plain integers.
//
//   set_launch(address)                    the cuLaunchKernel to call: the driver's (ktune
//                                          resolves it from libcuda.so.1 with ctypes) or a
//                                          test's stand-in with the same signature
//   set_launch_ex(address)                 the cuLaunchKernelEx a programmatic plan calls
//   launch(plan, stream, params) -> int    plan: (function, grid x, y, z, block x, y, z,
//                                          dynamic shared bytes[, flags]), all ints; flags
//                                          bit 0: launch with programmatic stream
//                                          serialization through cuLaunchKernelEx (a
//                                          plain launch until set_launch_ex); stream: a
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
//   hot_setup(...), hot_call(table, *args) ktune.torch's hot path: a repeated op call
//                                          launched from a plan its first call recorded
//                                          (the section of that name below)
//
// Written against the stable ABI (Py_LIMITED_API, CMake defines it: 3.11), so one build
// loads in any CPython from 3.11 on, the GPU host's included. No libcuda link: the driver is
// whatever set_launch was given.
#include <Python.h>
#include <pythread.h>
#include <stdint.h>
#include <string.h>

typedef int (*LaunchFn)(void* function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                        unsigned block_x, unsigned block_y, unsigned block_z,
                        unsigned shared_bytes, void* stream, void** params, void** extra);

typedef int (*ReplaceFn)(void* tensor_map, void* global_address);

// cuLaunchKernelEx's configuration, field for field as the driver's ABI lays it out
// (CUlaunchConfig, and CUlaunchAttribute: an id padded to 8 bytes, then a 64-byte union).
typedef struct {
  unsigned id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
} LaunchAttribute;
typedef struct {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  void* stream;
  LaunchAttribute* attrs;
  unsigned num_attrs;
} LaunchConfig;
typedef int (*LaunchExFn)(const LaunchConfig* config, void* function, void** params,
                          void** extra);
_Static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(sizeof(void*) != 8 || sizeof(LaunchConfig) == 56, "CUlaunchConfig is 56 bytes");
enum { kProgrammaticStreamSerialization = 6, kPlanProgrammatic = 1 };
#ifdef KTUNE_CHECK_DRIVER_ABI  // the build compiles this file once more against <cuda.h>
#include <cuda.h>
#include <stddef.h>
_Static_assert(sizeof(LaunchAttribute) == sizeof(CUlaunchAttribute), "CUlaunchAttribute");
_Static_assert(offsetof(LaunchAttribute, value) == offsetof(CUlaunchAttribute, value),
               "CUlaunchAttribute.value");
_Static_assert(sizeof(LaunchConfig) == sizeof(CUlaunchConfig), "CUlaunchConfig");
_Static_assert(offsetof(LaunchConfig, shared_bytes) == offsetof(CUlaunchConfig, sharedMemBytes),
               "CUlaunchConfig.sharedMemBytes");
_Static_assert(offsetof(LaunchConfig, stream) == offsetof(CUlaunchConfig, hStream),
               "CUlaunchConfig.hStream");
_Static_assert(offsetof(LaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs),
               "CUlaunchConfig.attrs");
_Static_assert(offsetof(LaunchConfig, num_attrs) == offsetof(CUlaunchConfig, numAttrs),
               "CUlaunchConfig.numAttrs");
_Static_assert(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION ==
                   kProgrammaticStreamSerialization,
               "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION");
#endif

static LaunchFn g_launch = NULL;
static LaunchExFn g_launch_ex = NULL;
static ReplaceFn g_replace = NULL;

// A driver entry point's address from Python: nonzero, else NULL with ValueError naming
// `setter` (or the conversion's own error).
static void* EntryPoint(PyObject* address, const char* setter) {
  void* p = PyLong_AsVoidPtr(address);
  if (p == NULL && !PyErr_Occurred()) {
    PyErr_Format(PyExc_ValueError, "%s: the address is 0", setter);
  }
  return p;
}

static PyObject* SetLaunch(PyObject* self, PyObject* address) {
  (void)self;
  void* p = EntryPoint(address, "set_launch");
  if (p == NULL) return NULL;
  g_launch = (LaunchFn)p;
  Py_RETURN_NONE;
}

static PyObject* SetLaunchEx(PyObject* self, PyObject* address) {
  (void)self;
  void* p = EntryPoint(address, "set_launch_ex");
  if (p == NULL) return NULL;
  g_launch_ex = (LaunchExFn)p;
  Py_RETURN_NONE;
}

static PyObject* SetReplaceAddress(PyObject* self, PyObject* address) {
  (void)self;
  void* p = EntryPoint(address, "set_replace_address");
  if (p == NULL) return NULL;
  g_replace = (ReplaceFn)p;
  Py_RETURN_NONE;
}

// The plan's 8 or 9 fields: the function as a pointer, then 7 unsigned ints, then the
// flags (0 when absent). Returns 0 with an exception set on a bad plan.
static int ParsePlan(PyObject* plan, void** function, unsigned dims[7], unsigned* flags) {
  const Py_ssize_t size = PyTuple_Check(plan) ? PyTuple_Size(plan) : -1;
  if (size != 8 && size != 9) {
    PyErr_SetString(PyExc_TypeError,
                    "launch: plan must be a tuple (function, grid x, y, z, block x, y, z, "
                    "shared bytes[, flags])");
    return 0;
  }
  *flags = 0;
  if (size == 9) {
    const unsigned long f = PyLong_AsUnsignedLong(PyTuple_GetItem(plan, 8));
    if (PyErr_Occurred()) return 0;
    *flags = (unsigned)f;
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
  unsigned d[7], flags;
  if (!ParsePlan(args[0], &function, d, &flags)) return NULL;
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
  if ((flags & kPlanProgrammatic) && g_launch_ex != NULL) {
    LaunchAttribute attr;
    memset(&attr, 0, sizeof(attr));
    attr.id = kProgrammaticStreamSerialization;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const LaunchConfig config = {d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, &attr, 1};
    return PyLong_FromLong(g_launch_ex(&config, function, params, NULL));
  }
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

// Writes `values` (a tuple) into the storage `layout` (bytes of Slots) names. Returns 0 with
// an exception set when the layout or a value is bad.
static int WriteLayout(PyObject* layout_bytes, PyObject* values) {
  if (!PyBytes_Check(layout_bytes) ||
      PyBytes_Size(layout_bytes) % (Py_ssize_t)sizeof(Slot) != 0) {
    PyErr_SetString(PyExc_TypeError, "launch_with: layout must be bytes of 16-byte entries");
    return 0;
  }
  if (!PyTuple_Check(values)) {
    PyErr_SetString(PyExc_TypeError, "launch_with: values must be a tuple");
    return 0;
  }
  const Py_ssize_t count = PyBytes_Size(layout_bytes) / (Py_ssize_t)sizeof(Slot);
  const Py_ssize_t nvalues = PyTuple_Size(values);
  const char* layout = PyBytes_AsString(layout_bytes);
  for (Py_ssize_t i = 0; i < count; ++i) {
    Slot slot;
    memcpy(&slot, layout + i * (Py_ssize_t)sizeof(Slot), sizeof(Slot));  // bytes: unaligned
    if (slot.address == 0) {
      PyErr_SetString(PyExc_ValueError, "launch_with: a layout address is 0");
      return 0;
    }
    if ((Py_ssize_t)slot.index >= nvalues) {
      PyErr_Format(PyExc_IndexError, "launch_with: layout wants values[%u]; %zd given",
                   slot.index, nvalues);
      return 0;
    }
    if (!WriteSlot(&slot, PyTuple_GetItem(values, slot.index))) return 0;
  }
  return 1;
}

static PyObject* LaunchWith(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError,
                    "launch_with(plan, stream, params, layout, values) takes 5 arguments");
    return NULL;
  }
  if (!WriteLayout(args[3], args[4])) return NULL;
  return Launch(self, args, 3);
}

// ---- ktune.torch's hot path: hot_setup, hot_call ----
//
// A ktune.torch op called again with what it was called with before (the same shapes,
// dtypes and device, on the same thread and stream, scalars equal) redoes none of its Python:
// hot_call checks what could differ (exact torch.Tensor types, contiguity, autograd, the
// current device and stream, each buffer's alignment, that neither the kernel nor a scratch
// buffer was replaced), allocates the output, writes the call's values
// into the kernel's parameters and launches, all in C. Anything else returns None and the op
// takes its Python path, which checks and names every error, falls back to torch where it
// must, and records a plan for the next such call.
//
//   hot_setup(tensor_type, is_grad_enabled, current_device, raw_stream, empty_like)
//                                   torch's objects hot_call uses (until called, or with
//                                   tensor_type None: None always). Not under torch.compile:
//                                   the caller tests that before calling (dynamo must not
//                                   meet a C call in what it traces)
//   hot_call(table, *args) -> out, True (an op without output), or None
//       table: {signature: plan}, signature = (thread ident, current device, its current
//       raw stream, per arg: (shape, dtype, get_device()) for a tensor, else the arg
//       itself); plan: the tuple of the kPlan* fields.

static PyObject* g_tensor_type = NULL;
static PyObject* g_grad_enabled = NULL;
static PyObject* g_current_device = NULL;
static PyObject* g_raw_stream = NULL;
static PyObject* g_empty_like = NULL;
#define KTUNE_HOT_NAMES 9
static PyObject* g_names[KTUNE_HOT_NAMES];  // interned attribute names, see kName*

enum { kNameShape, kNameDtype, kNameGetDevice, kNameIsContiguous, kNameRequiresGrad,
       kNameDataPtr, kNameNewEmpty, kNameTo, kNameAdd };
static const char* const kNames[KTUNE_HOT_NAMES] = {
    "shape", "dtype", "get_device", "is_contiguous", "requires_grad", "data_ptr", "new_empty",
    "to", "add_"};

// A plan's fields, by index (ktune/torch.py builds the tuple).
enum {
  kPlanGenCell,      // a list whose [0] must equal kPlanGen (the kernel cache's generation)
  kPlanGen,
  kPlanScratchCell,  // the same for the scratch buffers' epoch
  kPlanScratch,
  kPlanSteps,        // tuple of (launch plan, params address, layout bytes, ...) per launch
  kPlanSources,      // tuple of ints, one per launch value: kind << 8 | index
  kPlanMasks,        // tuple of ints, one per arg: address bits that must be 0 (tensors)
  kPlanConsts,       // tuple of values the sources of kind 3 name
  kPlanOutKind,      // 0 empty_like(args[out arg]), 1 args[out arg].new_empty(shape),
                     // 2 .new_empty(*kPlanOutShape) (shape, then a kwargs dict), 3 none
  kPlanOutArg,
  kPlanOutShape,
  kPlanOnError,      // on_error(launch index, CUresult): raises the named error
  kPlanKeep,         // what owns the parameter storage the steps write (kept alive by the
                     // plan: a thread's launcher goes with its thread, whose ident a new
                     // thread may get)
  kPlanConvert,      // tuple of (arg index, dtype): tensor args the kernel reads converted
                     // (args[i].to(dtype), e.g. rope's int64 positions to int32); their
                     // addresses are the copies'
  kPlanAddArg,       // None, or the index of an arg added to the output after the launches
                     // (out.add_(args[i]): linear's bias)
  kPlanFields
};
enum { kSourcePointer = 0, kSourceOut = 1, kSourceArg = 2, kSourceConst = 3 };
#define KTUNE_HOT_MAX_ARGS 8

static void SetGlobal(PyObject** slot, PyObject* value) {
  PyObject* old = *slot;
  Py_INCREF(value);
  *slot = value;
  Py_XDECREF(old);
}

static PyObject* HotSetup(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError,
                    "hot_setup(tensor_type, is_grad_enabled, current_device, raw_stream, "
                    "empty_like) takes 5 arguments");
    return NULL;
  }
  if (args[0] != Py_None) {  // None turns the hot path off
    for (int i = 1; i < 5; ++i) {
      if (!PyCallable_Check(args[i])) {
        PyErr_Format(PyExc_TypeError, "hot_setup: argument %d must be callable", i + 1);
        return NULL;
      }
    }
  }
  for (int i = 0; i < KTUNE_HOT_NAMES; ++i) {
    if (g_names[i] == NULL && (g_names[i] = PyUnicode_InternFromString(kNames[i])) == NULL) {
      return NULL;
    }
  }
  SetGlobal(&g_grad_enabled, args[1]);
  SetGlobal(&g_current_device, args[2]);
  SetGlobal(&g_raw_stream, args[3]);
  SetGlobal(&g_empty_like, args[4]);
  SetGlobal(&g_tensor_type, args[0]);  // last: hot_call is live once it is set
  Py_RETURN_NONE;
}

// PyObject_IsTrue of fn(), -1 with an exception set on error.
static int CallTruth(PyObject* fn) {
  PyObject* r = PyObject_CallNoArgs(fn);
  if (r == NULL) return -1;
  const int t = PyObject_IsTrue(r);
  Py_DECREF(r);
  return t;
}

// fn(arg) (PyObject_CallOneArg is not in the 3.11 stable ABI).
static PyObject* CallOne(PyObject* fn, PyObject* arg) {
  return PyObject_CallFunctionObjArgs(fn, arg, NULL);
}

static PyObject* CallMethod0(PyObject* obj, int name) {
  return PyObject_CallMethodObjArgs(obj, g_names[name], NULL);
}

// Whether cell[0] == value (-1: error).
static int CellHolds(PyObject* cell, PyObject* value) {
  if (!PyList_Check(cell) || PyList_Size(cell) < 1) return 0;
  return PyObject_RichCompareBool(PyList_GetItem(cell, 0), value, Py_EQ);
}

// The signature of a call (see the header), or NULL with no exception set when the call is
// not for the hot path (a tensor subclass, not contiguous, recorded by autograd), or NULL
// with one set on error.
static PyObject* Signature(PyObject* const* args, Py_ssize_t n, int grad, PyObject* device,
                           PyObject* stream) {
  PyObject* sig = PyTuple_New(n + 3);
  if (sig == NULL) return NULL;
  PyObject* ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
  if (ident == NULL || PyTuple_SetItem(sig, 0, ident) != 0) goto fail;
  Py_INCREF(device);
  PyTuple_SetItem(sig, 1, device);
  Py_INCREF(stream);
  PyTuple_SetItem(sig, 2, stream);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = args[i];
    if ((PyObject*)Py_TYPE(a) != g_tensor_type) {
      const int sub = PyObject_IsInstance(a, g_tensor_type);
      if (sub != 0) goto fail;  // a subclass (fake tensors...), or an error
      Py_INCREF(a);
      PyTuple_SetItem(sig, i + 3, a);
      continue;
    }
    PyObject* r = CallMethod0(a, kNameIsContiguous);
    if (r == NULL) goto fail;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (t != 1) goto fail;
    if (grad) {
      r = PyObject_GetAttr(a, g_names[kNameRequiresGrad]);
      if (r == NULL) goto fail;
      t = PyObject_IsTrue(r);
      Py_DECREF(r);
      if (t != 0) goto fail;
    }
    PyObject* shape = PyObject_GetAttr(a, g_names[kNameShape]);
    PyObject* dtype = shape ? PyObject_GetAttr(a, g_names[kNameDtype]) : NULL;
    PyObject* where = dtype ? CallMethod0(a, kNameGetDevice) : NULL;
    PyObject* item = where ? PyTuple_Pack(3, shape, dtype, where) : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(where);
    if (item == NULL || PyTuple_SetItem(sig, i + 3, item) != 0) goto fail;
  }
  return sig;
fail:  // not for the hot path, or (with an exception set) an error
  Py_DECREF(sig);
  return NULL;
}

// The launch values of `plan` for this call: pointers[i] of the tensor args, the output's
// address, the args themselves, the plan's constants.
static PyObject* Values(PyObject* plan, PyObject* const* args, Py_ssize_t n,
                        const unsigned long long* pointers, unsigned long long out_address) {
  PyObject* sources = PyTuple_GetItem(plan, kPlanSources);
  PyObject* consts = PyTuple_GetItem(plan, kPlanConsts);
  if (sources == NULL || consts == NULL || !PyTuple_Check(sources) || !PyTuple_Check(consts)) {
    PyErr_SetString(PyExc_TypeError, "hot_call: a plan's sources and consts must be tuples");
    return NULL;
  }
  const Py_ssize_t count = PyTuple_Size(sources);
  PyObject* values = PyTuple_New(count);
  if (values == NULL) return NULL;
  for (Py_ssize_t i = 0; i < count; ++i) {
    const long code = PyLong_AsLong(PyTuple_GetItem(sources, i));
    if (code == -1 && PyErr_Occurred()) goto fail;
    const long kind = code >> 8, index = code & 0xFF;
    PyObject* v = NULL;
    if (kind == kSourcePointer && index < n) {
      v = PyLong_FromUnsignedLongLong(pointers[index]);
    } else if (kind == kSourceOut) {
      v = PyLong_FromUnsignedLongLong(out_address);
    } else if (kind == kSourceArg && index < n) {
      v = args[index];
      Py_INCREF(v);
    } else if (kind == kSourceConst && index < PyTuple_Size(consts)) {
      v = PyTuple_GetItem(consts, index);
      Py_INCREF(v);
    } else {
      PyErr_Format(PyExc_ValueError, "hot_call: source %ld names nothing", code);
      goto fail;
    }
    if (v == NULL || PyTuple_SetItem(values, i, v) != 0) goto fail;
  }
  return values;
fail:
  Py_DECREF(values);
  return NULL;
}

// The output for `plan` (a new reference; Py_True for an op without one).
static PyObject* MakeOut(PyObject* plan, PyObject* const* args, Py_ssize_t n) {
  const long kind = PyLong_AsLong(PyTuple_GetItem(plan, kPlanOutKind));
  const long at = PyLong_AsLong(PyTuple_GetItem(plan, kPlanOutArg));
  if (PyErr_Occurred()) return NULL;
  if (kind == 3) Py_RETURN_TRUE;
  if (at < 0 || at >= n) {
    PyErr_SetString(PyExc_ValueError, "hot_call: a plan's output arg is out of range");
    return NULL;
  }
  if (kind == 0) return CallOne(g_empty_like, args[at]);
  PyObject* shape = PyTuple_GetItem(plan, kPlanOutShape);
  PyObject* new_empty = PyObject_GetAttr(args[at], g_names[kNameNewEmpty]);
  if (new_empty == NULL) return NULL;
  PyObject* out = NULL;
  if (kind == 1) {
    out = CallOne(new_empty, shape);
  } else if (kind == 2 && PyTuple_Check(shape) && PyTuple_Size(shape) == 2 &&
             PyDict_Check(PyTuple_GetItem(shape, 1))) {
    PyObject* call_args = PyTuple_Pack(1, PyTuple_GetItem(shape, 0));
    if (call_args != NULL) {
      out = PyObject_Call(new_empty, call_args, PyTuple_GetItem(shape, 1));
      Py_DECREF(call_args);
    }
  } else {
    PyErr_Format(PyExc_ValueError,
                 "hot_call: output kind %ld is none of 0..3 (2: with (shape, kwargs dict))",
                 kind);
  }
  Py_DECREF(new_empty);
  return out;
}

// Runs the plan's launches with `values` on `stream`: 0 when all were enqueued, -1 with an
// exception set (a launch's CUresult raised by the plan's on_error).
static int RunSteps(PyObject* plan, PyObject* stream, PyObject* values) {
  PyObject* steps = PyTuple_GetItem(plan, kPlanSteps);
  if (steps == NULL || !PyTuple_Check(steps)) {
    PyErr_SetString(PyExc_TypeError, "hot_call: a plan's steps must be a tuple");
    return -1;
  }
  for (Py_ssize_t i = 0; i < PyTuple_Size(steps); ++i) {
    PyObject* step = PyTuple_GetItem(steps, i);
    if (!PyTuple_Check(step) || PyTuple_Size(step) < 3) {
      PyErr_SetString(PyExc_TypeError, "hot_call: a step is (plan, params, layout, ...)");
      return -1;
    }
    if (!WriteLayout(PyTuple_GetItem(step, 2), values)) return -1;
    PyObject* launch_args[3] = {PyTuple_GetItem(step, 0), stream, PyTuple_GetItem(step, 1)};
    PyObject* result = Launch(NULL, launch_args, 3);
    if (result == NULL) return -1;
    const long err = PyLong_AsLong(result);
    Py_DECREF(result);
    if (err != 0) {
      PyObject* r = PyObject_CallFunction(PyTuple_GetItem(plan, kPlanOnError), "nl", i, err);
      Py_XDECREF(r);
      if (r != NULL) {
        PyErr_Format(PyExc_RuntimeError, "hot_call: launch %zd failed: CUresult %ld", i, err);
      }
      return -1;
    }
  }
  return 0;
}

static PyObject* HotCall(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 1 || !PyDict_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "hot_call(table, *args): table must be a dict");
    return NULL;
  }
  const Py_ssize_t n = nargs - 1;
  PyObject* const* call = args + 1;
  if (g_tensor_type == NULL || g_tensor_type == Py_None || n > KTUNE_HOT_MAX_ARGS) {
    Py_RETURN_NONE;
  }
  const int grad = CallTruth(g_grad_enabled);
  if (grad < 0) return NULL;
  // The device whose context launches run in and its current stream: part of the
  // signature, so a plan (its module's device, its scratch buffers' stream) serves only
  // where it was made.
  // Where they fail (no driver: the call cannot be one of a plan), the Python path says why.
  PyObject* device = PyObject_CallNoArgs(g_current_device);
  PyObject* stream = device ? CallOne(g_raw_stream, device) : NULL;
  if (stream == NULL) {
    Py_XDECREF(device);
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  PyObject* sig = Signature(call, n, grad, device, stream);
  Py_DECREF(device);
  if (sig == NULL) {
    Py_XDECREF(stream);
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
  }
  PyObject* plan = PyDict_GetItemWithError(args[0], sig);  // borrowed
  Py_DECREF(sig);
  if (plan == NULL || !PyTuple_Check(plan) || PyTuple_Size(plan) != kPlanFields) {
    PyObject* result = NULL;
    if (plan != NULL) {
      PyErr_SetString(PyExc_TypeError, "hot_call: a plan must be a tuple of its fields");
    } else if (!PyErr_Occurred()) {
      result = Py_NewRef(Py_None);  // no plan: the Python path makes one
    } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();  // an unhashable arg: not for the hot path
      result = Py_NewRef(Py_None);
    }
    Py_DECREF(stream);
    return result;
  }
  Py_INCREF(plan);  // the table may change while torch runs Python (the output's allocation)
  PyObject* out = NULL;
  PyObject* result = NULL;
  // 1: launch; 0: take the Python path; -1: an error (set).
  int ok = CellHolds(PyTuple_GetItem(plan, kPlanGenCell), PyTuple_GetItem(plan, kPlanGen));
  if (ok == 1) {
    ok = CellHolds(PyTuple_GetItem(plan, kPlanScratchCell),
                   PyTuple_GetItem(plan, kPlanScratch));
  }
  unsigned long long pointers[KTUNE_HOT_MAX_ARGS] = {0};
  PyObject* masks = PyTuple_GetItem(plan, kPlanMasks);
  if (ok == 1 && (masks == NULL || !PyTuple_Check(masks))) {
    PyErr_SetString(PyExc_TypeError, "hot_call: a plan's masks must be a tuple");
    ok = -1;
  }
  for (Py_ssize_t i = 0; ok == 1 && i < n; ++i) {
    if ((PyObject*)Py_TYPE(call[i]) != g_tensor_type) continue;
    PyObject* p = CallMethod0(call[i], kNameDataPtr);
    if (p == NULL) {
      ok = -1;
      break;
    }
    pointers[i] = PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    const unsigned long long mask =
        i < PyTuple_Size(masks) ? PyLong_AsUnsignedLongLong(PyTuple_GetItem(masks, i)) : 15ull;
    if (PyErr_Occurred()) {
      ok = -1;
    } else if (pointers[i] & mask) {
      ok = 0;  // off its alignment: the Python path falls back to torch
    }
  }
  // Conversions: a copy per call, alive until its launches are enqueued (the caching
  // allocator reuses freed memory in stream order, so the kernel still reads it).
  PyObject* converted[KTUNE_HOT_MAX_ARGS] = {NULL};
  PyObject* convert = PyTuple_GetItem(plan, kPlanConvert);
  if (ok == 1 && convert != Py_None) {
    if (convert == NULL || !PyTuple_Check(convert)) {
      PyErr_SetString(PyExc_TypeError, "hot_call: a plan's conversions must be a tuple");
      ok = -1;
    }
    for (Py_ssize_t c = 0; ok == 1 && c < PyTuple_Size(convert); ++c) {
      PyObject* pair = PyTuple_GetItem(convert, c);
      const long at = PyTuple_Check(pair) && PyTuple_Size(pair) == 2
                          ? PyLong_AsLong(PyTuple_GetItem(pair, 0))
                          : -1;
      if (at < 0 || at >= n || converted[at] != NULL) {
        if (!PyErr_Occurred()) {
          PyErr_SetString(PyExc_ValueError, "hot_call: a conversion names no arg");
        }
        ok = -1;
        break;
      }
      converted[at] =
          PyObject_CallMethodObjArgs(call[at], g_names[kNameTo], PyTuple_GetItem(pair, 1), NULL);
      PyObject* p = converted[at] ? CallMethod0(converted[at], kNameDataPtr) : NULL;
      if (p == NULL) {
        ok = -1;
        break;
      }
      pointers[at] = PyLong_AsUnsignedLongLong(p);
      Py_DECREF(p);
      if (PyErr_Occurred()) ok = -1;
    }
  }
  if (ok == 1 && (out = MakeOut(plan, call, n)) == NULL) ok = -1;
  unsigned long long out_address = 0;
  if (ok == 1 && out != Py_True) {
    PyObject* p = CallMethod0(out, kNameDataPtr);
    if (p == NULL) {
      ok = -1;
    } else {
      out_address = PyLong_AsUnsignedLongLong(p);
      Py_DECREF(p);
      if (PyErr_Occurred()) ok = -1;
    }
  }
  if (ok == 1) {
    PyObject* values = Values(plan, call, n, pointers, out_address);
    if (values == NULL || RunSteps(plan, stream, values) != 0) ok = -1;
    Py_XDECREF(values);
  }
  PyObject* add = PyTuple_GetItem(plan, kPlanAddArg);
  if (ok == 1 && add != NULL && add != Py_None) {
    const long at = PyLong_AsLong(add);
    if (at < 0 || at >= n || out == Py_True) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "hot_call: an add names no arg");
      ok = -1;
    } else {
      PyObject* r = PyObject_CallMethodObjArgs(out, g_names[kNameAdd], call[at], NULL);
      if (r == NULL) ok = -1;
      Py_XDECREF(r);
    }
  }
  if (ok == 1) {
    result = out;
    out = NULL;
  } else if (ok == 0) {
    result = Py_NewRef(Py_None);
  }  // ok < 0: NULL with the exception set
  Py_XDECREF(out);
  for (Py_ssize_t i = 0; i < n; ++i) Py_XDECREF(converted[i]);
  Py_DECREF(stream);
  Py_DECREF(plan);
  return result;
}

static PyMethodDef kMethods[] = {
    {"set_launch", SetLaunch, METH_O, "set_launch(address): the cuLaunchKernel to call"},
    {"set_launch_ex", SetLaunchEx, METH_O,
     "set_launch_ex(address): the cuLaunchKernelEx a plan with flags bit 0 calls"},
    {"set_replace_address", SetReplaceAddress, METH_O,
     "set_replace_address(address): the cuTensorMapReplaceAddress layout kind 4 calls"},
    {"launch", (PyCFunction)(void (*)(void))Launch, METH_FASTCALL,
     "launch(plan, stream, params) -> CUresult"},
    {"launch_with", (PyCFunction)(void (*)(void))LaunchWith, METH_FASTCALL,
     "launch_with(plan, stream, params, layout, values) -> CUresult"},
    {"hot_setup", (PyCFunction)(void (*)(void))HotSetup, METH_FASTCALL,
     "hot_setup(tensor_type, is_grad_enabled, current_device, raw_stream, empty_like)"},
    {"hot_call", (PyCFunction)(void (*)(void))HotCall, METH_FASTCALL,
     "hot_call(table, *args) -> the output, True, or None (take the Python path)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "ktune._fastlaunch",
    "cuLaunchKernel from C for ktune's hot path (see _fastlaunch.c)", -1, kMethods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastlaunch(void) { return PyModule_Create(&kModule); }
