// Client of `egress-sandbox serve` (the local API on a Unix socket). No dependencies.
//
//   import { Client } from "./egress-sandbox.mjs";
//   const result = await new Client().run(["node", "main.js"], {
//     files: { "main.js": "console.log(6 * 7)" }, allow: ["registry.npmjs.org"], timeout: 20,
//   });
//   console.log(result.exitCode, result.stdout.toString(), result.blocked);
//
// Output and audit records stream while the command runs, to callbacks (`run`) or as an
// async iterator (`events`); aborting (`signal`) or leaving the iteration closes the
// connection, which cancels the run on the daemon. A daemon busy with its limit of runs
// (503) is asked again after its Retry-After, within the call's timeout. Before a byte is
// sent, the socket must be the caller's or root's (see `checkSocket`), else UntrustedSocket.
//
// The errors, one hierarchy under SandboxError:
//
//   SandboxError
//     RequestRefused        the request was refused; nothing was created
//       InvalidRequest      400, naming the field (also the client's own checks)
//       DaemonBusy          503, still busy at the call's deadline, or stopping
//     DaemonUnreachable     no daemon answers at the socket
//     UntrustedSocket       the socket is another user's: nothing was sent
//     DaemonError           the run could not be set up, or the answer broke off
//
// and AbortError (not a SandboxError: the caller's own doing) when `signal` aborts the call.

import crypto from "node:crypto";
import fs from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

/** `EGRESS_SANDBOX_SERVER`, else the daemon's default path for this user. */
export function defaultSocket() {
  return process.env.EGRESS_SANDBOX_SERVER || defaultPath();
}

/**
 * Where the daemon listens by default: `/run/egress-sandbox/api.sock` for root, else
 * `$XDG_RUNTIME_DIR/egress-sandbox.sock`, else `$TMPDIR/egress-sandbox-<uid>/api.sock`
 * (TMPDIR defaulting to /tmp).
 */
function defaultPath() {
  const uid = euid();
  if (uid === 0) return "/run/egress-sandbox/api.sock";
  if (process.env.XDG_RUNTIME_DIR) return path.join(process.env.XDG_RUNTIME_DIR, "egress-sandbox.sock");
  return path.join(process.env.TMPDIR || "/tmp", `egress-sandbox-${uid}`, "api.sock");
}

/**
 * Every error of the client carries `error` (the message), `field` (the request field at
 * fault, or null), `status` (the HTTP status, or null once the run had started) and
 * `diagnostics` (policy diagnostics, `FILE:LINE:COL: error: ...`).
 */
