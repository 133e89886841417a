// The client against a fake daemon: a real HTTP server on a Unix socket in this process (no
// Docker), answering each request as the test scripts it. The client sends the API's
// request, returns a camelCase result, gives the events as an async iterator, asks a busy
// daemon again after its Retry-After within the call's timeout, rejects with each error class
// and the same fields as the Python client, refuses what is wrong before sending anything,
// rejects an abort with AbortError, and warns once per policy naming the caller's line.
// `npm test` (or `node --test test/`).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import test from "node:test";
import { fileURLToPath } from "node:url";

import {
  AbortError, Client, DaemonBusy, DaemonError, DaemonUnreachable, InvalidRequest, RequestRefused,
  SandboxError, SandboxWarning,
} from "../egress-sandbox.mjs";

const THIS_FILE = fileURLToPath(import.meta.url);

const EVENTS = [
  { event: "warning", text: "policy p.yaml: a warning" },
  { event: "started", run: "r-1" },
  { event: "output", stream: "stdout", b64: "aGkK" },
  { event: "output", stream: "stderr", b64: "b29wcwo=" },
  { event: "audit", record: { host: "x.example", decision: "blocked" } },
  {
    event: "exit",
    report: {
      exit_code: 3, status: "exited",
      blocked: [{ host: "x.example", port: 443, reason: "not_allowed", count: 1 }],
    },
    summary: "egress-sandbox: exit 3 after 0.1s; 1 blocked: x.example:443 (not_allowed)",
  },
];

const busy = (retryAfter = "1") => ({
  status: 503,
  headers: retryAfter === null ? {} : { "retry-after": retryAfter },
  body: {
    error: "the daemon has its limit of 1 runs live (serve --max-runs); try again when one has ended",
    field: "",
  },
});

/**
 * The fake daemon. `answers` is what the next POSTs get, in order (then a run of EVENTS):
 * `{ status, headers, body }` or an array of events to stream, where "hold" keeps the stream
 * open until the client closes it (then `closed` resolves) and "cut" ends it early. `seen`
 * holds every request: { method, path, body }.
 */
async function fakeDaemon(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "egress-sandbox-client-"));
  const socket = path.join(dir, "api.sock");
  const daemon = { socket, dir, seen: [], answers: [], posts: () => daemon.seen.filter((r) => r.method === "POST").map((r) => JSON.parse(r.body)) };
  let markClosed;
  daemon.closed = new Promise((resolve) => { markClosed = resolve; });
  const server = http.createServer(async (request, response) => {
    let body = "";
    for await (const chunk of request) body += chunk;
    daemon.seen.push({ method: request.method, path: request.url, body });
    if (request.method === "GET") return response.writeHead(200).end(JSON.stringify({ ok: true }));
    if (request.method === "DELETE") {
      return response.writeHead(404).end(JSON.stringify({ error: "no run r-9 in progress", field: "id" }));
    }
    const answer = daemon.answers.length ? daemon.answers.shift() : EVENTS;
    if (!Array.isArray(answer)) {
      return response.writeHead(answer.status, { "content-type": "application/json", ...answer.headers })
        .end(JSON.stringify(answer.body));
    }
    response.writeHead(200, { "content-type": "application/x-ndjson" });
    for (const event of answer) {
      if (event === "hold") {
        response.on("close", markClosed);
        return;
      }
      if (event === "cut") return response.socket.destroy();
      await new Promise((resolve) => response.write(JSON.stringify(event) + "\n", resolve));
    }
    response.end();
  });
  server.listen(socket);
  await once(server, "listening");
  t.after(() => {
    server.closeAllConnections();
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return daemon;
}

/** `promise` rejects with an instance of `kind`: the error. */
async function rejection(promise, kind) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof kind, `${error?.constructor?.name}: ${error?.message} is not a ${kind.name}`);
    return error;
  }
  assert.fail(`resolved, not rejected with ${kind.name}`);
}

/** The line that calls this. */
function callersLine() {
  return Number(new Error().stack.split("\n")[2].match(/:(\d+):\d+\)?$/)[1]);
}

