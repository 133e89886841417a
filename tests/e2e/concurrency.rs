//! Eight runs at once, each under its own policy: each reaches its own upstream and none
//! of the seven others.

use std::time::Duration;

use crate::support::{Run, TestNetwork, Upstream, gateway_policy, random_hex};

const RUNS: usize = 8;

/// Fetches every URL given as an argument through the proxy variables, one line each.
const FETCH_ALL: &str = r#"
import ssl, sys, urllib.request
context = ssl._create_unverified_context()
for index, url in enumerate(sys.argv[1:]):
    try:
        body = urllib.request.urlopen(url, context=context, timeout=20).read().decode()
        print(f"{index} OK {body}", flush=True)
    except Exception as error:
        print(f"{index} REFUSED {error}", flush=True)
"#;

#[test]
fn eight_concurrent_runs_each_reach_only_their_own_allowlist() {
    let network = TestNetwork::create();
    let names: Vec<String> = (0..RUNS).map(|i| format!("upstream-{i}.test")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let upstreams: Vec<Upstream> = (0..RUNS)
        .map(|i| {
            Upstream::https(
                (network.gateway, 0),
                &name_refs,
                &format!("body-{i}-{}", random_hex()),
            )
        })
        .collect();
    let urls: Vec<String> = names
        .iter()
        .zip(&upstreams)
        .map(|(name, upstream)| format!("https://{name}:{}/", upstream.port()))
        .collect();
    let mut program = vec!["python3", "-c", FETCH_ALL];
    program.extend(urls.iter().map(String::as_str));

    let running: Vec<_> = (0..RUNS)
        .map(|i| {
            let port = upstreams[i].port();
            let policy = gateway_policy(
                &format!("concurrent-{i}"),
                network.gateway,
                &[port],
                &[(&names[i], port)],
            );
            names
                .iter()
                .fold(Run::new(&network).policy(&policy), |run, name| {
                    run.resolve(name, network.gateway)
                })
                .timeout("120s")
                .hang_bound(Duration::from_secs(300))
                .spawn(&program)
        })
        .collect();
    let runs: Vec<_> = running.into_iter().map(|run| run.wait()).collect();

    for (i, run) in runs.iter().enumerate() {
        run.assert_code(0);
        for (j, upstream) in upstreams.iter().enumerate() {
            let line = run
                .stdout
                .lines()
                .find(|line| line.starts_with(&format!("{j} ")))
                .unwrap_or_else(|| panic!("run {i} did not try upstream {j}\n{}", run.describe()));
            if i == j {
                assert_eq!(
                    line,
                    format!("{j} OK {}", upstream.body),
                    "run {i} did not reach its own upstream\n{}",
                    run.describe()
                );
            } else {
                assert!(
                    line.starts_with(&format!("{j} REFUSED ")),
                    "run {i} reached upstream {j}: {line}\n{}",
                    run.describe()
                );
                assert!(
                    !run.audit_where(|record| record["host"] == names[j].as_str()
                        && record["decision"] == "blocked"
                        && record["reason"] == "not_allowed")
                        .is_empty(),
                    "run {i}: no not_allowed record for {}\n{}",
                    names[j],
                    run.describe()
                );
            }
        }
        assert_eq!(
            run.report()["policy"],
            format!("concurrent-{i}"),
            "{}",
            run.describe()
        );
    }
    for (j, upstream) in upstreams.iter().enumerate() {
        assert_eq!(
            upstream.requests().len(),
            1,
            "upstream {j} served {:?}",
            upstream.requests()
        );
    }
    let mut run_ids: Vec<String> = runs.iter().map(|run| run.run_id()).collect();
    run_ids.sort();
    run_ids.dedup();
    assert_eq!(run_ids.len(), RUNS, "run ids are not distinct");
    for run in &runs {
        run.assert_nothing_left();
    }
}