export class SandboxError extends Error {
  constructor(error, { field = null, status = null, diagnostics = [], cause } = {}) {
    super(field ? `${error} (field ${field})` : error, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.error = error;
    this.field = field;
    this.status = status;
    this.diagnostics = diagnostics;
  }
}

/**
 * The request was refused and nothing was created: the daemon's answer was not 200
 * (`status` says which; a 404 from `cancel` is an unknown run). `body` is the answer's
 * `{ error, field, diagnostics }`.
 */
export class RequestRefused extends SandboxError {
  constructor(status, body = {}) {
    super(body.error || `the daemon answered ${status}`, {
      field: body.field || null, status, diagnostics: body.diagnostics ?? [],
    });
  }
}

/**
 * 400: the request is one `run` would refuse, and `field` names the request field at fault.
 * Raised by the daemon, or by the client itself before anything is sent for what it can tell
 * alone (a string as the command, an unknown option, a timeout of zero); `status` is 400
 * either way.
 */
export class InvalidRequest extends RequestRefused {}

/**
 * 503: the daemon had its limit of live runs, or was stopping, for as long as the call's
 * timeout let the client wait and ask again, or it gave no `Retry-After` (then `retryAfter`
 * is null). `retryAfter` is its last `Retry-After` in seconds; `attempts` how many times
 * the call asked.
 */
export class DaemonBusy extends RequestRefused {
  constructor(status, body = {}, retryAfter = null) {
    super(status, body);
    this.retryAfter = retryAfter;
    this.attempts = 1;
  }
}

/**
 * No daemon answers at `socket`: the file is missing (`code` ENOENT), nothing listens on it
 * (ECONNREFUSED), or the caller may not connect (EACCES). `cause` is the system's error.
 */
export class DaemonUnreachable extends SandboxError {
  constructor(socket, cause) {
    super(
      `cannot reach the egress-sandbox daemon at ${socket}: ${cause.code ?? cause.message}; start it ` +
        "with `egress-sandbox serve`, or name its socket (EGRESS_SANDBOX_SERVER or the Client's argument)",
      { cause },
    );
    this.socket = socket;
    this.code = cause.code ?? null;
  }
}

/**
 * The run could not be set up (Docker refused: the daemon's `error` event), or the daemon's
 * answer broke off. `runId` is the run's id once it had one, else null; `field` the request
 * field whose value the engine refused (`image`, `runtime`, …), else null.
 */
export class DaemonError extends SandboxError {
  constructor(error, { runId = null, field = null, cause } = {}) {
    super(error, { field, cause });
    this.runId = runId;
  }
}

/**
 * The socket, the default socket's directory, or a symbolic link on the way and its
 * directory belong to someone other than the caller or root: it may be another user's fake
 * daemon, so nothing was sent. `socket` is the path, `owner` the uid at fault, `ownerName`
 * its user name (null where unknown).
 */
export class UntrustedSocket extends SandboxError {
  constructor(socket, owner, ownerName, before, after) {
    const user = ownerName === null ? `uid ${owner}` : `uid ${owner} (${ownerName})`;
    super(
      `${before}${user}${after}: it may be another user's fake daemon, so nothing was sent to it; ` +
        "use a socket of a daemon run by you or by root",
    );
    this.socket = socket;
    this.owner = owner;
    this.ownerName = ownerName;
  }
}

/**
 * The call's `signal` aborted it: `name` "AbortError" and `code` "ABORT_ERR", as Node's own
 * aborted calls; `cause` is the signal's reason, `runId` the run's id if it had started (the
 * daemon interrupts it: the connection is closed).
 */
export class AbortError extends Error {
  constructor(reason, runId = null) {
    super(runId ? `the call was aborted; run ${runId} is interrupted` : "the call was aborted", { cause: reason });
    this.name = "AbortError";
    this.code = "ABORT_ERR";
    this.runId = runId;
  }
}

/**
 * A warning of the daemon about the run (a policy's warning), as `process.emitWarning`
 * gets it when there is no `onWarning`: once per policy and process, its `stack` the
 * caller's (`node --trace-warnings` shows it) and its `detail` the caller's line.
 */
export class SandboxWarning extends Error {
  constructor(text, location) {
    super(text);
    this.name = "SandboxWarning";
    this.location = location;
    if (location) this.detail = `asked for at ${location}`;
  }
}

const euid = () => (process.geteuid ? process.geteuid() : -1);
const trusted = (uid) => uid === 0 || uid === euid();

/** The name /etc/passwd gives `uid`, or null. */
async function userName(uid) {
  try {
    const passwd = await fs.readFile("/etc/passwd", "utf8");
    for (const line of passwd.split("\n")) {
      const [name, , id] = line.split(":");
      if (id !== undefined && Number(id) === uid) return name;
    }
  } catch {
    // No user database to read: the uid alone names the owner.
  }
  return null;
}

async function untrusted(socket, owner, before, after) {
  return new UntrustedSocket(socket, owner, await userName(owner), before, after);
}

/** The default socket's directory: the caller's or root's, and nobody else may add to it. */
async function checkDefaultDirectory(socket) {
  const directory = path.dirname(path.resolve(socket));
  let info;
  try {
    info = await fs.stat(directory);
  } catch (error) {
    if (error.code === "ENOENT") return; // no daemon has made it: connecting fails, naming the socket
    throw error;
  }
  if (!trusted(info.uid)) {
    throw await untrusted(socket, info.uid, `the default socket's directory ${directory} is owned by `, ", not by you or root");
  }
  if (info.mode & 0o022) {
    const mode = (info.mode & 0o7777).toString(8);
    throw await untrusted(
      socket, info.uid, `the default socket's directory ${directory} (owner `,
      `) can be written by its group or others (mode ${mode})`,
    );
  }
}

/**
 * Before connecting (Node cannot ask the kernel who answers, SO_PEERCRED): the default
 * socket's directory must be the caller's or root's and not writable by its group or
 * others; the socket (a link's target) must be owned by the caller or root; a link must be
 * the caller's or root's, in a directory the caller or root owns where others cannot replace
 * it (not writable by them, or sticky). Rejects with UntrustedSocket, or
 * DaemonUnreachable when there is no socket to check.
 */
async function checkSocket(socket) {
  if (path.resolve(socket) === path.resolve(defaultPath())) await checkDefaultDirectory(socket);
  let entry, target;
  try {
    entry = await fs.lstat(socket);
    if (entry.isSymbolicLink()) await checkLink(socket, entry);
    target = await fs.stat(socket);
  } catch (error) {
    if (error instanceof SandboxError) throw error;
    throw new DaemonUnreachable(socket, error);
  }
  if (!trusted(target.uid)) {
    throw await untrusted(socket, target.uid, `${socket} is owned by `, ", not by you or root");
  }
}

/** A link to the socket: whoever may replace it between the check and the connect chooses the daemon. */
async function checkLink(socket, link) {
  if (!trusted(link.uid)) {
    throw await untrusted(socket, link.uid, `the link ${socket} is owned by `, ", not by you or root");
  }
  const directory = path.dirname(path.resolve(socket));
  const holder = await fs.stat(directory);
  if (!trusted(holder.uid)) {
    throw await untrusted(socket, holder.uid, `the link ${socket} is in ${directory}, owned by `, ", not by you or root");
  }
  // In a sticky directory only the link's owner (checked above) may replace it.
  if (holder.mode & 0o022 && !(holder.mode & 0o1000)) {
    const mode = (holder.mode & 0o7777).toString(8);
    throw await untrusted(
      socket, holder.uid, `the link ${socket} is in ${directory} (owner `,
      `), which its group or others can write (mode ${mode}): they could replace the link`,
    );
  }
}

// The options `run` takes: each request field's option and how it goes into the request.
// `list`: an array (a string would go letter by letter); `map`: an object of strings.
const REQUEST_OPTIONS = {
  allow: { field: "allow", kind: "list", item: "string" },
  policies: { field: "policies", kind: "list", item: "text or { file, yaml }" },
  timeout: { field: "timeout", kind: "timeout" },
  memory: { field: "memory", kind: "string" },
  cpus: { field: "cpus", kind: "positive" },
  pids: { field: "pids", kind: "count" },
  tmp: { field: "tmp", kind: "string" },
  outputLimit: { field: "output_limit", kind: "string" },
  env: { field: "env", kind: "env" },
  workdir: { field: "workdir", kind: "string" },
  image: { field: "image", kind: "string" },
  files: { field: "files", kind: "files" },
  stdin: { field: "stdin", kind: "data" },
  resolve: { field: "resolve", kind: "map" },
  mounts: { field: "mounts", kind: "list", item: "string" },
  egressNetwork: { field: "egress_network", kind: "string" },
  secrets: { field: "secrets", kind: "map" },
  upstreamCa: { field: "upstream_ca", kind: "list", item: "text or { file, pem }" },
  runtime: { field: "runtime", kind: "string" },
  auditLimit: { field: "audit_limit", kind: "count" },
  onAuditLimit: { field: "on_audit_limit", kind: "string" },
};
const CALLBACKS = ["onOutput", "onStarted", "onWarning"];
const CALL_OPTIONS = ["signal"];

/** A run's timeout when the call gives none (`run`'s default; a policy may set less), in seconds. */
const DEFAULT_TIMEOUT = 30;
/** The least wait before asking again, whatever `Retry-After` says, in seconds. */
const LEAST_WAIT = 0.1;

const invalid = (field, error) => new InvalidRequest(400, { error, field });
const kindOf = (value) => (value === null ? "null" : Array.isArray(value) ? "an array" : typeof value);
const camel = (name) => name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());
const isData = (value) => typeof value === "string" || value instanceof Uint8Array;
const b64 = (data) => Buffer.from(data).toString("base64");
const isPlainObject = (value) =>
  typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);

