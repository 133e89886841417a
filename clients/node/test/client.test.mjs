// The client against a fake daemon on a Unix socket (no Docker): it sends the API's
// request, surfaces warnings, returns the result, and rejects with the same fields as the
// Python client. `npm test` (or `node --test test/`).
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import test from "node:test";

import { Client, DaemonError, RequestRefused, SandboxError } from "../egress-sandbox.mjs";

const events = [
  { event: "warning", text: "policy p.yaml: a warning" },
  { event: "started", run: "r-1" },
  { event: "output", stream: "stdout", b64: "aGkK" },
  { event: "exit", report: { exit_code: 3, status: "exited", blocked: [] }, summary: "egress-sandbox: exit 3" },
];

async function fakeDaemon() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "egress-sandbox-client-"));
  const socket = path.join(dir, "api.sock");
  const seen = [];
  const server = http.createServer(async (request, response) => {
    let body = "";
    for await (const chunk of request) body += chunk;
    if (request.method === "DELETE") {
      response.writeHead(404).end(JSON.stringify({ error: "no run r-9 in progress", field: "id" }));
      return;
    }
    const sent = JSON.parse(body);
    seen.push(sent);
    if (sent.argv[0] === "refuse") {
      response.writeHead(400).end(JSON.stringify({ error: 'invalid timeout "x"', field: "timeout" }));
      return;
    }
    response.writeHead(200, { "content-type": "application/x-ndjson" });
    const lines = sent.argv[0] === "setup-fails"
      ? [{ event: "error", error: "image x not found locally", exit_code: 125 }]
      : events;
    for (const line of lines) response.write(JSON.stringify(line) + "\n");
    response.end();
  });
  await new Promise((resolve) => server.listen(socket, resolve));
  return { socket, seen, close: () => server.close() };
}

test("a run returns its result and surfaces warnings", async () => {
  const daemon = await fakeDaemon();
  try {
    const warnings = [];
    const result = await new Client(daemon.socket).run(["true"], {
      env: [["A", "1"], ["B", "2"]], files: { "a.txt": "hi" }, timeout: 2.5,
      onWarning: (text) => warnings.push(text),
    });
    assert.equal(result.stdout.toString(), "hi\n");
    assert.equal(result.exit_code, 3);
    assert.deepEqual(result.warnings, ["policy p.yaml: a warning"]);
    assert.deepEqual(warnings, ["policy p.yaml: a warning"]);
    assert.deepEqual(daemon.seen[0].env, [["A", "1"], ["B", "2"]]);
    assert.equal(daemon.seen[0].timeout, "2500ms");
  } finally {
    daemon.close();
  }
});

test("errors carry error, field and status", async () => {
  const daemon = await fakeDaemon();
  try {
    const client = new Client(daemon.socket);
    await assert.rejects(client.run(["refuse"]), (error) => {
      assert.ok(error instanceof RequestRefused && error instanceof SandboxError);
      assert.equal(error.error, 'invalid timeout "x"');
      assert.equal(error.field, "timeout");
      assert.equal(error.status, 400);
      return true;
    });
    await assert.rejects(client.run(["setup-fails"]), (error) => {
      assert.ok(error instanceof DaemonError && error instanceof SandboxError);
      assert.equal(error.error, "image x not found locally");
      assert.equal(error.field, null);
      return true;
    });
    await assert.rejects(client.cancel("r-9"), (error) => error.status === 404 && error.field === "id");
    await assert.rejects(client.run(["true"], { timeout: 0 }), RangeError);
  } finally {
    daemon.close();
  }
});
