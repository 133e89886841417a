//! `egress-sandbox mcp` driven by the official MCP Python SDK as an agent host drives it
//! (`mcp_host.py`): the handshake, the tools and their schemas, python and node code, stdin
//! and files, a refused host, an allowed one, a time limit, a ceiling, an argument not in
//! the schema, four calls at once, output past the limit, a cancelled call, and nothing
//! left once the host has gone.
//!
//! Needs the `mcp` package: `python3` by default, or the interpreter named by
//! `EGRESS_SANDBOX_TEST_PYTHON` (a venv that has it).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::run::BINARY;
use crate::support::{TestNetwork, Upstream, gateway_policy, objects_owned_by, random_hex};

/// How long the server's objects may take to go once the host has gone.
const REMOVAL_BOUND: Duration = Duration::from_secs(60);

/// A plain HTTP server that answers nobody until `parties` requests are waiting, then
/// everybody: calls that reach it can only all end if they ran at the same time.
fn barrier(ip: Ipv4Addr, parties: usize) -> u16 {
    let listener = TcpListener::bind((ip, 0)).expect("barrier address");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut waiting: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = [0u8; 4096];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let _ = stream.read(&mut head);
            waiting.push(stream);
            if waiting.len() == parties {
                for mut stream in waiting.drain(..) {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\ntogether\n",
                    );
                }
            }
        }
    });
    port
}

fn text(step: &Value) -> &str {
    step["text"].as_str().unwrap_or_default()
}

