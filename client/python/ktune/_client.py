"""ktune.Client: the daemon's RPCs over grpcio, answering with ktune's dataclasses.

Thread-safety: a Client may be shared by threads (a grpc.Channel is); close() it once, after
every call has returned.
"""

import os

import grpc

from ktune import _errors, _types
from ktune.v1 import ktune_pb2, ktune_pb2_grpc

_POLICIES = {
    "cache_only": ktune_pb2.CACHE_ONLY,
    "tune": ktune_pb2.TUNE,
    "fallback": ktune_pb2.FALLBACK,
}

# The most keys ktuned takes in one GetKernels call (ktune.proto's MAX_KERNELS_PER_CALL).
MAX_KERNELS_PER_CALL = ktune_pb2.MAX_KERNELS_PER_CALL

# Above the largest cubin ktuned sends (grpcio's default receive limit is 4 MiB).
_MAX_RECEIVE_BYTES = 256 << 20


def default_target():
    """Where ktuned listens by default, the rule of server/base/paths.cc: $KTUNE_DAEMON,
    else unix://$XDG_RUNTIME_DIR/ktune/ktuned.sock, else unix://<cache dir>/ktuned.sock
    with the cache dir $XDG_CACHE_HOME/ktune or ~/.cache/ktune."""
    env = os.environ.get("KTUNE_DAEMON")
    if env:
        return env
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run:
        return f"unix://{run}/ktune/ktuned.sock"
    cache = os.environ.get("XDG_CACHE_HOME")
    if cache:
        return f"unix://{cache}/ktune/ktuned.sock"
    home = os.environ.get("HOME")
    if home:
        return f"unix://{home}/.cache/ktune/ktuned.sock"
    return f"unix:///tmp/ktune-{os.getuid()}/ktuned.sock"


def _shape(shape):
    if not isinstance(shape, dict):
        raise _errors.InvalidArgumentError(
            f"shape: expected a dict of dim name to int, got {type(shape).__name__}")
    out = {}
    for k, v in shape.items():
        if isinstance(v, bool) or not isinstance(v, int):
            # numpy/torch integers convert through index(); anything else is a caller bug.
            try:
                v = v.__index__()
            except (AttributeError, TypeError):
                raise _errors.InvalidArgumentError(
                    f"shape: dim '{k}' is {v!r}, not an integer") from None
        out[str(k)] = v
    return out


def _result_from_proto(result, index, batch_index):
    """A KernelResult as an artifact or a ktune.Error, its "requests[batch_index]" renamed
    to the key's index in the caller's list."""
    if result.code == 0:
        try:
            return _types.artifact_from_proto(result.response.artifact,
                                              result.response.tuning_job_id)
        except _errors.Error as e:
            return type(e)(f"requests[{index}]: {e.message}", code=e.code)
    message = result.message
    theirs = f"requests[{batch_index}]"
    if message.startswith(theirs):
        message = f"requests[{index}]" + message[len(theirs):]
    else:
        message = f"requests[{index}]: {message}"
    return _errors.error_for_code(result.code, message)