/** Seconds → whole milliseconds, rounded up (0.0001 s is 1ms, never "0ms"); a string as is. */
function duration(value) {
  if (typeof value === "string") return value;
  if (typeof value !== "number") {
    throw invalid("timeout", `timeout is a number of seconds or a duration such as "500ms", not ${kindOf(value)}`);
  }
  if (!(value > 0) || !Number.isFinite(value)) {
    throw invalid("timeout", `timeout must be a positive number of seconds, got ${value}`);
  }
  return `${Math.ceil(value * 1000)}ms`;
}

// humantime's units, as the daemon reads a duration's text, in seconds.
const UNITS = {
  nsec: 1e-9, ns: 1e-9, usec: 1e-6, us: 1e-6, "\u00b5s": 1e-6, msec: 1e-3, ms: 1e-3,
  seconds: 1, second: 1, sec: 1, s: 1, minutes: 60, minute: 60, min: 60, m: 60,
  hours: 3600, hour: 3600, hr: 3600, h: 3600, days: 86400, day: 86400, d: 86400,
  weeks: 604800, week: 604800, w: 604800, months: 2630016, month: 2630016, M: 2630016,
  years: 31557600, year: 31557600, y: 31557600,
};

/** The timeout in seconds; null when not given, or text this client does not read (the daemon judges it). */
function secondsOf(timeout) {
  if (timeout == null) return null;
  if (typeof timeout === "number") return timeout;
  const text = timeout.trim();
  const part = /\s*(\d+)\s*([a-zA-Z\u00b5]+)/y;
  let total = 0;
  while (part.lastIndex < text.length) {
    const match = part.exec(text);
    if (!match || !Object.hasOwn(UNITS, match[2])) return null;
    total += Number(match[1]) * UNITS[match[2]];
  }
  return text ? total : null;
}

