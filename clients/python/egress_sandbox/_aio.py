"""The asyncio client: `AsyncClient`. Cancelling the task that awaits `run` closes the
connection, which cancels the run on the daemon."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Optional

from ._common import (Certificate, Data, Duration, Env, Events, OnOutput, OnStarted, OnWarning,
                      Policy, Result, check_peer, check_socket, default_socket, refusal,
                      request_body)


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


class AsyncClient:
    """The daemon at `socket` (default: `EGRESS_SANDBOX_SERVER` or the default path), for
    asyncio code: the same methods and arguments as `Client`, awaited."""

    def __init__(self, socket: Optional[str] = None) -> None:
        self.socket = socket or default_socket()

    async def _request(self, method: str, path: str, body: Optional[str] = None):
        check_socket(self.socket)
        try:
            reader, writer = await asyncio.open_unix_connection(self.socket)
        except OSError as error:
            error.filename = self.socket
            raise
        try:
            check_peer(writer.get_extra_info("socket"), self.socket)
        except BaseException:
            writer.close()
            raise
        payload = (body or "").encode()
        head = "%s %s HTTP/1.1\r\nHost: egress-sandbox\r\nConnection: close\r\n" % (method, path)
        if body is not None:
            head += "Content-Type: application/json\r\n"
        head += "Content-Length: %d\r\n\r\n" % len(payload)
        writer.write(head.encode() + payload)
        await writer.drain()
        status_line = await reader.readline()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return writer, _Response(reader, status, headers)

    async def health(self) -> dict[str, Any]:
        writer, response = await self._request("GET", "/v1/health")
        try:
            return json.loads(await response.body())
        finally:
            writer.close()

    async def cancel(self, run_id: str, terminate: bool = False) -> None:
        """Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate)."""
        path = "/v1/runs/%s%s" % (run_id, "?signal=TERM" if terminate else "")
        writer, response = await self._request("DELETE", path)
        try:
            body = await response.body()
            if response.status != 200:
                raise refusal(response.status, body)
        finally:
            writer.close()

    async def run(self, argv: Sequence[str], allow: Optional[Sequence[str]] = None,
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
                  on_warning: Optional[OnWarning] = None) -> Result:
        """As `Client.run`. The callbacks are called from the event loop's thread."""
        request = request_body(
            argv, allow=allow, timeout=timeout, files=files, env=env, stdin=stdin,
            policies=policies, memory=memory, cpus=cpus, pids=pids, tmp=tmp,
            output_limit=output_limit, workdir=workdir, image=image, resolve=resolve,
            egress_network=egress_network, secrets=secrets, upstream_ca=upstream_ca,
            runtime=runtime, audit_limit=audit_limit, on_audit_limit=on_audit_limit,
            mounts=mounts)
        writer, response = await self._request("POST", "/v1/runs", json.dumps(request))
        try:
            if response.status != 200:
                raise refusal(response.status, await response.body())
            events = Events(on_output, on_started, on_warning)
            async for line in response.lines():
                result = events.take(json.loads(line))
                if result is not None:
                    return result
            raise Events.ended()
        finally:
            writer.close()


__all__ = ["AsyncClient"]