/** Warnings emitted while `body` runs. */
async function emittedWarnings(body) {
  const caught = [];
  const listener = (warning) => caught.push(warning);
  process.on("warning", listener);
  try {
    await body();
    // 'warning' is emitted on the next tick after emitWarning.
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off("warning", listener);
  }
  return caught;
}

test("a run resolves to a camelCase result and sends the request", async (t) => {
  const daemon = await fakeDaemon(t);
  const warnings = [];
  const result = await new Client(daemon.socket).run(["python3", "-c", "x"], {
    env: [["A", "1"], ["B", "2"]], files: { "a.txt": "hi" }, stdin: Buffer.from("in"), timeout: 2.5,
    policies: [{ file: "p.yaml", yaml: "version: 1\n" }], egressNetwork: "net", outputLimit: "1MiB",
    onWarning: (text) => warnings.push(text),
  });
  assert.deepEqual(Object.keys(result), [
    "runId", "exitCode", "status", "stdout", "stderr", "blocked", "records", "report", "summary", "warnings",
    "teardownErrors",
  ]);
  assert.equal(result.runId, "r-1");
  assert.equal(result.exitCode, 3);
  assert.equal(result.status, "exited");
  assert.equal(result.stdout.toString(), "hi\n");
  assert.equal(result.stderr.toString(), "oops\n");
  assert.equal(result.blocked[0].host, "x.example");
  assert.deepEqual(result.records, [{ host: "x.example", decision: "blocked" }]);
  assert.equal(result.report.exit_code, 3, "the report is as `run --report` writes it");
  assert.deepEqual(result.warnings, ["policy p.yaml: a warning"]);
  assert.deepEqual(warnings, ["policy p.yaml: a warning"]);
  const [sent] = daemon.posts();
  assert.deepEqual(sent.argv, ["python3", "-c", "x"]);
  assert.deepEqual(sent.env, [["A", "1"], ["B", "2"]]);
  assert.deepEqual(sent.files, { "a.txt": "aGk=" });
  assert.equal(sent.stdin, "aW4=");
  assert.equal(sent.timeout, "2500ms");
  assert.equal(sent.egress_network, "net");
  assert.equal(sent.output_limit, "1MiB");
});

test("the old snake_case names still read, with a deprecation warning", async (t) => {
  const daemon = await fakeDaemon(t);
  const client = new Client(daemon.socket);
  let result;
  const warnings = await emittedWarnings(async () => {
    result = await client.run(["true"], { onWarning: () => {} });
    assert.equal(result.exit_code, 3);
    assert.equal(result.run_id, "r-1");
  });
  assert.ok(!("exit_code" in JSON.parse(JSON.stringify(result))));
  assert.deepEqual(warnings.map((w) => w.name), ["DeprecationWarning"]);
});

test("the events come as an async iterator", async (t) => {
  const daemon = await fakeDaemon(t);
  const events = [];
  for await (const event of new Client(daemon.socket).events(["true"])) events.push(event);
  assert.deepEqual(events.map((event) => event.event), ["warning", "started", "output", "output", "audit", "exit"]);
  assert.equal(events[1].runId, "r-1");
  assert.equal(events[2].stream, "stdout");
  assert.equal(events[2].data.toString(), "hi\n");
  assert.equal(events[4].record.host, "x.example");
  assert.equal(events[5].result.exitCode, 3);
  assert.equal(events[5].result.stdout.toString(), "hi\n");
});

test("leaving the events early closes the connection", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push([{ event: "started", run: "r-2" }, "hold"]);
  for await (const event of new Client(daemon.socket).events(["sleep", "60"])) {
    assert.equal(event.event, "started");
    break;
  }
  await daemon.closed;
});

