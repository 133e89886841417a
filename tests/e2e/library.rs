//! The library as another program embeds it (what `examples/embed.rs` shows): one
//! `Sandbox` handle that names its proxy binary, a spec built in code, the command's output
//! in the caller's writers, and the run's events — its id, the start, each audit record,
//! the end — received while it runs. Two runs share the handle.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use egress_sandbox::{OutputSinks, RunEvent, RunSpec, RunStatus, Sandbox};

use crate::support::{TestNetwork, Upstream, assert_nothing_left, gateway_policy, random_hex};

/// A writer whose bytes the test reads afterwards.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[test]
fn an_embedding_program_runs_specs_through_one_handle_and_receives_audit_records_live() {
    let network = TestNetwork::create();
    let upstream = Upstream::http((network.gateway, 0), &format!("lib-{}", random_hex()));
    let port = upstream.port();
    let policy = gateway_policy(
        "embedded",
        network.gateway,
        &[port],
        &[("upstream.test", port)],
    );
    let spec = |script: String| {
        RunSpec::builder(["sh", "-c", script.as_str()])
            .policy_yaml("embedded.yaml", policy.clone())
            .resolve("upstream.test", network.gateway.into())
            .egress_network(network.name.clone())
            .timeout(Duration::from_secs(60))
            .build()
            .expect("the spec builds")
    };
    let reach = spec(format!(
        "curl -sS --max-time 20 http://upstream.test:{port}/from-the-library; echo; \
         curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}\\n' http://refused.test:{port}/"
    ));
    let second = spec("echo second run; exit 3".to_string());

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let sandbox = Sandbox::connect(env!("CARGO_BIN_EXE_egress-sandbox"))
            .await
            .expect("the handle connects");

        let (stdout, stderr) = (Captured::default(), Captured::default());
        let (events, mut received) = tokio::sync::mpsc::channel(16);
        // Read while the run goes on: a full channel would hold the run.
        let follower = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(event) = received.recv().await {
                seen.push(event);
            }
            seen
        });
        let sinks = OutputSinks::new(stdout.clone(), stderr.clone()).with_events(events);
        let outcome = sandbox.run(reach, sinks).await.expect("the run is set up");
        let seen = follower.await.expect("the follower ends with the run");
        let describe = format!(
            "outcome {outcome:?}\nstdout {}\nstderr {}\nevents {seen:?}",
            stdout.text(),
            stderr.text()
        );
        assert_eq!(outcome.status, RunStatus::Exited, "{describe}");
        assert_eq!(outcome.exit_code, 0, "{describe}");
        assert!(stdout.text().contains(&upstream.body), "{describe}");
        assert!(stdout.text().contains("403"), "{describe}");
        assert_eq!(upstream.requests().len(), 1, "{describe}");
        assert_eq!(
            (outcome.attempts.allowed, outcome.attempts.blocked),
            (1, 1),
            "{describe}"
        );

        // The events in order: id, started, (audit …), ended, (audit flushed at the stop …).
        assert_eq!(
            seen.first(),
            Some(&RunEvent::Id(outcome.run_id.clone())),
            "{describe}"
        );
        let position = |wanted: &RunEvent| seen.iter().position(|event| event == wanted);
        let started = position(&RunEvent::Started).expect("a started event");
        let ended = position(&RunEvent::Ended).expect("an ended event");
        assert!(started < ended, "{describe}");
        let records: Vec<serde_json::Value> = seen
            .iter()
            .filter_map(|event| match event {
                RunEvent::Audit(entry) => {
                    Some(serde_json::from_slice(entry.bytes()).expect("JSON record"))
                }
                _ => None,
            })
            .collect();
        let has = |host: &str, decision: &str| {
            records
                .iter()
                .any(|record| record["host"] == host && record["decision"] == decision)
        };
        assert!(has("upstream.test", "allowed"), "{describe}");
        assert!(has("refused.test", "blocked"), "{describe}");
        assert_nothing_left(&outcome.run_id, std::process::id());

        // The same handle runs again (one engine connection, the proxy image kept).
        let stdout = Captured::default();
        let outcome = sandbox
            .run(
                second,
                OutputSinks::new(stdout.clone(), Captured::default()),
            )
            .await
            .expect("the second run is set up");
        assert_eq!((outcome.status, outcome.exit_code), (RunStatus::Exited, 3));
        assert_eq!(stdout.text(), "second run\n");
        assert_nothing_left(&outcome.run_id, std::process::id());
    });
}

#[test]
fn a_handle_refuses_a_proxy_binary_that_does_not_exist_before_touching_docker() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let error = runtime
        .block_on(Sandbox::connect("/nonexistent/egress-sandbox"))
        .expect_err("no such binary");
    assert!(
        error
            .to_string()
            .starts_with("cannot find the proxy binary /nonexistent/egress-sandbox"),
        "{error}"
    );
}

#[test]
fn a_handle_that_keeps_its_binary_runs_on_after_the_binary_is_replaced_on_disk() {
    // The program's own binary at a path of its own, as an installed daemon would have it.
    let install = tempfile::tempdir().expect("temporary directory");
    let installed = install.path().join("egress-sandbox");
    let built = env!("CARGO_BIN_EXE_egress-sandbox");
    if std::fs::hard_link(built, &installed).is_err() {
        std::fs::copy(built, &installed).expect("copy of the binary");
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let sandbox = Sandbox::connect(&installed)
            .await
            .expect("the handle connects")
            .keep_binary()
            .expect("the binary is kept");
        let kept = sandbox.proxy_binary().to_path_buf();
        assert_ne!(kept, installed);

        // An upgrade replaces the file: what is at the path now is no egress-sandbox at all.
        std::fs::remove_file(&installed).unwrap();
        std::fs::write(&installed, "#!/bin/sh\nexit 99\n").unwrap();

        let stdout = Captured::default();
        let spec = RunSpec::builder(["echo", "still running"])
            .build()
            .expect("the spec builds");
        let outcome = sandbox
            .run(spec, OutputSinks::new(stdout.clone(), Captured::default()))
            .await
            .expect("the run is set up with the kept binary");
        assert_eq!((outcome.status, outcome.exit_code), (RunStatus::Exited, 0));
        assert_eq!(stdout.text(), "still running\n");
        assert_nothing_left(&outcome.run_id, std::process::id());

        assert!(kept.exists());
        drop(sandbox);
        assert!(!kept.exists(), "the kept binary is removed with the handle");
    });
}