/** One option's value as its request field takes it; undefined when not given. */
function fieldValue(name, spec, value) {
  const { field } = spec;
  if (value == null) return undefined;
  switch (spec.kind) {
    case "string":
      if (typeof value !== "string") throw invalid(field, `${name} is a string, not ${kindOf(value)}`);
      return value;
    case "positive":
      if (typeof value !== "number" || !(value > 0) || !Number.isFinite(value)) {
        throw invalid(field, `${name} is a positive number, not ${JSON.stringify(value) ?? kindOf(value)}`);
      }
      return value;
    case "count":
      if (!Number.isSafeInteger(value) || value < 0) {
        throw invalid(field, `${name} is a whole number, not ${JSON.stringify(value) ?? kindOf(value)}`);
      }
      return value;
    case "timeout":
      return duration(value);
    case "list": {
      if (!Array.isArray(value)) {
        throw invalid(field, `${name} is an array of ${spec.item}, not ${kindOf(value)}: ${name}: [${JSON.stringify(value)}]`);
      }
      value.forEach((item, index) => {
        if (typeof item !== "string" && (spec.item === "string" || !isPlainObject(item))) {
          throw invalid(field, `${name}[${index}] is ${spec.item}, not ${kindOf(item)}`);
        }
      });
      return value.length ? [...value] : undefined;
    }
    case "map":
      if (!isPlainObject(value)) throw invalid(field, `${name} is an object of strings, not ${kindOf(value)}`);
      return value;
    case "env":
      if (Array.isArray(value)) {
        value.forEach((pair, index) => {
          if (!Array.isArray(pair) || pair.length !== 2 || !pair.every((part) => typeof part === "string")) {
            throw invalid(field, `env[${index}] is not a [name, value] pair of strings: ${JSON.stringify(pair)}`);
          }
        });
        return value.length ? value.map((pair) => [...pair]) : undefined;
      }
      if (!isPlainObject(value)) {
        throw invalid(field, `env is an object or an array of [name, value] pairs, not ${kindOf(value)}`);
      }
      return value;
    case "files":
      if (!isPlainObject(value)) throw invalid(field, `files is an object of path → string or Buffer, not ${kindOf(value)}`);
      return Object.fromEntries(Object.entries(value).map(([file, data]) => {
        if (!isData(data)) throw invalid(field, `files[${JSON.stringify(file)}] is a string or Buffer, not ${kindOf(data)}`);
        return [file, b64(data)];
      }));
    case "data":
      if (!isData(value)) throw invalid(field, `${name} is a string or Buffer, not ${kindOf(value)}`);
      return b64(value);
  }
  throw new Error(`no kind ${spec.kind}`);
}

