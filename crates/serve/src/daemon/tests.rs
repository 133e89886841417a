//! The daemon's start, stop and admission on the in-memory engine, no Docker: whatever
//! happens, a stopped (or failed) daemon leaves no container, no network and no socket file.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use egress_sandbox::testing::{Call, CommandScript, FakeEngine, Method, injected_error};
use tokio::sync::{mpsc, oneshot};

use crate::client::{Client, ClientError};
use crate::{ServeError, ServeOptions, serve};

/// How long a step may take before the test fails instead of hanging.
const HANG: Duration = Duration::from_secs(60);

async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no end within {HANG:?}"))
}

/// A daemon serving on the fake engine in the background.
struct Running {
    socket: PathBuf,
    stop: oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Result<(), ServeError>>,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Starts a daemon on `engine` (no pool unless `configure` asks for one) and returns
    /// once its socket accepts connections.
    async fn start(engine: &FakeEngine, configure: impl FnOnce(&mut ServeOptions)) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let mut options = ServeOptions::new(dir.path().join("api.sock"));
        options.pool = 0;
        configure(&mut options);
        let socket = options.socket.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready, is_ready) = oneshot::channel();
        let sandbox = engine.sandbox().unwrap();
        let served = tokio::spawn(serve(
            sandbox,
            options,
            async move {
                let _ = stopped.await;
            },
            move |_| {
                let _ = ready.send(());
            },
        ));
        bounded("the start", is_ready)
            .await
            .expect("the daemon started");
        Running {
            socket,
            stop,
            served,
            _dir: dir,
        }
    }

    fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    /// Stops the daemon and returns once it has stopped.
    async fn stop(self) -> PathBuf {
        self.stop.send(()).unwrap();
        bounded("the stop", self.served)
            .await
            .unwrap()
            .expect("the daemon stopped without an error");
        self.socket
    }
}

/// Runs `argv` through the daemon; every event it streamed, in order, also to `seen`.
async fn run(
    client: &Client,
    argv: &[&str],
    seen: Option<mpsc::UnboundedSender<serde_json::Value>>,
) -> Result<Vec<serde_json::Value>, ClientError> {
    let body = serde_json::to_vec(&serde_json::json!({"argv": argv, "timeout": 60})).unwrap();
    let mut events = Vec::new();
    client
        .run_raw(Bytes::from(body), |line| {
            let event: serde_json::Value = serde_json::from_slice(line).unwrap();
            let last = matches!(event["event"].as_str(), Some("exit" | "error"));
            if let Some(seen) = &seen {
                let _ = seen.send(event.clone());
            }
            events.push(event);
            Ok(last)
        })
        .await?;
    Ok(events)
}

