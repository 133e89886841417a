"""The request `run` sends: its body from the call's arguments (what the client can tell is
wrong refused before anything is sent), and the call's deadline, which bounds asking again
a daemon that is busy."""

from __future__ import annotations

import base64
import email.utils
import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Union

from ._errors import DaemonBusy, InvalidRequest, RequestRefused

Data = Union[bytes, str]
# `env` as the API takes it: {"K": "V"} or [("K", "V"), ...] (order kept).
Env = Union[Mapping[str, str], Sequence[Sequence[str]]]
# A policy: YAML text, or {"file": NAME, "yaml": TEXT} (NAME shows in diagnostics).
Policy = Union[str, Mapping[str, str]]
# An upstream CA: PEM text, or {"file": NAME, "pem": TEXT}.
Certificate = Union[str, Mapping[str, str]]
# A duration: seconds (a number) or text as the API takes it ("500ms", "2m").
Duration = Union[int, float, str]
OnOutput = Callable[[str, bytes], Any]
OnStarted = Callable[[str], Any]
OnWarning = Callable[[str], Any]

# A run's timeout when the call gives none (`run`'s default; a policy may set less): the
# call's deadline then, for asking a busy daemon again.
DEFAULT_TIMEOUT = 30.0
# The least wait before asking again, whatever `Retry-After` says: a daemon that answers
# "0" is not asked in a tight loop.
LEAST_WAIT = 0.1

_BYTES = (bytes, bytearray, memoryview)


