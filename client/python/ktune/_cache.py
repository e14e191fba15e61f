"""ktune.KernelCache: loaded kernels kept in-process, keyed by (template, dtype, shape, gpu).

    cache = ktune.KernelCache(ktune.Client(target))         # policy "fallback" by default
    cache.prefetch([("rmsnorm", "bf16", {"tokens": 8, "hidden": 4096}), ...])  # one call
    k = cache.get("rmsnorm", "bf16", {"tokens": 8, "hidden": 4096})
    k.launch({"x": x.data_ptr(), "weight": w.data_ptr(), "out": out.data_ptr()}, stream)
    run = k.launcher(("x", "weight", "out"))    # the hot path: values in this order
    run(stream, x.data_ptr(), w.data_ptr(), out.data_ptr())

The first get of a key asks ktuned (under `policy`) and loads the artifact into the calling
thread's current CUDA context; later gets are a dict lookup (no lock, no RPC) returning the
same CachedKernel, whose launches reuse their kernelParams arrays (packed once per thread;
only the buffer pointers are written per call). A non-exact answer (FALLBACK's neighbour or
default config, or a stale entry) is checked again by a background thread every `refresh_s`,
with one CACHE_ONLY GetKernels call for all such keys; when ktuned has the tuned kernel, the
thread loads it into the same context and the next get returns it. The hot path never waits
for that.

A failed ask (no daemon: ktune.UnavailableError naming the target; a bad key:
InvalidArgumentError naming the field) is remembered for `retry_after_s`: gets of that key
raise the same error at once instead of asking again.

Thread-safety: every method may be called from many threads; a key asked by several at once
is fetched once. One CUDA context per gpu value of the keys (torch's primary contexts).
cuda-python is imported on first load only; `driver` replaces it (tests pass a fake).
"""

import ctypes
import operator
import struct
import threading
import time

from ktune import _errors
from ktune._launch import PackedParams, _SCALAR_CTYPES, check_alignment
from ktune._loaded import LoadedKernel, check_launch, cuda_check, cuda_driver

_MAX_BOUND = 32  # address sets a tensor-map kernel keeps bound (see CachedKernel)
# launch_with's kind of each parameter storage type (ktune/_fastlaunch.c).
_KINDS = {ctypes.c_uint64: 0, ctypes.c_int32: 1, ctypes.c_int64: 2, ctypes.c_float: 3}
_KIND_MAP_ADDRESS = 4  # an encoded CUtensorMap re-pointed at the value's address


def fast_with(fast):
    """ktune._fastlaunch.launch_with where `fast` is its launch; else None."""
    if fast is None:
        return None
    try:
        from ktune import _fastlaunch
    except ImportError:
        return None
    return _fastlaunch.launch_with if fast is _fastlaunch.launch else None


def cache_key(template, dtype, shape, gpu=0):
    """The hashable key of the cache: (template, dtype, sorted shape items, gpu)."""
    return (template, dtype, tuple(sorted(shape.items())), gpu)


def key_string(key):
    """"rmsnorm bf16 hidden=4096,tokens=8 gpu 0", for messages."""
    template, dtype, shape, gpu = key
    return f"{template} {dtype} {','.join(f'{d}={n}' for d, n in shape)} gpu {gpu}"


def _named(error, key):
    """`error` (a ktune.Error) with the key in front of its message."""
    return type(error)(f"{key_string(key)}: {error.message}", code=error.code)