class Client:
    """A client of the ktuned at `target` ("unix:///abs/path.sock" or "host:port"; None:
    default_target()). `token`: sent as "authorization: Bearer TOKEN" on every call.
    `timeout_s`: the deadline of each call unless the call gives its own; None: no deadline.

    Failed calls raise ktune.Error subclasses (NotFoundError, InvalidArgumentError, ...) with
    the daemon's message. Creating a Client does not connect; the first call does.
    """

    def __init__(self, target=None, token=None, timeout_s=None, options=None):
        self.target = target if target is not None else default_target()
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._timeout_s = timeout_s
        channel_options = [("grpc.max_receive_message_length", _MAX_RECEIVE_BYTES)]
        channel_options.extend(options or [])
        self._channel = grpc.insecure_channel(self.target, options=channel_options)
        self._stub = ktune_pb2_grpc.KtuneStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _timeout(self, timeout_s):
        return self._timeout_s if timeout_s is None else timeout_s

    def _call(self, method, request, timeout_s):
        try:
            return method(request, timeout=self._timeout(timeout_s), metadata=self._metadata)
        except grpc.RpcError as e:
            raise _errors.from_rpc_error(e) from None

    def get_kernel(self, template, dtype, shape, policy="cache_only", gpu=0, timeout_s=None):
        """The kernel for `template` (e.g. "rmsnorm"), `dtype` ("f32", "bf16", "f8e4m3", ...) and
        `shape` ({"tokens": 4096, "hidden": 8192}) on GPU ordinal `gpu` of the daemon.

        policy: "cache_only" (a miss is NotFoundError), "tune" (tune now; give a deadline of
        minutes) or "fallback" (a neighbour's or the default config now, tuning in the
        background; see .provenance). Raises DataLossError if the cubin's sha256 is wrong."""
        if policy not in _POLICIES:
            raise _errors.InvalidArgumentError(
                f"policy: '{policy}' is not one of {', '.join(_POLICIES)}")
        request = ktune_pb2.GetKernelRequest(template_id=template, dtype=dtype,
                                             shape=_shape(shape), policy=_POLICIES[policy],
                                             gpu=gpu)
        response = self._call(self._stub.GetKernel, request, timeout_s)
        return _types.artifact_from_proto(response.artifact, response.tuning_job_id)

    def get_kernels(self, keys, policy="cache_only", timeout_s=None):
        """Many keys in one call (GetKernels; split over several calls past
        MAX_KERNELS_PER_CALL, and asked again for answers ktuned left for another call).

        keys: (template, dtype, shape) or (template, dtype, shape, gpu) tuples, all under
        `policy`. Returns one item per key, in order: its KernelArtifact, or the ktune.Error
        GetKernel would have raised for it, its message naming the key's index here
        ("requests[3].shape: ..."). Raises (rather than returns) only when no key could be
        asked: UnavailableError without a daemon, UnauthenticatedError, a deadline. A daemon
        that predates GetKernels is asked key by key."""
        if policy not in _POLICIES:
            raise _errors.InvalidArgumentError(
                f"policy: '{policy}' is not one of {', '.join(_POLICIES)}")
        requests = [self._key_request(i, key, policy) for i, key in enumerate(keys)]
        results = [None] * len(requests)
        pending = list(range(len(requests)))
        while pending:
            chunk, pending = pending[:MAX_KERNELS_PER_CALL], pending[MAX_KERNELS_PER_CALL:]
            batch = ktune_pb2.GetKernelsRequest(requests=[requests[i] for i in chunk])
            try:
                response = self._stub.GetKernels(batch, timeout=self._timeout(timeout_s),
                                                 metadata=self._metadata)
            except grpc.RpcError as e:
                error = _errors.from_rpc_error(e)
                if error.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise error from None
                for i in chunk:  # a daemon from before GetKernels: one call per key
                    results[i] = self._one_of_many(i, requests[i], timeout_s)
                continue
            if len(response.results) != len(chunk):
                raise _errors.InternalError(f"GetKernels: {len(chunk)} keys asked, "
                                            f"{len(response.results)} answered")
            again = [i for i, r in zip(chunk, response.results) if r.retry]
            for j, (i, r) in enumerate(zip(chunk, response.results)):
                results[i] = _result_from_proto(r, i, j)
            if any(r.code == 0 for r in response.results):
                pending = again + pending  # left for another call; asked again
        return results

    @staticmethod
    def _key_request(index, key, policy):
        try:
            template, dtype, shape, *rest = key
        except (TypeError, ValueError):
            raise _errors.InvalidArgumentError(
                f"keys[{index}]: expected (template, dtype, shape[, gpu]), got {key!r}") from None
        if len(rest) > 1:
            raise _errors.InvalidArgumentError(
                f"keys[{index}]: expected (template, dtype, shape[, gpu]), got {key!r}")
        return ktune_pb2.GetKernelRequest(template_id=template, dtype=dtype,
                                          shape=_shape(shape), policy=_POLICIES[policy],
                                          gpu=rest[0] if rest else 0)

    def _one_of_many(self, index, request, timeout_s):
        try:
            response = self._call(self._stub.GetKernel, request, timeout_s)
            return _types.artifact_from_proto(response.artifact, response.tuning_job_id)
        except _errors.Error as e:
            return type(e)(f"requests[{index}]: {e.message}", code=e.code)

    def tune(self, template, dtype, shape, gpu=0, strategy="", budget=0, force=False,
             on_progress=None, timeout_s=None, time_s=0, min_gain=None, roofline_stop=None,
             warm_start=True):
        """Tunes one key (joining an identical running job), calling on_progress(TuneProgress)
        for each progress event, and returns the winning KernelArtifact.

        strategy: "guided" (""), "exhaustive" or "random"; budget: most candidates to measure
        (0: the strategy's default); force: re-tune even when a fresh entry exists; time_s:
        stop starting candidates after this; min_gain and roofline_stop: the guided stop rules
        (None: the daemon's defaults); warm_start: guided starts from neighbouring keys'
        winners. The deadline covers the whole job."""
        request = ktune_pb2.TuneRequest(template_id=template, dtype=dtype, shape=_shape(shape),
                                        gpu=gpu, strategy=strategy, budget=budget, force=force,
                                        time_s=time_s, no_warm_start=not warm_start)
        if min_gain is not None:
            request.min_gain = min_gain
        if roofline_stop is not None:
            request.roofline_stop = roofline_stop
        try:
            stream = self._stub.Tune(request, timeout=self._timeout(timeout_s),
                                     metadata=self._metadata)
            for event in stream:
                kind = event.WhichOneof("kind")
                if kind == "progress":
                    if on_progress is not None:
                        on_progress(_types.progress_from_proto(event.progress))
                elif kind == "artifact":
                    artifact = _types.artifact_from_proto(event.artifact)
                    stream.cancel()  # the artifact is the last event; don't wait for more
                    return artifact
        except grpc.RpcError as e:
            raise _errors.from_rpc_error(e) from None
        raise _errors.UnknownError(
            f"Tune of {template} {dtype} {dict(shape)}: the stream ended without an artifact")

    def list_templates(self, timeout_s=None):
        """The daemon's templates (a TemplateList: iterate it; .errors for those that failed)."""
        response = self._call(self._stub.ListTemplates, ktune_pb2.ListTemplatesRequest(),
                              timeout_s)
        return _types.templates_from_proto(response)

    def get_devices(self, timeout_s=None):
        """The daemon's GPUs (a Devices: iterate it; .compile_only when it has no usable GPU)."""
        response = self._call(self._stub.GetDevices, ktune_pb2.GetDevicesRequest(), timeout_s)
        return _types.devices_from_proto(response)

    def list_entries(self, template="", dtype="", device_model="", stale_only=False,
                     timeout_s=None):
        """Summaries (no cubins) of the stored entries matching the filters; empty matches all."""
        request = ktune_pb2.ListEntriesRequest(template_id=template, dtype=dtype,
                                               device_model=device_model, stale_only=stale_only)
        response = self._call(self._stub.ListEntries, request, timeout_s)
        return _types.entries_from_proto(response)