def _duration(value: Optional[Duration]) -> Optional[str]:
    """Seconds → whole milliseconds, rounded up (0.0001 s is 1ms, never "0ms", which the
    daemon would refuse as a value nobody wrote); a string goes as it is."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest("timeout is a number of seconds or a duration such as \"500ms\", "
                             "not %r" % (value,), "timeout")
    if not (value > 0 and math.isfinite(value)):
        raise InvalidRequest("timeout must be a positive number of seconds, got %r" % (value,),
                             "timeout")
    return "%dms" % math.ceil(value * 1000)


# humantime's units, as the daemon reads a duration's text.
_UNITS = {
    "nsec": 1e-9, "ns": 1e-9, "usec": 1e-6, "us": 1e-6, "\u00b5s": 1e-6,
    "msec": 1e-3, "ms": 1e-3,
    "seconds": 1, "second": 1, "sec": 1, "s": 1,
    "minutes": 60, "minute": 60, "min": 60, "m": 60,
    "hours": 3600, "hour": 3600, "hr": 3600, "h": 3600,
    "days": 86400, "day": 86400, "d": 86400,
    "weeks": 604800, "week": 604800, "w": 604800,
    "months": 2630016, "month": 2630016, "M": 2630016,
    "years": 31557600, "year": 31557600, "y": 31557600,
}
_PART = re.compile(r"\s*(\d+)\s*([a-zA-Z\u00b5]+)")


def seconds_of(timeout: Optional[Duration]) -> Optional[float]:
    """The timeout in seconds; None when not given, or text this client does not read (the
    daemon judges it)."""
    if timeout is None:
        return None
    if not isinstance(timeout, str):
        return float(timeout)
    total, at, text = 0.0, 0, timeout.strip()
    while at < len(text):
        part = _PART.match(text, at)
        if part is None or part.group(2) not in _UNITS:
            return None
        total += int(part.group(1)) * _UNITS[part.group(2)]
        at = part.end()
    return total if text else None


def _b64(data: Data, name: str) -> str:
    if isinstance(data, str):
        data = data.encode()
    if not isinstance(data, _BYTES):
        raise InvalidRequest("%s is bytes or text, not %s" % (name, type(data).__name__),
                             name.split("[")[0])
    return base64.b64encode(bytes(data)).decode("ascii")


def _listed(name: str, value: Any, kinds: tuple[type, ...],
            example: str) -> Optional[list[Any]]:
    """A list-valued option as a list; a string (which would go letter by letter) or
    another kind of item refused."""
    if value is None:
        return None
    if isinstance(value, (str, Mapping, *_BYTES)) or not hasattr(value, "__iter__"):
        raise InvalidRequest("%s is a list, not %s: %s" % (name, type(value).__name__, example),
                             name)
    items = list(value)
    for index, item in enumerate(items):
        if not isinstance(item, kinds):
            raise InvalidRequest("%s[%d] is %s, not %s" % (
                name, index, type(item).__name__, " or ".join(k.__name__ for k in kinds)), name)
    return items or None


def _mapping(name: str, value: Any, example: str) -> Optional[dict[str, Any]]:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequest("%s is a mapping, not %s: %s" % (name, type(value).__name__,
                                                               example), name)
    return dict(value) or None


def _argv(argv: Any) -> list[str]:
    if isinstance(argv, (str, *_BYTES)):
        raise InvalidRequest("argv is the command as a list of strings, not one string: "
                             "[\"python3\", \"main.py\"]; a shell line goes as "
                             "[\"sh\", \"-c\", LINE]", "argv")
    if isinstance(argv, Mapping) or not hasattr(argv, "__iter__"):
        raise InvalidRequest("argv is the command as a list of strings, not %s"
                             % type(argv).__name__, "argv")
    args: list[str] = []
    for index, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise InvalidRequest("argv[%d] is %s, not a string" % (index, type(arg).__name__),
                                 "argv")
        args.append(arg)
    return args


def _env(env: Any) -> Any:
    if env is None:
        return None
    if isinstance(env, Mapping):
        return dict(env) or None
    if isinstance(env, (str, *_BYTES)) or not hasattr(env, "__iter__"):
        raise InvalidRequest("env is a mapping or a list of (name, value) pairs, not %s"
                             % type(env).__name__, "env")
    pairs = []
    for index, pair in enumerate(env):
        if isinstance(pair, (str, *_BYTES)) or not hasattr(pair, "__iter__") \
                or len(list(pair)) != 2 or not all(isinstance(part, str) for part in pair):
            raise InvalidRequest("env[%d] is not a (name, value) pair of strings: %r"
                                 % (index, pair), "env")
        pairs.append(list(pair))
    return pairs or None


def check_callbacks(**callbacks: Any) -> None:
    for name, callback in callbacks.items():
        if callback is not None and not callable(callback):
            raise InvalidRequest("%s is a function, not %s" % (name, type(callback).__name__),
                                 name)


def request_body(argv: Any, **options: Any) -> dict[str, Any]:
    """The API's request for `run`'s arguments; None means not given. Raises InvalidRequest
    for what is wrong before it is sent."""
    files = _mapping("files", options.get("files"), "{\"main.py\": \"print(42)\"}")
    stdin = options.get("stdin")
    cpus = options.get("cpus")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, (int, float))
                             or not cpus > 0 or not math.isfinite(cpus)):
        raise InvalidRequest("cpus is a positive number, not %r" % (cpus,), "cpus")
    optional = {
        "allow": _listed("allow", options.get("allow"), (str,), "[\"pypi.org\"]"),
        "policies": _listed("policies", options.get("policies"), (str, Mapping),
                            "[YAML text or {\"file\": NAME, \"yaml\": TEXT}]"),
        "timeout": _duration(options.get("timeout")),
        "memory": options.get("memory"),
        "cpus": cpus,
        "pids": options.get("pids"),
        "tmp": options.get("tmp"),
        "output_limit": options.get("output_limit"),
        "env": _env(options.get("env")),
        "workdir": options.get("workdir"),
        "image": options.get("image"),
        "files": {path: _b64(data, "files[%r]" % path) for path, data in files.items()}
        if files else None,
        "stdin": _b64(stdin, "stdin") if stdin is not None else None,
        "resolve": _mapping("resolve", options.get("resolve"), "{\"NAME\": \"IP\"}"),
        "mounts": _listed("mounts", options.get("mounts"), (str,), "[\"SRC:DST[:rw]\"]"),
        "egress_network": options.get("egress_network"),
        "secrets": _mapping("secrets", options.get("secrets"), "{\"NAME\": \"value\"}"),
        "upstream_ca": _listed("upstream_ca", options.get("upstream_ca"), (str, Mapping),
                               "[PEM text or {\"file\": NAME, \"pem\": TEXT}]"),
        "runtime": options.get("runtime"),
        "audit_limit": options.get("audit_limit"),
        "on_audit_limit": options.get("on_audit_limit"),
    }
    request: dict[str, Any] = {"argv": _argv(argv)}
    request.update({key: value for key, value in optional.items() if value is not None})
    return request


def retry_after(value: Optional[str]) -> Optional[float]:
    """`Retry-After` in seconds (delta-seconds or an HTTP date); None when absent or not
    either."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class Deadline:
    """The call's time: its `timeout` (else DEFAULT_TIMEOUT) from the call's start bounds
    how long a busy daemon is waited for. After a wait, the request asks for what is left of
    the caller's timeout, so waiting and running together stay within it; a call that gave
    no timeout is sent as it was (the daemon's default holds from the run's start)."""

    def __init__(self, request: dict[str, Any], timeout: Optional[Duration]) -> None:
        self.request = request
        self.started = time.monotonic()
        given = seconds_of(timeout)
        self.caller_timeout = given if given is not None and given > 0 else None
        self.budget = self.caller_timeout or DEFAULT_TIMEOUT
        self.waited = False
        self.attempts = 0

    def body(self) -> str:
        """The request as it goes now."""
        self.attempts += 1
        request = self.request
        if self.waited and self.caller_timeout is not None:
            left = self.budget - (time.monotonic() - self.started)
            request = dict(request, timeout="%dms" % max(1, math.ceil(left * 1000)))
        return json.dumps(request)

    def wait_before_retry(self, refused: RequestRefused) -> float:
        """How long to wait before asking again; re-raises `refused` when it is not a busy
        daemon's, or when the wait would end past the deadline."""
        if not isinstance(refused, DaemonBusy):
            raise refused
        refused.attempts = self.attempts
        if refused.retry_after is None:
            raise refused
        wait = max(refused.retry_after, LEAST_WAIT)
        if time.monotonic() - self.started + wait >= self.budget:
            raise refused
        self.waited = True
        return wait


def cancel_path(run_id: str, terminate: bool) -> str:
    """`DELETE`'s path for `run_id` (quoted: an id is never read as another path)."""
    if not isinstance(run_id, str) or not run_id:
        raise InvalidRequest("the run id is a non-empty string, not %r" % (run_id,), "id")
    return "/v1/runs/%s%s" % (urllib.parse.quote(run_id, safe=""),
                             "?signal=TERM" if terminate else "")