/**
 * The API's request for `run`'s arguments; a null or undefined option is the same as none.
 * Throws InvalidRequest for what is wrong before anything is sent: a command that is not an
 * array of strings, an unknown option, a value of the wrong kind.
 */
function requestBody(argv, options, allowed) {
  if (typeof argv === "string") {
    throw invalid("argv", 'argv is the command as an array of strings, not one string: ["node", "main.js"]; ' +
      'a shell line goes as ["sh", "-c", LINE]');
  }
  if (!Array.isArray(argv)) throw invalid("argv", `argv is the command as an array of strings, not ${kindOf(argv)}`);
  argv.forEach((arg, index) => {
    if (typeof arg !== "string") throw invalid("argv", `argv[${index}] is ${kindOf(arg)}, not a string`);
  });
  if (!isPlainObject(options)) throw invalid("options", `the options are an object, not ${kindOf(options)}`);
  for (const name of Object.keys(options)) {
    if (Object.hasOwn(REQUEST_OPTIONS, name) || allowed.includes(name)) continue;
    const known = camel(name);
    const hint = known !== name && (Object.hasOwn(REQUEST_OPTIONS, known) || allowed.includes(known))
      ? `: did you mean ${known}?`
      : CALLBACKS.includes(name) ? ": events() gives the events themselves" : "";
    throw invalid(name, `unknown option ${name}${hint}`);
  }
  for (const name of CALLBACKS) {
    if (options[name] != null && typeof options[name] !== "function") {
      throw invalid(name, `${name} is a function, not ${kindOf(options[name])}`);
    }
  }
  if (options.signal != null && !(options.signal instanceof AbortSignal)) {
    throw invalid("signal", `signal is an AbortSignal, not ${kindOf(options.signal)}`);
  }
  const request = { argv: [...argv] };
  for (const [name, spec] of Object.entries(REQUEST_OPTIONS)) {
    const value = fieldValue(name, spec, options[name]);
    if (value !== undefined) request[spec.field] = value;
  }
  return request;
}

/** `Retry-After` in seconds (delta-seconds or an HTTP date); null when absent or neither. */
function retryAfter(value) {
  if (typeof value !== "string") return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const when = Date.parse(text);
  return Number.isNaN(when) ? null : Math.max(0, (when - Date.now()) / 1000);
}

/**
 * The call's time: its `timeout` (else DEFAULT_TIMEOUT) from the call's start bounds how long
 * a busy daemon is waited for. After a wait the request asks for what is left of the
 * caller's timeout, so waiting and running together stay within it; a call that gave no
 * timeout is sent as it was (the daemon's default holds from the run's start).
 */
class Deadline {
  constructor(request, timeout) {
    this.request = request;
    this.started = performance.now();
    const given = secondsOf(timeout);
    this.callerTimeout = given > 0 ? given : null;
    this.budget = this.callerTimeout ?? DEFAULT_TIMEOUT;
    this.waited = false;
    this.attempts = 0;
  }

  elapsed() {
    return (performance.now() - this.started) / 1000;
  }