test("an abort rejects with AbortError and closes the connection", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push([{ event: "started", run: "r-3" }, "hold"]);
  const controller = new AbortController();
  const error = await rejection(new Client(daemon.socket).run(["sleep", "60"], {
    signal: controller.signal, onStarted: () => controller.abort(),
  }), AbortError);
  assert.equal(error.name, "AbortError");
  assert.equal(error.code, "ABORT_ERR");
  assert.equal(error.runId, "r-3");
  assert.ok(!(error instanceof SandboxError));
  await daemon.closed;
});

test("an abort while waiting for a busy daemon is an AbortError", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push(busy("20"));
  const controller = new AbortController();
  const call = new Client(daemon.socket).run(["true"], { signal: controller.signal, timeout: 60 });
  while (daemon.posts().length === 0) await new Promise((resolve) => setImmediate(resolve));
  controller.abort();
  const error = await rejection(call, AbortError);
  assert.equal(error.runId, null);
  assert.equal(daemon.posts().length, 1);
});

test("an aborted signal sends nothing", async (t) => {
  const daemon = await fakeDaemon(t);
  await rejection(new Client(daemon.socket).run(["true"], { signal: AbortSignal.abort() }), AbortError);
  assert.deepEqual(daemon.seen, []);
});

test("a busy daemon is asked again after its Retry-After", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push(busy("0"), busy("0"));
  const result = await new Client(daemon.socket).run(["true"], { timeout: 2.5, onWarning: () => {} });
  assert.equal(result.exitCode, 3);
  const posts = daemon.posts();
  assert.equal(posts.length, 3);
  // The retries ask for what is left of the caller's timeout.
  assert.equal(posts[0].timeout, "2500ms");
  for (const post of posts.slice(1)) assert.ok(parseInt(post.timeout, 10) <= 2400, post.timeout);
});

test("a call without a timeout is asked again as it was", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push(busy("0"));
  await new Client(daemon.socket).run(["true"], { onWarning: () => {} });
  const posts = daemon.posts();
  assert.equal(posts.length, 2);
  assert.deepEqual(posts[0], posts[1]);
  assert.equal(posts[1].timeout, undefined);
});

test("Retry-After as a date", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push(busy("Wed, 21 Oct 2015 07:28:00 GMT"));
  assert.equal((await new Client(daemon.socket).run(["true"], { timeout: 10, onWarning: () => {} })).exitCode, 3);
  assert.equal(daemon.posts().length, 2);
});

test("the retries stay within the call's timeout", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push(...Array(10).fill(busy("1")));
  // Asked at 0 s and after 1 s; a third ask, after 2 s, would be past 1.5 s.
  const error = await rejection(new Client(daemon.socket).run(["true"], { timeout: 1.5 }), DaemonBusy);
  assert.equal(daemon.posts().length, 2);
  assert.deepEqual([error.status, error.retryAfter, error.attempts, error.field], [503, 1, 2, null]);
  assert.match(error.error, /--max-runs/);
  assert.ok(error instanceof RequestRefused && error instanceof SandboxError);
});

test("the events' retries stay within the call's timeout too", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push(busy("3600"));
  const events = new Client(daemon.socket).events(["true"], { timeout: "2s" });
  const error = await rejection(events.next(), DaemonBusy);
  assert.deepEqual([error.retryAfter, error.attempts], [3600, 1]);
  assert.equal(daemon.posts().length, 1);
});

test("a 503 without Retry-After is not asked again", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push({ status: 503, headers: {}, body: { error: "the daemon is stopping", field: "" } });
  const error = await rejection(new Client(daemon.socket).run(["true"], { timeout: 10 }), DaemonBusy);
  assert.deepEqual([error.status, error.retryAfter, error.error], [503, null, "the daemon is stopping"]);
  assert.equal(daemon.posts().length, 1);
});

