// Client of `egress-sandbox serve` (the local API on a Unix socket). No dependencies.
//
//   import { Client } from "./egress-sandbox.mjs";
//   const result = await new Client().run(["node", "main.js"], {
//     files: { "main.js": "console.log(6 * 7)" }, allow: ["registry.npmjs.org"], timeout: 20,
//   });
//   console.log(result.exit_code, result.stdout.toString(), result.blocked);
//
// Output and audit records stream while the command runs; aborting (`signal`) closes the
// connection, which cancels the run on the daemon. Before a byte is sent, the socket must be
// the caller's or root's (see `checkSocket`), else UntrustedSocket.

import fs from "node:fs/promises";
import http from "node:http";
import path from "node:path";

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
  constructor(error, { field = null, status = null, diagnostics = [] } = {}) {
    super(field ? `${error} (field ${field})` : error);
    this.error = error;
    this.field = field;
    this.status = status;
    this.diagnostics = diagnostics;
  }
}

/** The daemon refused the request (400: `run` would have refused it, nothing was created; 503: busy or stopping). */
export class RequestRefused extends SandboxError {
  constructor(status, body) {
    super(body.error ?? "", { field: body.field || null, status, diagnostics: body.diagnostics ?? [] });
  }
}

/** The run could not be set up (Docker refused), or the stream broke off. */
export class DaemonError extends SandboxError {}

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
 * it (not writable by them, or sticky). Rejects with UntrustedSocket, or the file system's
 * error naming the path.
 */
async function checkSocket(socket) {
  if (path.resolve(socket) === path.resolve(defaultPath())) await checkDefaultDirectory(socket);
  const entry = await fs.lstat(socket);
  if (entry.isSymbolicLink()) await checkLink(socket, entry);
  const target = await fs.stat(socket);
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

/** Seconds → whole milliseconds, rounded up (0.0001 s is 1ms, never "0ms"); a string as is. */
const duration = (value) => {
  if (value === undefined || value === null || typeof value === "string") return value ?? undefined;
  if (!(value > 0)) throw new RangeError(`timeout must be a positive number of seconds, got ${value}`);
  return `${Math.ceil(value * 1000)}ms`;
};
const b64 = (data) => Buffer.from(data).toString("base64");

export class Client {
  /** @param {string} [socket] the daemon's socket (default: `defaultSocket()`) */
  constructor(socket) {
    this.socket = socket ?? defaultSocket();
  }

  async #request(method, urlPath, body, signal) {
    await checkSocket(this.socket);
    return new Promise((resolve, reject) => {
      const request = http.request(
        {
          socketPath: this.socket,
          method,
          path: urlPath,
          headers: body === undefined ? {} : { "content-type": "application/json" },
          signal,
        },
        resolve,
      );
      request.on("error", reject);
      request.end(body);
    });
  }

  async #json(response) {
    const chunks = [];
    for await (const chunk of response) chunks.push(chunk);
    const text = Buffer.concat(chunks).toString();
    try {
      return JSON.parse(text || "{}");
    } catch {
      return { error: text };
    }
  }

  async health() {
    return this.#json(await this.#request("GET", "/v1/health"));
  }

  /** Cancels a run in progress (it ends `interrupted`, exit 130, or 143 with terminate). */
  async cancel(runId, { terminate = false } = {}) {
    const response = await this.#request("DELETE", `/v1/runs/${runId}${terminate ? "?signal=TERM" : ""}`);
    const body = await this.#json(response);
    if (response.statusCode !== 200) throw new RequestRefused(response.statusCode, body);
  }

  /**
   * Runs `argv` in a sandbox. Options: allow, policies, timeout (seconds or "500ms"),
   * memory, cpus, pids, tmp, outputLimit, env, workdir, image, files ({path: string|Buffer},
   * under /task), stdin (string|Buffer), resolve, egressNetwork, onOutput(stream, Buffer),
   * onStarted(runId), signal (AbortSignal: cancels the run), secrets ({ NAME: value } for the
   * policy's credentials: the proxy holds them, the sandbox gets placeholders), upstreamCa
   * ([PEM text] the proxy trusts for upstream TLS), runtime (the sandbox's OCI runtime, e.g.
   * "runsc"), auditLimit (records written per run), onAuditLimit
   * ("reserve" or "refuse": what new egress gets past the audit limit), mounts (["SRC:DST[:rw]"] on the daemon's
   * host), onWarning(text) (the daemon's warnings about the run; default:
   * `process.emitWarning`). `env` is an object or a list of [K, V] pairs, `policies` YAML text
   * or { file, yaml }, `upstreamCa` PEM text or { file, pem }, as the API takes them. A null
   * option is the same as none. Resolves to { run_id, exit_code, status, stdout, stderr,
   * blocked, records, report, summary, warnings }; rejects with RequestRefused or
   * DaemonError, both SandboxError (error, field, status, diagnostics).
   */
  async run(argv, options = {}) {
    const request = { argv: [...argv] };
    const optional = {
      allow: options.allow?.length ? [...options.allow] : undefined,
      policies: options.policies?.length ? [...options.policies] : undefined,
      timeout: duration(options.timeout),
      memory: options.memory,
      cpus: options.cpus,
      pids: options.pids,
      tmp: options.tmp,
      output_limit: options.outputLimit,
      env: options.env,
      mounts: options.mounts?.length ? [...options.mounts] : undefined,
      workdir: options.workdir,
      image: options.image,
      files: options.files
        ? Object.fromEntries(Object.entries(options.files).map(([name, data]) => [name, b64(data)]))
        : undefined,
      stdin: options.stdin == null ? undefined : b64(options.stdin),
      resolve: options.resolve,
      egress_network: options.egressNetwork,
      secrets: options.secrets,
      upstream_ca: options.upstreamCa?.length ? [...options.upstreamCa] : undefined,
      runtime: options.runtime,
      audit_limit: options.auditLimit,
      on_audit_limit: options.onAuditLimit,
    };
    for (const [key, value] of Object.entries(optional)) if (value != null) request[key] = value;
    const response = await this.#request("POST", "/v1/runs", JSON.stringify(request), options.signal);
    if (response.statusCode !== 200) throw new RequestRefused(response.statusCode, await this.#json(response));

    let runId = null;
    const warnings = [];
    const stdout = [];
    const stderr = [];
    const records = [];
    let pending = "";
    response.setEncoding("utf8");
    for await (const chunk of response) {
      pending += chunk.toString();
      let newline;
      while ((newline = pending.indexOf("\n")) >= 0) {
        const event = JSON.parse(pending.slice(0, newline));
        pending = pending.slice(newline + 1);
        switch (event.event) {
          case "warning":
            warnings.push(event.text);
            if (options.onWarning) options.onWarning(event.text);
            else process.emitWarning(event.text, "SandboxWarning");
            break;
          case "started":
            runId = event.run;
            options.onStarted?.(runId);
            break;
          case "output": {
            const data = Buffer.from(event.b64, "base64");
            (event.stream === "stderr" ? stderr : stdout).push(data);
            options.onOutput?.(event.stream, data);
            break;
          }
          case "audit":
            records.push(event.record);
            break;
          case "exit":
            response.destroy();
            return {
              run_id: runId,
              exit_code: event.report.exit_code,
              status: event.report.status,
              stdout: Buffer.concat(stdout),
              stderr: Buffer.concat(stderr),
              blocked: event.report.blocked ?? [],
              records,
              report: event.report,
              summary: event.summary,
              warnings,
            };
          case "error":
            response.destroy();
            throw new DaemonError(event.error);
        }
      }
    }
    throw new DaemonError("the daemon's stream ended before the run's end");
  }
}