  /** The request as it goes now. */
  body() {
    this.attempts += 1;
    let request = this.request;
    if (this.waited && this.callerTimeout !== null) {
      const left = this.budget - this.elapsed();
      request = { ...request, timeout: `${Math.max(1, Math.ceil(left * 1000))}ms` };
    }
    return JSON.stringify(request);
  }

  /** Seconds to wait before asking again; throws `refused` when it is not a busy daemon's or the wait would end past the deadline. */
  waitBeforeRetry(refused) {
    if (!(refused instanceof DaemonBusy)) throw refused;
    refused.attempts = this.attempts;
    if (refused.retryAfter === null) throw refused;
    const wait = Math.max(refused.retryAfter, LEAST_WAIT);
    if (this.elapsed() + wait >= this.budget) throw refused;
    this.waited = true;
    return wait;
  }
}

/** The error for a daemon's answer other than 200. */
function refusal(status, text, headers = {}) {
  let body;
  try {
    body = JSON.parse(text);
    if (!isPlainObject(body)) throw new TypeError("not an object");
  } catch {
    body = { error: text.trim() };
  }
  if (status === 400) return new InvalidRequest(status, body);
  if (status === 503) return new DaemonBusy(status, body, retryAfter(headers["retry-after"]));
  return new RequestRefused(status, body);
}

const MODULE_FILE = fileURLToPath(import.meta.url);

/** The caller's stack, without this module's frames: where the call was made. */
function callerStack() {
  const holder = {};
  Error.captureStackTrace(holder);
  const lines = holder.stack.split("\n").slice(1);
  const outside = lines.filter((line) => !line.includes(MODULE_FILE) && !line.includes(import.meta.url));
  const first = outside[0]?.trim().replace(/^at /, "") ?? null;
  // "fn (file:line:col)" or "file:line:col": the place alone.
  const location = first?.match(/\((.*)\)$/)?.[1] ?? first;
  return { stack: outside.join("\n"), location };
}

// (policy, warning) pairs told, oldest first; past the bound the oldest are forgotten (and
// told again if they come back), so a service making a policy per request does not grow.
const told = new Set();
const REMEMBERED = 4096;

/** What names a run's policy for "once per policy": its policies and allow list, as sent. */
function policyKey(request) {
  return crypto.createHash("sha256")
    .update(JSON.stringify({ policies: request.policies ?? null, allow: request.allow ?? null }))
    .digest("hex");
}

function warnOnce(text, policy, caller) {
  const mark = crypto.createHash("sha256").update(`${policy}\0${text}`).digest("hex");
  if (told.has(mark)) return;
  told.add(mark);
  if (told.size > REMEMBERED) told.delete(told.values().next().value);
  const warning = new SandboxWarning(text, caller.location);
  warning.stack = `SandboxWarning: ${text}\n${caller.stack}`;
  process.emitWarning(warning);
}

let toldSnakeCase = false;

/**
 * The result's names before they were camelCase, kept readable (not enumerable: they are not
 * in JSON or a spread) with a DeprecationWarning the first time.
 */
function withOldNames(result) {
  for (const [old, now] of [["run_id", "runId"], ["exit_code", "exitCode"]]) {
    Object.defineProperty(result, old, {
      enumerable: false,
      get() {
        if (!toldSnakeCase) {
          toldSnakeCase = true;
          process.emitWarning(`result.${old} is result.${now} now: results are camelCase like the options`,
            { type: "DeprecationWarning", code: "EGRESS_SANDBOX_SNAKE_CASE" });
        }
        return result[now];
      },
    });
  }
  return result;
}

/** Turns wire events into the client's, gathering the result. */
class Follower {
  constructor() {
    this.runId = null;
    this.stdout = [];
    this.stderr = [];
    this.records = [];
    this.warnings = [];
  }