test("a 400 is an InvalidRequest naming the field", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push({
    status: 400, headers: {},
    body: { error: "the policy was refused; nothing was run", field: "policies", diagnostics: ["p.yaml:1:1: error: unknown key"] },
  });
  const error = await rejection(new Client(daemon.socket).run(["true"], { timeout: 10 }), InvalidRequest);
  assert.deepEqual([error.status, error.field, error.error], [400, "policies", "the policy was refused; nothing was run"]);
  assert.deepEqual(error.diagnostics, ["p.yaml:1:1: error: unknown key"]);
  assert.equal(error.message, "the policy was refused; nothing was run (field policies)");
  assert.equal(error.name, "InvalidRequest");
  assert.ok(error instanceof RequestRefused && error instanceof SandboxError);
  assert.equal(daemon.posts().length, 1, "a 400 is final");
});

test("a set-up failure is a DaemonError", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push([
    { event: "started", run: "r-5" },
    { event: "error", error: "image x not found locally", exit_code: 125 },
  ]);
  const error = await rejection(new Client(daemon.socket).run(["true"]), DaemonError);
  assert.deepEqual([error.error, error.runId, error.field, error.status], ["image x not found locally", "r-5", null, null]);
});

test("a set-up failure names the field the engine refused", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push([
    { event: "started", run: "r-7" },
    { event: "error", error: 'the engine has no runtime "runsc"', field: "runtime", exit_code: 125 },
  ]);
  const error = await rejection(new Client(daemon.socket).run(["true"]), DaemonError);
  assert.deepEqual([error.field, error.runId], ["runtime", "r-7"]);
  assert.equal(error.message, 'the engine has no runtime "runsc" (field runtime)');
});