#[test]
fn an_mcp_host_runs_code_within_the_operators_bounds_and_leaves_nothing() {
    let network = TestNetwork::create();
    let body = format!("api-{}", random_hex());
    let upstream = Upstream::http((network.gateway, 0), &format!("{body}\n"));
    let barrier_port = barrier(network.gateway, 4);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        gateway_policy(
            "mcp",
            network.gateway,
            &[upstream.port(), barrier_port],
            &[],
        ),
    )
    .unwrap();
    let pidfile = dir.path().join("server.pid");
    let python = std::env::var("EGRESS_SANDBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/mcp_host.py");
    let output = Command::new(&python)
        .arg(&host)
        .arg(BINARY)
        .arg(&network.name)
        .arg(network.gateway.to_string())
        .arg(upstream.port().to_string())
        .arg(barrier_port.to_string())
        .arg(&policy)
        .arg(&pidfile)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the MCP host failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));

    assert_eq!(out["server"], "egress-sandbox");
    for tool in ["run_code", "run_command"] {
        let schemas = &out["tools"][tool];
        assert_eq!(
            schemas["input"]["additionalProperties"], false,
            "{schemas:#}"
        );
        assert_eq!(
            schemas["output"]["required"],
            json!([
                "run",
                "status",
                "exit_code",
                "stdout",
                "stderr",
                "truncated",
                "blocked",
                "duration_ms"
            ]),
            "{schemas:#}"
        );
    }
    assert_eq!(
        out["tools"]["run_code"]["input"]["properties"]["language"]["enum"],
        json!(["python", "node", "sh"])
    );

    let python = &out["python"];
    assert_eq!(python["is_error"], false, "{python:#}");
    assert_eq!(
        python["structured"]["stdout"], "from a file piped\n",
        "{python:#}"
    );
    assert_eq!(python["structured"]["status"], "exited");
    assert!(text(python).contains("from a file piped"), "{python:#}");
    assert!(
        text(python).contains("egress-sandbox: exit 0 after"),
        "{python:#}"
    );
    assert_eq!(
        out["node"]["structured"]["stdout"], "42\n",
        "{:#}",
        out["node"]
    );

    let blocked = &out["blocked"]["structured"];
    assert_eq!(blocked["stdout"], "refused\n", "{blocked:#}");
    assert_eq!(
        blocked["blocked"][0]["host"], "blocked.example.org",
        "{blocked:#}"
    );
    assert_eq!(
        blocked["blocked"][0]["reason"], "not_allowed",
        "{blocked:#}"
    );
    assert!(text(&out["blocked"]).contains("blocked.example.org"));

    assert_eq!(
        out["allowed"]["structured"]["stdout"],
        format!("{body}\n"),
        "{:#}",
        out["allowed"]
    );
    assert_eq!(upstream.requests().len(), 1);

    let limited = &out["time_limit"];
    assert_eq!(limited["is_error"], false, "{limited:#}");
    assert_eq!(limited["structured"]["status"], "timeout");
    assert_eq!(limited["structured"]["exit_code"], 124);

    assert_eq!(out["ceiling"]["is_error"], true);
    assert!(
        text(&out["ceiling"]).contains("ceiling of 1m"),
        "{:#}",
        out["ceiling"]
    );
    assert_eq!(out["unknown"]["is_error"], true);
    assert!(
        text(&out["unknown"]).contains("unknown field `allow`"),
        "{:#}",
        out["unknown"]
    );

    for call in out["concurrent"].as_array().unwrap() {
        assert_eq!(call["structured"]["stdout"], "together\n", "{call:#}");
    }

    let truncated = &out["truncated"]["structured"];
    assert_eq!(truncated["truncated"], true, "{truncated:#}");
    assert!(
        truncated["stdout"].as_str().unwrap().len() <= 4096,
        "{truncated:#}"
    );

    let cancelled = &out["cancelled"];
    assert_eq!(cancelled["left"], json!([]), "{cancelled:#}");
    assert_eq!(
        out["after_cancel"]["structured"]["stdout"],
        "still serving\n"
    );

    // The host has gone: the server removed its runs and its pool's slots.
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + REMOVAL_BOUND;
    loop {
        let (left, runs) = objects_owned_by(pid);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server {pid} left objects behind: {left:?} {runs:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The pool's ready counts the verbose server reported, before and after it said it was
/// ready (`pool: R of N warm slots ready` lines, then `MCP server ready on stdio`).
fn pool_counts(stderr: &str) -> (Vec<usize>, Vec<usize>) {
    let (before, after) = stderr
        .split_once("MCP server ready on stdio")
        .unwrap_or_else(|| panic!("the server never said it was ready:\n{stderr}"));
    let counts = |text: &str| {
        text.lines()
            .filter_map(|line| {
                line.split_once("pool: ")?
                    .1
                    .split_once(" of ")?
                    .0
                    .parse()
                    .ok()
            })
            .collect()
    };
    (counts(before), counts(after))
}

/// The OpenAI Agents SDK (`MCPServerStdio`) and LangChain's MCP adapters drive the server
/// as their users do (`mcp_frameworks.py`): their strict-mode conversions keep both tools'
/// schemas as they are, a strict model's nulls are taken, a bad field is named, a long
/// output keeps its head and tail, nothing of the operator's is in a result, and the first
/// call takes a warm slot of a pool that refills.
///
/// Needs `openai-agents`, `langchain-mcp-adapters` and `langchain-core`, which take the MCP
/// SDK 1.x: the interpreter named by `EGRESS_SANDBOX_TEST_FRAMEWORKS_PYTHON` (a venv of its
/// own, as `.ci/run` makes), else `python3`.
#[test]
fn agent_frameworks_take_the_tools_in_strict_mode_and_results_are_sized_for_a_model() {
    let network = TestNetwork::create();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("operator-policy.yaml");
    // Allowing the gateway's private address is what the operator is warned about.
    std::fs::write(&policy, gateway_policy("mcp", network.gateway, &[9], &[])).unwrap();
    let verbose_stderr = dir.path().join("verbose.stderr");
    let quiet_stderr = dir.path().join("quiet.stderr");
    let python =
        std::env::var("EGRESS_SANDBOX_TEST_FRAMEWORKS_PYTHON").unwrap_or_else(|_| "python3".into());
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/mcp_frameworks.py");
    let output = Command::new(&python)
        .arg(&host)
        .arg(BINARY)
        .arg(&network.name)
        .arg(&policy)
        .arg(&verbose_stderr)
        .arg(&quiet_stderr)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the frameworks' host failed ({}; it needs openai-agents and langchain-mcp-adapters, \
         see EGRESS_SANDBOX_TEST_FRAMEWORKS_PYTHON):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let agents = &out["agents"];
    let langchain = &out["langchain"];

    for tool in ["run_code", "run_command"] {
        let schema = &agents["schemas"][tool];
        assert_eq!(&agents["ensure_strict"][tool], schema, "{tool}: {out:#}");
        assert_eq!(agents["function_tools"][tool]["strict"], true, "{tool}");
        assert_eq!(&agents["function_tools"][tool]["params"], schema, "{tool}");
        let converted = &langchain["strict"][tool];
        assert_eq!(converted, schema, "{tool}: {out:#}");
        let file = &converted["properties"]["files"]["items"]["properties"];
        assert_eq!(file["path"]["type"], "string", "{tool}: {converted:#}");
        assert_eq!(file["content"]["type"], "string", "{tool}: {converted:#}");
        for optional in ["stdin", "files", "timeout"] {
            let types = &converted["properties"][optional]["type"];
            assert!(
                types.as_array().is_some_and(|t| t.contains(&json!("null"))),
                "{tool}.{optional}: {types}"
            );
        }
    }

    for (turn, call) in agents["calls"].as_array().unwrap().iter().enumerate() {
        assert_eq!(call["is_error"], false, "{call:#}");
        assert_eq!(
            call["structured"]["stdout"],
            format!("from a file turn {turn}\n"),
            "{call:#}"
        );
    }
    assert_eq!(agents["nulls"]["structured"]["stdout"], "no options\n");
    assert_eq!(agents["bad_field"]["is_error"], true);
    assert!(
        text(&agents["bad_field"]).contains("files[0].content"),
        "{:#}",
        agents["bad_field"]
    );
    assert!(
        langchain["call"]
            .as_str()
            .unwrap()
            .contains("written by langchain"),
        "{langchain:#}"
    );

    let long = &agents["long"]["structured"];
    let long_stdout = long["stdout"].as_str().unwrap();
    assert!(
        long_stdout.starts_with("the first line\nline 0\n"),
        "{long:#}"
    );
    assert!(
        long_stdout.contains(" bytes of stdout cut here]"),
        "{long:#}"
    );
    assert!(
        long_stdout.ends_with("line 19999\nthe last line\n"),
        "{long:#}"
    );
    assert_eq!(
        long["stderr"], "an error at the end\n",
        "stderr has its share"
    );
    assert_eq!(long["truncated"], true);
    assert!(long_stdout.len() + long["stderr"].as_str().unwrap().len() <= 32 * 1024);

    // Nothing of the operator's reaches the model; the operator is told once.
    let warning = "covers private or special addresses";
    let mut results = vec![&agents["nulls"], &agents["bad_field"], &agents["long"]];
    results.extend(agents["calls"].as_array().unwrap());
    for result in results {
        let seen = result.to_string();
        assert!(
            !seen.contains(&*policy.to_string_lossy()) && !seen.contains(warning),
            "{result:#}"
        );
    }
    assert!(!langchain["call"].as_str().unwrap().contains(warning));
    let quiet = std::fs::read_to_string(&quiet_stderr).unwrap();
    assert_eq!(quiet.matches(warning).count(), 1, "{quiet}");

    // Warm before the host is answered; the first call takes a slot; the pool refills.
    let verbose = std::fs::read_to_string(&verbose_stderr).unwrap();
    let (before, after) = pool_counts(&verbose);
    assert_eq!(before.last(), Some(&2), "{verbose}");
    assert_eq!(after.first(), Some(&1), "{verbose}");
    assert_eq!(agents["refilled"], true, "{verbose}");
}

/// The MCP guide's OpenAI Agents SDK and LangChain examples (`docs/examples/`, included in
/// the guide), run as they are against the server: `egress-sandbox` on PATH is the binary
/// under test on the test's egress network. No model: each calls the tools itself.
#[test]
fn the_mcp_guides_framework_examples_run_against_the_server() {
    let network = TestNetwork::create();
    let bin = tempfile::tempdir().unwrap();
    let wrapper = bin.path().join("egress-sandbox");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec '{BINARY}' \"$@\" --egress-network '{}'\n",
            network.name
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let python =
        std::env::var("EGRESS_SANDBOX_TEST_FRAMEWORKS_PYTHON").unwrap_or_else(|_| "python3".into());
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples");
    for (example, says) in [
        (
            "mcp_openai_agents.py",
            &["run_code: strict=True", "run_command: strict=True", "42"][..],
        ),
        (
            "mcp_langchain.py",
            &["--- stdout ---\n42\n", "--- stdout ---\nfrom a file\n"][..],
        ),
    ] {
        let output = Command::new(&python)
            .arg(examples.join(example))
            .env("PATH", &path)
            .output()
            .expect("python3 runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{example} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        for said in says {
            assert!(stdout.contains(said), "{example}: {said:?} in\n{stdout}");
        }
    }
}
