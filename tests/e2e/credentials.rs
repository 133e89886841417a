//! Credentials the sandbox never holds (INTERFACE.md B1): the program sends `$API_KEY`,
//! which holds a placeholder; the proxy puts the real key on the wire to the one host of the
//! credential. curl (through HTTPS_PROXY), Python urllib (HTTPS_PROXY) and Node (no proxy
//! support: the transparent path) all trust the run CA with no flags.

use crate::support::{GoSignal, Run, TestNetwork, Upstream, docker_ok, gateway_policy, random_hex};

const HOST: &str = "api.cred.test";

#[test]
fn the_upstream_gets_the_key_and_the_sandbox_only_a_placeholder() {
    let network = TestNetwork::create();
    let (upstream, ca_pem) = Upstream::https_with_test_ca(
        (network.gateway, 443),
        &[HOST],
        &format!("cred-{}", random_hex()),
    );
    let secret = format!("sk-e2e-{}", random_hex());
    let ca_dir = tempfile::tempdir().unwrap();
    let ca_file = ca_dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let mut yaml = gateway_policy("creds", network.gateway, &[443], &[(HOST, 443)]);
    yaml += &format!("credentials:\n  - host: {HOST}\n    secret: API_KEY\n");
    let signal = GoSignal::new();
    let script = format!(
        r#"env; echo; tr '\0' '\n' < /proc/self/environ; echo
curl -sS --max-time 20 -H "Authorization: Bearer $API_KEY" https://{HOST}/curl; echo
python3 -c 'import os, urllib.request as u; print(u.urlopen(u.Request("https://{HOST}/python", headers={{"Authorization": "Bearer " + os.environ["API_KEY"]}}), timeout=20).read().decode())'
node -e 'require("https").get("https://{HOST}/node", {{headers: {{Authorization: "Bearer " + process.env.API_KEY}}}}, (r) => {{ let b = ""; r.on("data", (d) => b += d); r.on("end", () => console.log(b)); }}).on("error", (e) => {{ console.log("node: " + e.message); process.exitCode = 1; }})'
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
        .timeout("90s")
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
    assert!(
        !inspected.contains(&secret),
        "the secret is in docker inspect"
    );
    assert_eq!(
        run.stdout.matches(&upstream.body).count(),
        3,
        "curl, python and node each reached the upstream\n{}",
        run.describe()
    );
    let placeholder = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("API_KEY="))
        .unwrap_or_else(|| panic!("no API_KEY in the sandbox's env\n{}", run.describe()))
        .to_string();
    assert_ne!(placeholder, secret);
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    for (request, path) in requests.iter().zip(["/curl", "/python", "/node"]) {
        assert!(
            request.head.starts_with(&format!("GET {path} ")),
            "{requests:?}"
        );
        assert!(
            request.head.contains(&format!("Bearer {secret}")),
            "the upstream did not get the key: {}",
            request.head
        );
        assert!(!request.head.contains(&placeholder), "{}", request.head);
    }
    let audit = std::fs::read_to_string(run.audit_log_path()).unwrap();
    let report = run.report_text.clone().unwrap_or_default();
    for (what, text) in [
        ("the sandbox's output", &run.stdout),
        ("stderr (-vv)", &run.stderr),
        ("the audit log", &audit),
        ("the report", &report),
    ] {
        assert!(!text.contains(&secret), "the secret is in {what}");
    }
    let credited = run.audit_where(|record| {
        record["host"] == HOST && record["credential"] == "API_KEY" && record["status"] == 200
    });
    assert_eq!(credited.len(), 3, "{}", run.describe());
    run.assert_nothing_left();
}