  /** The client's event for one wire event; null for a kind this client does not know. */
  take(wire) {
    switch (wire.event) {
      case "warning":
        this.warnings.push(wire.text);
        return { event: "warning", text: wire.text };
      case "started":
        this.runId = wire.run;
        return { event: "started", runId: wire.run };
      case "output": {
        const data = Buffer.from(wire.b64, "base64");
        const stream = wire.stream === "stderr" ? "stderr" : "stdout";
        this[stream].push(data);
        return { event: "output", stream, data };
      }
      case "audit":
        this.records.push(wire.record);
        return { event: "audit", record: wire.record };
      case "exit":
        return {
          event: "exit",
          result: withOldNames({
            runId: this.runId,
            exitCode: wire.report.exit_code,
            status: wire.report.status,
            stdout: Buffer.concat(this.stdout),
            stderr: Buffer.concat(this.stderr),
            blocked: wire.report.blocked ?? [],
            records: this.records,
            report: wire.report,
            summary: wire.summary ?? "",
            warnings: this.warnings,
            teardownErrors: wire.teardown_errors ?? [],
          }),
        };
      case "error":
        throw new DaemonError(wire.error || "the run could not be set up", {
          runId: this.runId,
          field: wire.field || null,
        });
      default:
        return null;
    }
  }

  ended(cause) {
    return new DaemonError("the daemon's answer ended before the run's end", { runId: this.runId, cause });
  }
}

const abortError = (signal, runId = null) => new AbortError(signal.reason, runId);

export class Client {
  /** @param {string} [socket] the daemon's socket (default: `defaultSocket()`) */
  constructor(socket) {
    this.socket = socket ?? defaultSocket();
  }