/// `POST /v1/runs` with `body`, the answer as text (head and body), read to its end.
async fn post_raw(socket: &std::path::Path, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let request = format!(
        "POST /v1/runs HTTP/1.1\r\nhost: egress-sandbox\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

fn assert_nothing_left(engine: &FakeEngine, socket: &std::path::Path) {
    assert_eq!(
        engine.leftovers(),
        Vec::<String>::new(),
        "objects left behind"
    );
    assert!(!socket.exists(), "the socket file was left behind");
}

#[tokio::test]
async fn a_started_daemon_answers_and_its_stop_leaves_nothing() {
    let engine = FakeEngine::local();
    let daemon = Running::start(&engine, |options| options.pool = 1).await;
    let (status, body) = bounded("health", daemon.client().get("/v1/health"))
        .await
        .unwrap();
    assert_eq!(status, http::StatusCode::OK);
    let health: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(health["ok"], true, "{health}");
    assert_eq!(health["pool"]["size"], 1, "{health}");
    let events = bounded("a run", run(&daemon.client(), &["echo", "hello"], None))
        .await
        .unwrap();
    assert_eq!(events.last().unwrap()["event"], "exit", "{events:?}");
    let socket = daemon.stop().await;
    assert_nothing_left(&engine, &socket);
}

#[tokio::test]
async fn an_engine_that_fails_at_start_up_is_a_clear_error_and_leaves_nothing() {
    let engine = FakeEngine::local();
    engine.fail_nth(
        Method::Info,
        1,
        injected_error(&Call::new(Method::Info, "")),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServeOptions::new(dir.path().join("api.sock"));
    options.pool = 1;
    let socket = options.socket.clone();
    let error = bounded(
        "the start",
        serve(
            engine.sandbox().unwrap(),
            options,
            std::future::pending(),
            |_| panic!("a daemon whose engine fails must not be ready"),
        ),
    )
    .await
    .expect_err("the start fails");
    assert!(matches!(error, ServeError::Engine(_)), "{error:?}");
    let message = egress_sandbox::with_causes(&error);
    assert!(
        message.contains("runtimes") && message.contains("injected failure"),
        "the error names the step and the engine's answer: {message}"
    );
    assert!(
        !engine
            .calls()
            .iter()
            .any(|call| call.method == Method::CreateContainer),
        "a slot was started: {:?}",
        engine.calls()
    );
    assert_nothing_left(&engine, &socket);
}

/// A runtime the engine lacks stops the start, before the socket, in the words a cold run
/// and a request's fit check use.
#[tokio::test]
async fn a_runtime_the_engine_lacks_stops_the_start() {
    let engine = FakeEngine::local();
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServeOptions::new(dir.path().join("api.sock"));
    options.runtime = Some("kata".into());
    let socket = options.socket.clone();
    let error = bounded(
        "the start",
        serve(
            engine.sandbox().unwrap(),
            options,
            std::future::pending(),
            |_| panic!("a daemon whose runtime is missing must not be ready"),
        ),
    )
    .await
    .expect_err("the start fails");
    assert!(matches!(error, ServeError::Runtime(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "--runtime: the engine has no runtime \"kata\" (it has: runc)"
    );
    assert_nothing_left(&engine, &socket);
}

#[tokio::test]
async fn a_stop_during_a_run_ends_it_and_leaves_nothing() {
    let engine = FakeEngine::local();
    engine.script_command(CommandScript {
        exit: None,
        ..CommandScript::default()
    });
    let daemon = Running::start(&engine, |_| {}).await;
    let (seen, mut events) = mpsc::unbounded_channel();
    let client = daemon.client();
    let running =
        tokio::spawn(async move { run(&client, &["sleep", "infinity"], Some(seen)).await });
    loop {
        let event = bounded("the start of the run", events.recv())
            .await
            .expect("the run started");
        if event["event"] == "started" {
            break;
        }
    }
    let socket = daemon.stop().await;
    let streamed = bounded("the run's end", running).await.unwrap().unwrap();
    let last = streamed.last().unwrap();
    assert_eq!(last["event"], "exit", "{streamed:?}");
    assert_eq!(last["report"]["status"], "interrupted", "{last}");
    assert_nothing_left(&engine, &socket);
}

/// A set-up the engine refuses for a request's value: the `error` event names its field.
#[tokio::test]
async fn a_set_up_error_names_the_field_at_fault() {
    // Task files need a local engine: a remote one refuses them at set-up. (An image, a
    // runtime or an egress network the engine lacks is refused before the run, as a 400.)
    let engine = FakeEngine::remote();
    let daemon = Running::start(&engine, |_| {}).await;
    let body = r#"{"argv":["true"],"files":{"main.py":"cHJpbnQoMSk="}}"#;
    let mut events = Vec::new();
    bounded(
        "the run",
        daemon.client().run_raw(Bytes::from(body), |line| {
            events.push(serde_json::from_slice::<serde_json::Value>(line).unwrap());
            Ok(events.last().unwrap()["event"] == "error")
        }),
    )
    .await
    .unwrap();
    let error = events.last().unwrap();
    assert_eq!(error["field"], "files", "{error}");
    assert_eq!(error["exit_code"], 125, "{error}");
    let socket = daemon.stop().await;
    assert_nothing_left(&engine, &socket);
}

/// `--max-runs 1`: a run whose answer is sent holds no place while its objects are removed.
#[tokio::test]
async fn a_run_being_removed_holds_no_place() {
    let engine = FakeEngine::local();
    let removal = engine.hook(
        &Call::new(Method::RemoveContainer, "egress-run-r-00000000-sandbox"),
        1,
        true,
    );
    let daemon = Running::start(&engine, |options| options.max_runs = 1).await;
    let first = bounded("the first run", run(&daemon.client(), &["true"], None))
        .await
        .unwrap();
    assert_eq!(first.last().unwrap()["event"], "exit", "{first:?}");
    bounded("the first run's removal", removal.reached()).await;
    let second = bounded("the second run", run(&daemon.client(), &["true"], None))
        .await
        .expect("admitted while the first run's objects are being removed");
    assert_eq!(second.last().unwrap()["event"], "exit", "{second:?}");
    removal.release();
    let socket = daemon.stop().await;
    assert_nothing_left(&engine, &socket);
}

/// `--max-runs 1` with a run live: the next request is refused, and the refusal names no
/// field.
#[tokio::test]
async fn a_request_past_the_limit_is_refused_as_busy() {
    let engine = FakeEngine::local();
    engine.script_command(CommandScript {
        exit: None,
        ..CommandScript::default()
    });
    let daemon = Running::start(&engine, |options| options.max_runs = 1).await;
    let (seen, mut events) = mpsc::unbounded_channel();
    let client = daemon.client();
    let running =
        tokio::spawn(async move { run(&client, &["sleep", "infinity"], Some(seen)).await });
    while bounded("the start of the run", events.recv())
        .await
        .expect("the run started")["event"]
        != "started"
    {}
    let answer = bounded(
        "the refusal",
        post_raw(&daemon.socket, r#"{"argv":["true"]}"#),
    )
    .await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    // The live run's time limit is a minute away: the wait is capped at 5 s.
    let retry_after = head.lines().find_map(|line| {
        line.to_ascii_lowercase()
            .strip_prefix("retry-after: ")
            .map(str::to_owned)
    });
    assert_eq!(retry_after.as_deref(), Some("5"), "{head}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("--max-runs"),
        "{body}"
    );
    assert!(body.get("field").is_none(), "no field is at fault: {body}");
    let socket = daemon.stop().await;
    bounded("the run's end", running).await.unwrap().unwrap();
    assert_nothing_left(&engine, &socket);
}