test("an answer that breaks off is a DaemonError", async (t) => {
  const daemon = await fakeDaemon(t);
  daemon.answers.push([{ event: "started", run: "r-6" }, "cut"]);
  const error = await rejection(new Client(daemon.socket).run(["true"]), DaemonError);
  assert.match(error.error, /ended before the run's end/);
  assert.equal(error.runId, "r-6");
});

test("an unknown run is a 404 refusal, and a run id is never read as another path", async (t) => {
  const daemon = await fakeDaemon(t);
  const client = new Client(daemon.socket);
  const error = await rejection(client.cancel("r-9"), RequestRefused);
  assert.deepEqual([error.status, error.field], [404, "id"]);
  assert.ok(!(error instanceof InvalidRequest) && !(error instanceof DaemonBusy));
  await rejection(client.cancel("../../health"), RequestRefused);
  assert.equal(daemon.seen.at(-1).path, "/v1/runs/..%2F..%2Fhealth");
});

test("no daemon is DaemonUnreachable naming the socket", async (t) => {
  const daemon = await fakeDaemon(t);
  const missing = path.join(daemon.dir, "missing.sock");
  // A socket file nobody listens on (a daemon that was killed): connecting is refused.
  const stale = path.join(daemon.dir, "stale.sock");
  const listener = spawn(process.execPath, ["-e", `require("net").createServer().listen(${JSON.stringify(stale)}, () => console.log("up"))`]);
  await once(listener.stdout, "data");
  listener.kill("SIGKILL");
  await once(listener, "exit");
  assert.ok(fs.existsSync(stale));
  for (const [socket, code] of [[missing, "ENOENT"], [stale, "ECONNREFUSED"]]) {
    for (const call of [(client) => client.run(["true"]), (client) => client.health(), (client) => client.cancel("r-1")]) {
      const error = await rejection(call(new Client(socket)), DaemonUnreachable);
      assert.equal(error.socket, socket);
      assert.equal(error.code, code);
      assert.ok(error.message.includes(socket), error.message);
      assert.match(error.message, /egress-sandbox serve/);
      assert.ok(error instanceof SandboxError);
      assert.equal(error.status, null);
    }
  }
});

/** The client refuses `call` with InvalidRequest naming `field`, having sent nothing. */
async function refusedBeforeSending(t, field, argv, options) {
  const daemon = await fakeDaemon(t);
  const client = new Client(daemon.socket);
  const error = await rejection(client.run(argv, options), InvalidRequest);
  assert.deepEqual([error.field, error.status], [field, 400]);
  if (!Object.keys(options ?? {}).some((name) => name.startsWith("on"))) {
    assert.throws(() => client.events(argv, options), (thrown) => thrown instanceof InvalidRequest && thrown.field === field);
  }
  assert.deepEqual(daemon.seen, []);
  return error;
}

test("a string as the command is refused before anything is sent", async (t) => {
  const error = await refusedBeforeSending(t, "argv", "ls -la");
  assert.match(error.error, /\["sh", "-c", LINE\]/);
  await refusedBeforeSending(t, "argv", ["ls", 3]);
  await refusedBeforeSending(t, "argv", undefined);
});

test("an unknown option is refused, naming it", async (t) => {
  const error = await refusedBeforeSending(t, "egress_network", ["true"], { egress_network: "x" });
  assert.match(error.error, /unknown option egress_network: did you mean egressNetwork\?/);
  await refusedBeforeSending(t, "timout", ["true"], { timout: 5 });
  const events = await fakeDaemon(t);
  assert.throws(() => new Client(events.socket).events(["true"], { onOutput: () => {} }),
    (error) => error instanceof InvalidRequest && error.field === "onOutput");
});

test("a value of the wrong kind is refused before anything is sent", async (t) => {
  await refusedBeforeSending(t, "allow", ["true"], { allow: "pypi.org" });
  await refusedBeforeSending(t, "mounts", ["true"], { mounts: "/src:/dst" });
  await refusedBeforeSending(t, "policies", ["true"], { policies: "version: 1\n" });
  await refusedBeforeSending(t, "env", ["true"], { env: "A=1" });
  await refusedBeforeSending(t, "env", ["true"], { env: [["A", "1", "2"]] });
  await refusedBeforeSending(t, "files", ["true"], { files: { "a.txt": 3 } });
  await refusedBeforeSending(t, "timeout", ["true"], { timeout: 0 });
  await refusedBeforeSending(t, "timeout", ["true"], { timeout: -1 });
  await refusedBeforeSending(t, "cpus", ["true"], { cpus: "2" });
  await refusedBeforeSending(t, "pids", ["true"], { pids: 1.5 });
  await refusedBeforeSending(t, "stdin", ["true"], { stdin: 3 });
  await refusedBeforeSending(t, "onOutput", ["true"], { onOutput: "print" });
  await refusedBeforeSending(t, "signal", ["true"], { signal: "stop" });
  await refusedBeforeSending(t, "options", ["true"], "fast");
});

test("a warning names the caller's line, once per policy", async (t) => {
  const daemon = await fakeDaemon(t);
  const client = new Client(daemon.socket);
  const policy = (name) => [{ file: `${name}.yaml`, yaml: `# ${name} ${process.pid}\n` }];
  let line;
  const warnings = await emittedWarnings(async () => {
    for (let i = 0; i < 2; i++) {
      line = callersLine() + 1;
      await client.run(["true"], { policies: policy("once") });
    }
    await client.run(["true"], { policies: policy("another") });
  });
  const told = warnings.filter((warning) => warning instanceof SandboxWarning);
  assert.equal(told.length, 2, told.map(String).join("\n"));
  assert.equal(told[0].name, "SandboxWarning");
  assert.equal(told[0].message, "policy p.yaml: a warning");
  assert.ok(told[0].location.startsWith(`${THIS_FILE}:${line}:`) || told[0].location.startsWith(`file://${THIS_FILE}:${line}:`),
    told[0].location);
  assert.ok(told[0].detail.includes(told[0].location));
  assert.ok(told[0].stack.includes(THIS_FILE), told[0].stack);
});

test("the callback gets every warning", async (t) => {
  const daemon = await fakeDaemon(t);
  const client = new Client(daemon.socket);
  const seen = [];
  const policies = [{ file: "callback.yaml", yaml: "# callback\n" }];
  const warnings = await emittedWarnings(async () => {
    for (let i = 0; i < 2; i++) await client.run(["true"], { policies, onWarning: (text) => seen.push(text) });
  });
  assert.equal(seen.length, 2);
  assert.equal(warnings.filter((warning) => warning instanceof SandboxWarning).length, 0);
});