  /** Sends one request (each on a connection of its own, checked first); the response's head. */
  async #request(method, urlPath, body, signal) {
    if (signal?.aborted) throw abortError(signal);
    await checkSocket(this.socket);
    if (signal?.aborted) throw abortError(signal);
    return new Promise((resolve, reject) => {
      const request = http.request(
        {
          socketPath: this.socket,
          method,
          path: urlPath,
          // A connection per request: closing it is what cancels a run.
          agent: false,
          headers: body === undefined ? {} : { "content-type": "application/json" },
          signal,
        },
        resolve,
      );
      request.on("error", (error) => {
        if (signal?.aborted) reject(abortError(signal));
        else if (["ENOENT", "ECONNREFUSED", "EACCES", "ENOTSOCK", "ENOTDIR"].includes(error.code)) {
          reject(new DaemonUnreachable(this.socket, error));
        } else reject(new DaemonError(`the daemon at ${this.socket} did not answer: ${error.message}`, { cause: error }));
      });
      request.end(body);
    });
  }

  async #text(response, signal) {
    const chunks = [];
    try {
      for await (const chunk of response) chunks.push(chunk);
    } catch (error) {
      if (signal?.aborted) throw abortError(signal);
      throw new DaemonError(`the daemon at ${this.socket} broke off its answer: ${error.message}`, { cause: error });
    }
    return Buffer.concat(chunks).toString();
  }

  async #answer(method, urlPath) {
    const response = await this.#request(method, urlPath);
    const text = await this.#text(response);
    if (response.statusCode !== 200) throw refusal(response.statusCode, text, response.headers);
    return JSON.parse(text);
  }

  /** The daemon's `GET /v1/health`. */
  async health() {
    return this.#answer("GET", "/v1/health");
  }

  /** Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate); an unknown id is a 404 RequestRefused. */
  async cancel(runId, { terminate = false } = {}) {
    if (typeof runId !== "string" || !runId) throw invalid("id", `the run id is a non-empty string, not ${kindOf(runId)}`);
    await this.#answer("DELETE", `/v1/runs/${encodeURIComponent(runId)}${terminate ? "?signal=TERM" : ""}`);
  }

  /**
   * Runs `argv` as `run` does, giving its events as an async iterator instead of callbacks:
   * `{ event: "warning", text }`, `{ event: "started", runId }`, `{ event: "output", stream,
   * data }` (a Buffer), `{ event: "audit", record }`, and last `{ event: "exit", result }`
   * (what `run` resolves to). Warnings are only events here. Leaving the loop early (break,
   * an exception) closes the connection, which cancels the run. Takes `run`'s options but the
   * callbacks; throws InvalidRequest at once for what is wrong before anything is sent.
   */
  events(argv, options = {}) {
    const request = requestBody(argv, options, CALL_OPTIONS);
    return this.#follow(new Deadline(request, options.timeout), options.signal ?? null);
  }

  async *#follow(deadline, signal) {
    let response;
    for (;;) {
      response = await this.#request("POST", "/v1/runs", deadline.body(), signal ?? undefined);
      if (response.statusCode === 200) break;
      const refused = refusal(response.statusCode, await this.#text(response, signal), response.headers);
      const wait = deadline.waitBeforeRetry(refused);
      try {
        await sleep(wait * 1000, undefined, signal ? { signal } : undefined);
      } catch (error) {
        if (signal?.aborted) throw abortError(signal);
        throw error;
      }
    }
    const follower = new Follower();
    try {
      response.setEncoding("utf8");
      let pending = "";
      try {
        for await (const chunk of response) {
          pending += chunk;
          let newline;
          while ((newline = pending.indexOf("\n")) >= 0) {
            const line = pending.slice(0, newline);
            pending = pending.slice(newline + 1);
            let wire;
            try {
              wire = JSON.parse(line);
            } catch (error) {
              throw follower.ended(error);
            }
            const event = follower.take(wire);
            if (event === null) continue;
            yield event;
            if (event.event === "exit") return;
          }
        }
      } catch (error) {
        if (signal?.aborted) throw abortError(signal, follower.runId);
        if (error instanceof SandboxError) throw error;
        throw follower.ended(error);
      }
      if (signal?.aborted) throw abortError(signal, follower.runId);
      throw follower.ended();
    } finally {
      response.destroy();
    }
  }

  /**
   * Runs `argv` (an array of strings: the program, then its arguments) in a sandbox.
   * Options: allow, policies, timeout (seconds or "500ms": the whole call's — a busy daemon
   * is asked again after its Retry-After while that stays within it, 30 s when not given,
   * and the run then gets what is left), memory, cpus, pids, tmp, outputLimit, env, workdir,
   * image, files ({path: string|Buffer}, under /task), stdin (string|Buffer), resolve,
   * egressNetwork, onOutput(stream, Buffer), onStarted(runId), signal (AbortSignal: cancels
   * the run; the call rejects with AbortError), secrets ({ NAME: value } for the policy's
   * credentials: the proxy holds them, the sandbox gets placeholders), upstreamCa ([PEM
   * text] the proxy trusts for upstream TLS), runtime (the sandbox's OCI runtime, e.g.
   * "runsc"), auditLimit (records written per run), onAuditLimit ("reserve" or "refuse":
   * what new egress gets past the audit limit), mounts (["SRC:DST[:rw]"] on the daemon's
   * host), onWarning(text) (the daemon's warnings about the run; default: a SandboxWarning
   * through `process.emitWarning`, once per policy, naming the caller's line). `env` is an
   * object or a list of [K, V] pairs, `policies` YAML text or { file, yaml }, `upstreamCa`
   * PEM text or { file, pem }, as the API takes them. A null option is the same as none; an
   * unknown one is an InvalidRequest. Resolves to { runId, exitCode, status, stdout, stderr,
   * blocked, records, report, summary, warnings, teardownErrors }; rejects with a
   * SandboxError (error, field, status, diagnostics) or AbortError.
   */
  async run(argv, options = {}) {
    const caller = callerStack();
    const request = requestBody(argv, options, [...CALL_OPTIONS, ...CALLBACKS]);
    const policy = policyKey(request);
    const events = this.#follow(new Deadline(request, options.timeout), options.signal ?? null);
    for await (const event of events) {
      switch (event.event) {
        case "warning":
          if (options.onWarning) options.onWarning(event.text);
          else warnOnce(event.text, policy, caller);
          break;
        case "started":
          options.onStarted?.(event.runId);
          break;
        case "output":
          options.onOutput?.(event.stream, event.data);
          break;
        case "exit":
          return event.result;
      }
    }
    throw new DaemonError("the daemon's answer ended before the run's end");
  }
}
