"""The daemon's warnings about a run, as Python warnings: attributed to the caller's line
(the line that called `run`, not a line of this package), and once per policy: a program
that runs the same policy a thousand times is told once."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import warnings
from collections import OrderedDict
from types import FrameType
from typing import Any, Optional


class SandboxWarning(UserWarning):
    """A warning of the daemon about the run (a policy warning): issued with `warnings.warn`
    when no `on_warning` callback is given, once per policy and process, at the caller's
    line."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# How many (policy, warning) pairs are remembered as told; past it the oldest are forgotten
# (and told again if they come back), so a service making a policy per request does not
# grow without bound.
_REMEMBERED = 4096
_told: OrderedDict[str, None] = OrderedDict()
_lock = threading.Lock()


class Caller:
    """Where the caller called the client: what `warnings.warn_explicit` needs."""

    def __init__(self, frame: FrameType) -> None:
        self.filename: str = frame.f_code.co_filename
        self.lineno: int = frame.f_lineno
        self.globals: dict[str, Any] = frame.f_globals
        self.module: str = frame.f_globals.get("__name__", "<unknown>")


def caller() -> Optional[Caller]:
    """The innermost frame outside this package, from where this is called."""
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
    return Caller(frame) if frame is not None else None


def policy_key(request: dict[str, Any]) -> str:
    """What names a run's policy for "once per policy": its policies and allow list, as sent."""
    policy = {"policies": request.get("policies"), "allow": request.get("allow")}
    return hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest()


def warn(text: str, policy: str, where: Optional[Caller]) -> None:
    """Issues `text` as a SandboxWarning at `where`, unless it was told for this policy
    already. A warning the filters turn into an error is raised, and not taken as told."""
    mark = hashlib.sha256(("%s\0%s" % (policy, text)).encode()).hexdigest()
    with _lock:
        if mark in _told:
            _told.move_to_end(mark)
            return
    if where is None:
        warnings.warn(text, SandboxWarning, stacklevel=2)
    else:
        registry = where.globals.setdefault("__warningregistry__", {})
        # No module_globals: for code run with `python -c` the loader named there cannot
        # give its source, and warn_explicit would fail on it instead of warning.
        warnings.warn_explicit(text, SandboxWarning, where.filename, where.lineno,
                               where.module, registry)
    with _lock:
        _told[mark] = None
        while len(_told) > _REMEMBERED:
            _told.popitem(last=False)
