"""The blocking client: `Client`, and `RunEvents`, the iterator of a run's events."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any, Optional

from ._errors import DaemonError, SandboxError, refusal
from ._request import (Certificate, Data, Deadline, Duration, Env, OnOutput, OnStarted,
                       OnWarning, Policy, cancel_path, check_callbacks, request_body,
                       retry_after)
from ._socket import connect, default_socket
from ._types import (Event, ExitEvent, Follower, OutputEvent, Result, StartedEvent,
                     WarningEvent)
from ._warnings import caller, policy_key, warn


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("egress-sandbox")
        self._path = path

    def connect(self) -> None:
        self.sock = connect(self._path)


class RunEvents(Iterator[Event]):
    """A run's events as they come, the last an ExitEvent with the Result. Closing it (or
    leaving its `with` block) before the end closes the connection, which cancels the run."""

    def __init__(self, events: Generator[Event, None, None]) -> None:
        self._events = events

    def __iter__(self) -> RunEvents:
        return self

    def __next__(self) -> Event:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def __enter__(self) -> RunEvents:
        return self

    def __exit__(self, *exception: Any) -> None:
        self.close()


class Client:
    """The daemon at `socket` (default: `EGRESS_SANDBOX_SERVER` or the default path)."""

    def __init__(self, socket: Optional[str] = None) -> None:
        self.socket = socket or default_socket()

    def _exchange(self, method: str, path: str,
                  body: Optional[str] = None) -> tuple[_UnixConnection, http.client.HTTPResponse]:
        """Sends one request; the connection and the response's head."""
        connection = _UnixConnection(self.socket)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            connection.request(method, path, body=body, headers=headers)
            return connection, connection.getresponse()
        except SandboxError:
            connection.close()
            raise
        except (http.client.HTTPException, OSError) as error:
            connection.close()
            raise DaemonError("the daemon at %s did not answer: %s" % (self.socket, error)) \
                from error

    def _answer(self, method: str, path: str) -> Any:
        connection, response = self._exchange(method, path)
        try:
            body = response.read()
        except (http.client.HTTPException, OSError) as error:
            raise DaemonError("the daemon at %s broke off its answer: %s" % (self.socket, error)) \
                from error
        finally:
            connection.close()
        if response.status != 200:
            raise refusal(response.status, body)
        return json.loads(body)

    def health(self) -> dict[str, Any]:
        """The daemon's `GET /v1/health`: `{"ok": True, "version": …, "pool": {…}}`."""
        health: dict[str, Any] = self._answer("GET", "/v1/health")
        return health

    def cancel(self, run_id: str, terminate: bool = False) -> None:
        """Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate).
        An unknown id is a RequestRefused with status 404."""
        self._answer("DELETE", cancel_path(run_id, terminate))

    def events(self, argv: Sequence[str], allow: Optional[Sequence[str]] = None,
               timeout: Optional[Duration] = None, files: Optional[Mapping[str, Data]] = None,
               env: Optional[Env] = None, stdin: Optional[Data] = None,
               policies: Optional[Sequence[Policy]] = None, memory: Optional[str] = None,
               cpus: Optional[float] = None, pids: Optional[int] = None,
               tmp: Optional[str] = None, output_limit: Optional[str] = None,
               workdir: Optional[str] = None, image: Optional[str] = None,
               resolve: Optional[Mapping[str, str]] = None,
               egress_network: Optional[str] = None,
               secrets: Optional[Mapping[str, str]] = None,
               upstream_ca: Optional[Sequence[Certificate]] = None,
               runtime: Optional[str] = None, audit_limit: Optional[int] = None,
               on_audit_limit: Optional[str] = None,
               mounts: Optional[Sequence[str]] = None) -> RunEvents:
        """Runs `argv` as `run` does, giving its events as they come instead of calling back:
        WarningEvent, StartedEvent, OutputEvent, AuditEvent, and last ExitEvent (its
        `result` is what `run` returns). Warnings are only events here. Use it in a `with`
        block (or `close()` it) to cancel the run when leaving the loop early:

            with client.events(["make", "test"]) as events:
                for event in events:
                    ...

        Raises InvalidRequest at once for what is wrong before anything is sent; the other
        errors as the iteration reaches them."""
        request = request_body(
            argv, allow=allow, timeout=timeout, files=files, env=env, stdin=stdin,
            policies=policies, memory=memory, cpus=cpus, pids=pids, tmp=tmp,
            output_limit=output_limit, workdir=workdir, image=image, resolve=resolve,
            egress_network=egress_network, secrets=secrets, upstream_ca=upstream_ca,
            runtime=runtime, audit_limit=audit_limit, on_audit_limit=on_audit_limit,
            mounts=mounts)
        return RunEvents(self._follow(Deadline(request, timeout)))

    def _follow(self, deadline: Deadline) -> Generator[Event, None, None]:
        while True:
            connection, response = self._exchange("POST", "/v1/runs", deadline.body())
            if response.status == 200:
                break
            try:
                refused = refusal(response.status, response.read(),
                                  retry_after(response.getheader("retry-after")))
            except (http.client.HTTPException, OSError) as error:
                raise DaemonError("the daemon at %s broke off its answer: %s"
                                  % (self.socket, error)) from error
            finally:
                connection.close()
            time.sleep(deadline.wait_before_retry(refused))
        follower = Follower()
        try:
            while True:
                try:
                    line = response.readline()
                    wire = json.loads(line) if line else None
                except (http.client.HTTPException, OSError, ValueError) as error:
                    raise follower.ended() from error
                if wire is None:
                    raise follower.ended()
                event = follower.take(wire)
                if event is not None:
                    yield event
                if isinstance(event, ExitEvent):
                    return
        finally:
            connection.close()

    def run(self, argv: Sequence[str], allow: Optional[Sequence[str]] = None,
            timeout: Optional[Duration] = None, files: Optional[Mapping[str, Data]] = None,
            env: Optional[Env] = None, on_output: Optional[OnOutput] = None,
            stdin: Optional[Data] = None, policies: Optional[Sequence[Policy]] = None,
            memory: Optional[str] = None, cpus: Optional[float] = None,
            pids: Optional[int] = None, tmp: Optional[str] = None,
            output_limit: Optional[str] = None, workdir: Optional[str] = None,
            image: Optional[str] = None, resolve: Optional[Mapping[str, str]] = None,
            egress_network: Optional[str] = None, on_started: Optional[OnStarted] = None,
            secrets: Optional[Mapping[str, str]] = None,
            upstream_ca: Optional[Sequence[Certificate]] = None, runtime: Optional[str] = None,
            audit_limit: Optional[int] = None, on_audit_limit: Optional[str] = None,
            mounts: Optional[Sequence[str]] = None,
            on_warning: Optional[OnWarning] = None) -> Result:
        """Runs `argv` (a list of strings: the program, then its arguments) in a sandbox and
        returns its Result.

        timeout: seconds (number) or a duration string ("500ms", "2m"), the whole call's:
        a busy daemon (503) is asked again after its `Retry-After` while that stays within
        it (30 s when not given), and the run then gets what is left; files: {path:
        bytes|str} written under /task (then the working directory); stdin: bytes|str;
        env: {K: V} or [(K, V), ...]; policies: [YAML text or {"file", "yaml"}];
        on_output(stream, data): called with "stdout"/"stderr" and bytes as output comes;
        on_started(run_id): called once the run has its id (for `cancel`); on_warning(text):
        the daemon's warnings about the run (default: `warnings.warn` with SandboxWarning,
        at the caller's line, once per policy); secrets: {NAME: value} for the policy's
        credentials (the proxy holds them, the sandbox gets placeholders); upstream_ca: [PEM
        text or {"file", "pem"}] the proxy trusts for upstream TLS; runtime: the sandbox's
        OCI runtime (e.g. "runsc"); audit_limit: records written per run; on_audit_limit:
        "reserve" (allowed attempts keep their records past the limit) or "refuse" (new
        egress is refused); mounts: ["SRC:DST[:rw]"] on the daemon's host.

        Raises InvalidRequest (400, naming the field; nothing was created), DaemonBusy
        (503), another RequestRefused, DaemonUnreachable (no daemon at the socket),
        UntrustedSocket (nothing was sent) or DaemonError (set-up failed, or the answer
        broke off): all SandboxError, with `error`, `field`, `status` and `diagnostics`."""
        where = caller()
        check_callbacks(on_output=on_output, on_started=on_started, on_warning=on_warning)
        request = request_body(
            argv, allow=allow, timeout=timeout, files=files, env=env, stdin=stdin,
            policies=policies, memory=memory, cpus=cpus, pids=pids, tmp=tmp,
            output_limit=output_limit, workdir=workdir, image=image, resolve=resolve,
            egress_network=egress_network, secrets=secrets, upstream_ca=upstream_ca,
            runtime=runtime, audit_limit=audit_limit, on_audit_limit=on_audit_limit,
            mounts=mounts)
        policy = policy_key(request)
        with RunEvents(self._follow(Deadline(request, timeout))) as events:
            for event in events:
                if isinstance(event, WarningEvent):
                    if on_warning:
                        on_warning(event.text)
                    else:
                        warn(event.text, policy, where)
                elif isinstance(event, StartedEvent):
                    if on_started:
                        on_started(event.run_id)
                elif isinstance(event, OutputEvent):
                    if on_output:
                        on_output(event.stream, event.data)
                elif isinstance(event, ExitEvent):
                    return event.result
        raise DaemonError("the daemon's answer ended before the run's end")


__all__ = ["Client", "RunEvents"]
