"""The asyncio client: `AsyncClient`, and `AsyncRunEvents`, the async iterator of a run's
events. Cancelling the task that awaits `run` closes the connection, which cancels the run
on the daemon."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, Optional

from ._errors import DaemonError, SandboxError, refusal
from ._request import (Certificate, Data, Deadline, Duration, Env, OnOutput, OnStarted,
                       OnWarning, Policy, cancel_path, check_callbacks, request_body,
                       retry_after)
from ._socket import default_socket, open_connection
from ._types import (Event, ExitEvent, Follower, OutputEvent, Result, StartedEvent,
                     WarningEvent)
from ._warnings import Caller, caller, policy_key, warn

# What a broken connection raises while an answer is read.
_BROKEN = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
           ValueError)


class _Response:
    """One HTTP/1.1 response read from a stream: its status, then its body in pieces
    (chunked or sized)."""

    def __init__(self, reader: asyncio.StreamReader, status: int, headers: dict[str, str]) -> None:
        self.reader = reader
        self.status = status
        self.headers = headers

    async def pieces(self) -> AsyncIterator[bytes]:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self.reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                yield await self.reader.readexactly(size)
                await self.reader.readexactly(2)
        elif "content-length" in self.headers:
            yield await self.reader.readexactly(int(self.headers["content-length"]))
        else:
            yield await self.reader.read()

    async def body(self) -> bytes:
        return b"".join([piece async for piece in self.pieces()])

    async def lines(self) -> AsyncIterator[bytes]:
        pending = b""
        async for piece in self.pieces():
            pending += piece
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                yield line


class AsyncRunEvents(AsyncIterator[Event]):
    """A run's events as they come, the last an ExitEvent with the Result. Closing it
    (`aclose()`, or leaving its `async with` block) before the end closes the connection,
    which cancels the run."""

    def __init__(self, events: AsyncGenerator[Event, None]) -> None:
        self._events = events

    def __aiter__(self) -> AsyncRunEvents:
        return self

    async def __anext__(self) -> Event:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    async def __aenter__(self) -> AsyncRunEvents:
        return self

    async def __aexit__(self, *exception: Any) -> None:
        await self.aclose()


class AsyncClient:
    """The daemon at `socket` (default: `EGRESS_SANDBOX_SERVER` or the default path), for
    asyncio code: the same methods and arguments as `Client`, awaited (`events` gives an
    async iterator)."""

    def __init__(self, socket: Optional[str] = None) -> None:
        self.socket = socket or default_socket()

    async def _exchange(self, method: str, path: str,
                        body: Optional[str] = None) -> tuple[asyncio.StreamWriter, _Response]:
        reader, writer = await open_connection(self.socket)
        try:
            payload = (body or "").encode()
            head = "%s %s HTTP/1.1\r\nHost: egress-sandbox\r\nConnection: close\r\n" % (
                method, path)
            if body is not None:
                head += "Content-Type: application/json\r\n"
            head += "Content-Length: %d\r\n\r\n" % len(payload)
            writer.write(head.encode() + payload)
            await writer.drain()
            status_line = await reader.readline()
            if not status_line:
                raise EOFError("the connection closed")
            status = int(status_line.split()[1])
            headers: dict[str, str] = {}
            while True:
                line = (await reader.readline()).decode("latin-1").strip()
                if not line:
                    break
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        except SandboxError:
            writer.close()
            raise
        except (*_BROKEN, IndexError) as error:
            writer.close()
            raise DaemonError("the daemon at %s did not answer: %s" % (self.socket, error)) \
                from error
        except BaseException:
            writer.close()
            raise
        return writer, _Response(reader, status, headers)

    async def _answer(self, method: str, path: str) -> Any:
        writer, response = await self._exchange(method, path)
        try:
            body = await response.body()
        except _BROKEN as error:
            raise DaemonError("the daemon at %s broke off its answer: %s" % (self.socket, error)) \
                from error
        finally:
            writer.close()
        if response.status != 200:
            raise refusal(response.status, body)
        return json.loads(body)

    async def health(self) -> dict[str, Any]:
        """As `Client.health`."""
        health: dict[str, Any] = await self._answer("GET", "/v1/health")
        return health

    async def cancel(self, run_id: str, terminate: bool = False) -> None:
        """Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate).
        An unknown id is a RequestRefused with status 404."""
        await self._answer("DELETE", cancel_path(run_id, terminate))

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
               mounts: Optional[Sequence[str]] = None) -> AsyncRunEvents:
        """As `Client.events`, an async iterator:

            async with client.events(["make", "test"]) as events:
                async for event in events:
                    ..."""
        request = request_body(
            argv, allow=allow, timeout=timeout, files=files, env=env, stdin=stdin,
            policies=policies, memory=memory, cpus=cpus, pids=pids, tmp=tmp,
            output_limit=output_limit, workdir=workdir, image=image, resolve=resolve,
            egress_network=egress_network, secrets=secrets, upstream_ca=upstream_ca,
            runtime=runtime, audit_limit=audit_limit, on_audit_limit=on_audit_limit,
            mounts=mounts)
        return AsyncRunEvents(self._follow(Deadline(request, timeout)))

    async def _follow(self, deadline: Deadline) -> AsyncGenerator[Event, None]:
        while True:
            writer, response = await self._exchange("POST", "/v1/runs", deadline.body())
            if response.status == 200:
                break
            try:
                refused = refusal(response.status, await response.body(),
                                  retry_after(response.headers.get("retry-after")))
            except _BROKEN as error:
                raise DaemonError("the daemon at %s broke off its answer: %s"
                                  % (self.socket, error)) from error
            finally:
                writer.close()
            await asyncio.sleep(deadline.wait_before_retry(refused))
        follower = Follower()
        try:
            lines = response.lines()
            while True:
                try:
                    line = await lines.__anext__()
                    wire = json.loads(line)
                except StopAsyncIteration:
                    raise follower.ended() from None
                except _BROKEN as error:
                    raise follower.ended() from error
                event = follower.take(wire)
                if event is not None:
                    yield event
                if isinstance(event, ExitEvent):
                    return
        finally:
            writer.close()

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
            upstream_ca: Optional[Sequence[Certificate]] = None,
            runtime: Optional[str] = None, audit_limit: Optional[int] = None,
            on_audit_limit: Optional[str] = None,
            mounts: Optional[Sequence[str]] = None,
            on_warning: Optional[OnWarning] = None) -> Awaitable[Result]:
        """As `Client.run`, to be awaited. The callbacks are called from the event loop's
        thread. (Not an `async def`: the caller's line, for warnings, is the one that calls
        `run`, even when the awaiting happens in another task.)"""
        where = caller()
        options = dict(
            allow=allow, timeout=timeout, files=files, env=env, stdin=stdin,
            policies=policies, memory=memory, cpus=cpus, pids=pids, tmp=tmp,
            output_limit=output_limit, workdir=workdir, image=image, resolve=resolve,
            egress_network=egress_network, secrets=secrets, upstream_ca=upstream_ca,
            runtime=runtime, audit_limit=audit_limit, on_audit_limit=on_audit_limit,
            mounts=mounts)
        return self._run(where, argv, options, on_output, on_started, on_warning)

    async def _run(self, where: Optional[Caller], argv: Sequence[str], options: dict[str, Any],
                   on_output: Optional[OnOutput], on_started: Optional[OnStarted],
                   on_warning: Optional[OnWarning]) -> Result:
        check_callbacks(on_output=on_output, on_started=on_started, on_warning=on_warning)
        request = request_body(argv, **options)
        policy = policy_key(request)
        async with AsyncRunEvents(self._follow(Deadline(request, options["timeout"]))) as events:
            async for event in events:
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


__all__ = ["AsyncClient", "AsyncRunEvents"]