class CachedKernel:
    """One key's kernel as the cache holds it now; a refresh installs a new object.

    artifact, kernel (a ktune.LoadedKernel), context (the CUcontext it was loaded into),
    provenance ("exact", "nearest", "default") and provisional (True while the background
    check goes on for it: not exact, or stale)."""

    def __init__(self, artifact, kernel, context):
        self.artifact = artifact
        self.kernel = kernel
        self.context = context
        self.provenance = artifact.provenance
        self.provisional = artifact.provenance != "exact" or artifact.stale
        self.buffers = tuple(a.name for a in artifact.args if a.is_buffer)
        # The buffer args whose address the launches check (alignment > 1), by name.
        self._aligned = {a.name: a for a in artifact.args if a.is_buffer and a.alignment > 1}
        # Tensor maps are encoded from the buffers' addresses (cuTensorMapEncodeTiled, tens
        # of us from Python). With the C launch and cuTensorMapReplaceAddress (fast_maps),
        # a launcher encodes its maps once and points them at each call's buffers from C;
        # otherwise such kernels keep a BoundKernel per set of addresses, the last
        # _MAX_BOUND sets (torch's caching allocator hands a steady loop the same addresses
        # again, so the hot path is a dict hit).
        self._per_call = any(a.scalar_type == "tensor_map" for a in artifact.args)
        # The kernel's launch from C (LoadedKernel.fast) or None; with it, callers may pass
        # the stream as its int handle (ktune.torch does).
        self.fast = getattr(kernel, "fast", None)  # a custom loader's kernel may have none
        self.fast_maps = getattr(kernel, "fast_maps", False)
        self._plans = getattr(kernel, "plans", None)
        self._bound = {}
        self._bound_lock = threading.Lock()
        self._local = threading.local()

    def _packed(self):
        """This thread's kernelParams per launch: (params, {buffer: [slots]}, {scalar: slot})."""
        packed = getattr(self._local, "packed", None)
        if packed is None:
            packed = self._local.packed = [self._pack(launch) for launch in
                                           self.artifact.launches]
        return packed

    def _pack(self, launch):
        values, buffers, scalars = [], {}, {}
        for i in launch.args:
            arg = self.artifact.args[i]
            if arg.is_buffer:
                slot = ctypes.c_uint64(0)
                buffers.setdefault(arg.name, []).append(slot)
            else:
                ctype = _SCALAR_CTYPES.get(arg.scalar_type)
                if ctype is None:
                    raise ValueError(f"arg '{arg.name}': unknown scalar type "
                                     f"'{arg.scalar_type}'")
                slot = ctype(arg.value)
                scalars[arg.name] = slot
            values.append(slot)
        return PackedParams(values), buffers, scalars

    def _bound_kernel(self, pointers):
        """The BoundKernel for these addresses: kept from an earlier call, or bound now."""
        try:
            addresses = tuple(int(pointers[name]) for name in self.buffers)
        except KeyError as e:
            raise KeyError(f"no device pointer for buffer '{e.args[0]}'") from None
        bound = self._bound.get(addresses)
        if bound is None:
            bound = self.kernel.bind(pointers)
            with self._bound_lock:
                if len(self._bound) >= _MAX_BOUND:
                    del self._bound[next(iter(self._bound))]  # the oldest set
                self._bound[addresses] = bound
        return bound

    def launcher(self, names):
        """A call run(stream, *values) that enqueues every launch with values[i] as the arg
        names[i]: a buffer's device address (an int) or a scalar's value; args the names
        leave out keep the artifact's values (a buffer left out: ValueError now). The hot
        path of callers that pass the same args every call (ktune.torch): one C call per
        launch writes the values into this launcher's own kernelParams and enqueues (where
        `fast` is set), instead of a dict walk and a ctypes assignment per value. Kept per
        thread and names tuple, so the first call of each makes it. Raises ValueError naming
        an arg the artifact does not have; run raises ValueError naming a buffer whose
        address is off its alignment, before any launch of the run is enqueued."""
        try:
            return self._local.launchers[names]
        except (AttributeError, KeyError):  # this thread's first call, or these names'
            pass
        launchers = getattr(self._local, "launchers", None)
        if launchers is None:
            launchers = self._local.launchers = {}
        run = launchers[names] = self._make_launcher(names)
        return run

    def _make_launcher(self, names):
        known = {a.name for a in self.artifact.args}
        for name in names:
            if name not in known:
                raise ValueError(f"{self.artifact.key.template_id}: no arg '{name}'")
        missing = [b for b in self.buffers if b not in names]
        if missing:
            raise ValueError(f"{self.artifact.key.template_id}: no value for buffer "
                             f"'{missing[0]}'")
        if self._per_call:
            return self._map_launcher(names)
        index = {name: i for i, name in enumerate(names)}
        packed = [self._pack(launch) for launch in self.artifact.launches]
        # Per launch: the storage each named value goes into, with its index in values and
        # launch_with's kind (a buffer's carries its alignment, checked in C).
        slots = [[(slot, index[name], _KINDS[ctypes.c_uint64] | self._alignment_bits(name))
                  for name, targets in buffers.items() for slot in targets]
                 + [(slot, index[name], _KINDS[type(slot)])
                    for name, slot in scalars.items() if name in index]
                 for _, buffers, scalars in packed]
        cu = self.kernel.driver
        launches = self.artifact.launches
        with_values = fast_with(self.fast)
        if with_values is not None:
            # launch_with's layout: (storage address, kind, value index) entries.
            layout = b"".join(struct.pack("=QII", ctypes.addressof(slot), kind, at)
                              for launch_slots in slots for slot, at, kind in launch_slots)
            steps = self._steps([params for params, _, _ in packed], layout)

            def run(stream, *values, keep=packed):
                for plan, address, layout, launch in steps:
                    try:
                        err = with_values(plan, stream, address, layout, values)
                    except ValueError as e:
                        raise ValueError(self._misaligned_message(names, values) or
                                         str(e)) from None
                    if err != 0:
                        check_launch(cu, err, launch)
            # What a caller may replay from C (ktune.torch's hot path): [(owner, steps)].
            run.steps_ref = [(packed, steps)]
            return run

        steps = [(self.kernel.functions[i], params.address,
                  [(slot, at) for slot, at, _ in slots[i]], launch)
                 for i, ((params, _, _), launch) in enumerate(zip(packed, launches))]
        aligned = [(at, self._aligned[name]) for name, at in index.items()
                   if name in self._aligned]

        def run_through_driver(stream, *values, keep=packed):
            for at, arg in aligned:
                check_alignment(arg, values[at])
            for function, address, launch_slots, launch in steps:
                for slot, at in launch_slots:
                    slot.value = values[at]
                err = cu.cuLaunchKernel(function, *launch.grid, *launch.block,
                                        launch.shared_bytes, stream, address, 0)
                if err != 0:
                    check_launch(cu, err, launch)
        return run_through_driver

    def _steps(self, params, layout):
        """(plan, kernelParams address, layout, launch) per launch, for launch_with: the
        whole layout (every launch's entries) goes with the first launch, so every value is
        written and checked before anything is enqueued (a refused address must not leave
        half a run)."""
        return [(plan, p.address, layout if i == 0 else b"", launch)
                for i, (plan, p, launch) in enumerate(zip(self._plans, params,
                                                          self.artifact.launches))]

    def _alignment_bits(self, name):
        """A buffer's alignment in launch_with's kind (bits 8 and up), 0 when unchecked."""
        arg = self._aligned.get(name)
        return arg.alignment << 8 if arg is not None else 0

    def _misaligned_message(self, names, values):
        """The message naming the buffer among `values` (named by `names`) that is off its
        alignment, or None: launch_with's own message knows only an index."""
        for name, value in zip(names, values):
            arg = self._aligned.get(name)
            if arg is not None and isinstance(value, int):
                try:
                    check_alignment(arg, value)
                except ValueError as e:
                    return str(e)
        return None

    def _map_launcher(self, names):
        """launcher() for a kernel that takes tensor maps (the scalars are the artifact's: a
        value for one is refused): from C with its maps re-pointed per call where it can
        (fast_maps), else a BoundKernel per set of buffer addresses."""
        scalars = [n for n in names if n not in self.buffers]
        if scalars:
            raise ValueError("this kernel takes tensor maps; its scalars are the artifact's "
                             f"(got a value for '{scalars[0]}')")
        with_values = fast_with(self.fast) if self.fast_maps else None
        if with_values is not None:
            return self._map_launcher_c(names, with_values)
        # itemgetter (C) picks the buffers' values in the artifact's order, in a third of a
        # generator's time; one index more than there are buffers keeps its result a tuple
        # even for a single buffer, and is sliced off.
        pick = operator.itemgetter(*(names.index(b) for b in self.buffers), 0)

        def run(stream, *values):
            addresses = pick(values)[:-1]
            bound = self._bound.get(addresses)
            if bound is None:
                bound = self._bound_kernel(dict(zip(self.buffers, addresses)))
            bound.launch(stream)
        return run

    def _map_launcher_c(self, names, with_values):
        """The C launch for a tensor-map kernel: at its first call this launcher packs its
        own kernelParams with every map encoded from that call's addresses; each call then
        has launch_with write the buffers' addresses and re-point each map at its buffer
        (cuTensorMapReplaceAddress, the map's shape and box unchanged), one C call a launch.
        The storage is this launcher's alone (launchers are per thread), so no other
        launch reads a map while it changes."""
        index = {name: i for i, name in enumerate(names)}
        args = self.artifact.args
        cu = self.kernel.driver
        state = []  # [(the BoundKernel that owns the storage, steps)] after the first call

        def prepare(values):
            bound = self.kernel.bind({b: values[index[b]] for b in self.buffers})
            layout = []
            for params, launch in zip(bound.params, self.artifact.launches):
                for j, a in enumerate(launch.args):
                    arg = args[a]
                    if arg.is_buffer:
                        kind = _KINDS[ctypes.c_uint64] | self._alignment_bits(arg.name)
                        at = index[arg.name]
                    elif arg.scalar_type == "tensor_map":
                        kind = _KIND_MAP_ADDRESS
                        at = index[args[arg.tensor_map.buffer_arg].name]
                    else:
                        continue  # the artifact's scalar, packed once
                    layout.append(struct.pack("=QII", params.address_of(j), kind, at))
            state.append((bound, self._steps(bound.params, b"".join(layout))))

        def run(stream, *values):
            if not state:
                prepare(values)
            for plan, address, layout, launch in state[0][1]:
                try:
                    err = with_values(plan, stream, address, layout, values)
                except (ValueError, RuntimeError) as e:
                    raise type(e)(f"{self.artifact.key.template_id} (values for "
                                  f"{', '.join(names)}): {e}") from None
                if err != 0:
                    check_launch(cu, err, launch)
        run.steps_ref = state  # as _make_launcher's: filled at the first call
        return run

    def launch(self, pointers, stream, scalars=None):
        """Enqueues every launch on `stream` (a CUstream, its handle as an int where `fast`
        is set, or what the driver takes) with the
        device addresses `pointers` (buffer name -> int) and, for this call only, scalar
        values from `scalars` (name -> value, e.g. {"eps": 1e-5}) instead of the artifact's.
        Raises KeyError naming a buffer missing from `pointers`, ValueError naming one off
        its alignment (nothing launched), RuntimeError when the driver refuses a launch."""
        if self._per_call:
            if scalars:
                raise ValueError("this kernel takes tensor maps; its scalars are the artifact's")
            self._bound_kernel(pointers).launch(stream)
            return
        # Every address checked before the first launch is enqueued (none of a run, or all).
        for name, arg in self._aligned.items():
            if name in pointers:
                check_alignment(arg, int(pointers[name]))
        cu = self.kernel.driver
        fast = self.fast
        if fast is not None and type(stream) is not int:
            stream = int(stream)
        for i, ((params, buffers, slots), launch) in enumerate(zip(self._packed(),
                                                                  self.artifact.launches)):
            for name, targets in buffers.items():
                try:
                    address = int(pointers[name])
                except KeyError:
                    raise KeyError(f"no device pointer for buffer '{name}'") from None
                for slot in targets:
                    slot.value = address
            overridden = []
            if scalars:
                for name, value in scalars.items():
                    slot = slots.get(name)
                    if slot is not None:
                        overridden.append((slot, slot.value))
                        slot.value = value
            try:
                if fast is not None:
                    err = fast(self._plans[i], stream, params.address)
                else:
                    err = cu.cuLaunchKernel(self.kernel.functions[i], *launch.grid,
                                            *launch.block, launch.shared_bytes, stream,
                                            params.address, 0)
            finally:
                for slot, value in overridden:
                    slot.value = value
            if err != 0:
                check_launch(cu, err, launch)


class KernelCache:
    """Loaded kernels per (template, dtype, shape, gpu) over a ktune.Client.

    policy: of each key's first ask and of prefetch ("fallback", "cache_only" or "tune");
    refresh_s: period of the background check of provisional kernels (None or 0: none, call
    refresh_now yourself); retry_after_s: how long a failed ask is answered from memory;
    timeout_s: deadline of each ask (None: the client's). `driver`: cuda-python's driver
    module or a stand-in; `loader(artifact, driver)` makes the launchable kernel (default
    ktune.LoadedKernel, with `programmatic`: whether its programmatic launches launch so;
    None: KTUNE_PROGRAMMATIC_LAUNCH decides, else off)."""

    def __init__(self, client, policy="fallback", refresh_s=10.0, retry_after_s=30.0,
                 timeout_s=None, driver=None, loader=None, programmatic=None):
        if policy not in ("fallback", "cache_only", "tune"):
            raise _errors.InvalidArgumentError(
                f"policy: '{policy}' is not one of fallback, cache_only, tune")
        self.client = client
        self.policy = policy
        self._retry_after_s = retry_after_s
        self._timeout_s = timeout_s
        self._driver = driver
        self._loader = loader or (lambda artifact, cu: LoadedKernel(artifact, driver=cu,
                                                                    programmatic=programmatic))
        self._entries = {}   # key -> CachedKernel; read without the lock (a dict get)
        # [n], n counting the changes to _entries: whoever keeps something of an entry
        # outside the cache (ktune.torch's hot path) knows it is still the one held.
        self.generation = [0]
        self._errors = {}    # key -> (ktune.Error, monotonic time it may be asked again)
        self._fetching = {}  # key -> threading.Event set when that fetch ends
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if refresh_s:
            self._thread = threading.Thread(target=self._refresh_loop, args=(refresh_s,),
                                            name="ktune-cache-refresh", daemon=True)
            self._thread.start()

    # ---- the hot path ----

    def get(self, template, dtype, shape, gpu=0):
        """The key's CachedKernel (see get_key)."""
        return self.get_key(cache_key(template, dtype, shape, gpu))

    def peek(self, key):
        """The CachedKernel of `key` if held now, else None; never asks or loads."""
        return self._entries.get(key)

    def get_key(self, key):
        """The CachedKernel of `key` (from cache_key): from memory, or asked and loaded now.
        Raises the ktune.Error of the ask (its message naming the key), remembered for
        retry_after_s; FailedPreconditionError when the kernel cannot be loaded (no current
        CUDA context, a driver error)."""
        entry = self._entries.get(key)
        if entry is not None:
            return entry
        return self._get_slow(key)

    # ---- warm-up and refresh ----

    def prefetch(self, keys):
        """Asks every key not yet held in one GetKernels call (several past
        MAX_KERNELS_PER_CALL) and loads them into the current context. keys: (template,
        dtype, shape[, gpu]) tuples. Returns one item per key: None when it is held now, else
        the ktune.Error get would raise (a key whose ask failed within retry_after_s keeps
        its error without a new ask)."""
        normal = [cache_key(k[0], k[1], k[2], k[3] if len(k) > 3 else 0) for k in keys]
        mine = self._claim(normal)
        if mine:
            try:
                answers = self.client.get_kernels(
                    [(k[0], k[1], dict(k[2]), k[3]) for k, _ in mine], policy=self.policy,
                    timeout_s=self._timeout_s)
            except _errors.Error as e:
                answers = [e] * len(mine)
            except Exception as e:  # noqa: BLE001 - waiters must never wait on a dead fetch
                answers = [_errors.InternalError(f"{type(e).__name__}: {e}")] * len(mine)
            for j, ((key, event), answer) in enumerate(zip(mine, answers)):
                if isinstance(answer, _errors.Error):
                    message = answer.message
                    theirs = f"requests[{j}]"
                    if message.startswith(theirs):
                        message = message[len(theirs):].lstrip(":. ")
                    self._end_fetch(key, event,
                                    error=_named(type(answer)(message, code=answer.code), key))
                else:
                    self._end_fetch(key, event, *self._load(key, answer, None))
        out = []
        for key in normal:
            try:
                self.get_key(key)
                out.append(None)
            except _errors.Error as e:
                out.append(e)
        return out

    def refresh_now(self):
        """One background check now: asks ktuned (CACHE_ONLY, one call) for every provisional
        kernel and installs the tuned ones it has (a tuned config that is the one held keeps
        its loaded module, now marked exact). Returns how many keys it settled; 0 when
        ktuned cannot be reached (the provisional kernels keep serving)."""
        provisional = [(k, e) for k, e in list(self._entries.items()) if e.provisional]
        if not provisional:
            return 0
        try:
            answers = self.client.get_kernels(
                [(k[0], k[1], dict(k[2]), k[3]) for k, _ in provisional], policy="cache_only",
                timeout_s=self._timeout_s)
        except _errors.Error:
            return 0
        replaced = 0
        for (key, before), answer in zip(provisional, answers):
            if (isinstance(answer, _errors.Error) or answer.provenance != "exact"
                    or answer.stale):
                continue
            if answer.cubin_sha256 == before.artifact.cubin_sha256:
                # The tuned config is the one held: keep its module, now marked exact.
                entry = CachedKernel(answer, before.kernel, before.context)
            else:
                entry, _ = self._load(key, answer, before.context)
                if entry is None:
                    continue  # the provisional kernel keeps serving
            with self._lock:
                self._entries[key] = entry
                self.generation[0] += 1
            replaced += 1
        return replaced

    def close(self):
        """Stops the background thread (the loaded kernels stay usable)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- inside ----

    def _get_slow(self, key):
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    return entry
                failed = self._errors.get(key)
                if failed is not None and time.monotonic() < failed[1]:
                    raise failed[0]
                event = self._fetching.get(key)
                mine = event is None
                if mine:
                    event = self._fetching[key] = threading.Event()
            if not mine:
                event.wait()
                continue
            template, dtype, shape, gpu = key
            entry, error = None, None
            try:
                artifact = self.client.get_kernel(template, dtype, dict(shape),
                                                  policy=self.policy, gpu=gpu,
                                                  timeout_s=self._timeout_s)
                entry, error = self._load(key, artifact, None)
            except _errors.Error as e:
                error = _named(e, key)
            except Exception as e:  # noqa: BLE001 - waiters must never wait on a dead fetch
                error = _errors.InternalError(f"{key_string(key)}: {type(e).__name__}: {e}")
            self._end_fetch(key, event, entry, error)
            # The next turn returns the entry or raises the error just recorded.

    def _claim(self, keys):
        """(key, event) for each key this thread is to fetch (not held, not being fetched,
        no fresh error), marked as being fetched; a repeated key once."""
        mine = []
        now = time.monotonic()
        with self._lock:
            for key in keys:
                if key in self._entries or key in self._fetching:
                    continue
                failed = self._errors.get(key)
                if failed is not None and now < failed[1]:
                    continue
                event = self._fetching[key] = threading.Event()
                mine.append((key, event))
        return mine

    def _end_fetch(self, key, event, entry=None, error=None):
        with self._lock:
            if entry is not None:
                self._entries[key] = entry
                self.generation[0] += 1
                self._errors.pop(key, None)
            else:
                self._errors[key] = (error, time.monotonic() + self._retry_after_s)
            del self._fetching[key]
        event.set()

    def _cu(self):
        if self._driver is None:
            self._driver = cuda_driver()
        return self._driver

    def _load(self, key, artifact, context):
        """(CachedKernel, None) for `artifact` loaded into `context` (pushed for the call) or,
        when None, the calling thread's current one; (None, FailedPreconditionError) when
        that fails."""
        try:
            cu = self._cu()
            if context is None:
                context = cuda_check(cu, cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
                if context is None or int(context) == 0:
                    raise RuntimeError("no current CUDA context on this thread (make the "
                                       "device current first: torch.cuda.set_device, or any "
                                       "torch CUDA call)")
                kernel = self._loader(artifact, cu)
            else:
                cuda_check(cu, cu.cuCtxPushCurrent(context), "cuCtxPushCurrent")
                try:
                    kernel = self._loader(artifact, cu)
                finally:
                    cu.cuCtxPopCurrent()
        except Exception as e:  # noqa: BLE001 - any driver or binding failure
            return None, _errors.FailedPreconditionError(
                f"{key_string(key)}: {type(e).__name__}: {e}")
        return CachedKernel(artifact, kernel, context), None

    def _refresh_loop(self, period_s):
        while not self._stop.wait(period_s):
            try:
                self.refresh_now()
            except Exception:  # noqa: BLE001 - a background check must never kill the thread
                pass
