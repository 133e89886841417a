//! `egress-sandbox mcp`: the sandbox as an MCP server over stdio (on `rmcp`, the official
//! Rust SDK), with two tools, `run_code` and `run_command` ([`tools`]).
//!
//! Every call is a run through the `serve` daemon's API ([`Client`]): the daemon this
//! server started on a private socket with a warm pool of its own, or a running one named
//! with `--server`. So a call goes through the same checks, pool and lifecycle as `run`,
//! `run --server` and the API. What bounds a run (policies, secrets, limits, image,
//! runtime, egress network) is the operator's command line ([`RunTemplate`]); a call
//! gives only the command, its stdin, files under /task and a time limit no higher than
//! the operator's.
//!
//! - The own daemon's pool is warm before the host is answered: the first call takes a
//!   warm slot.
//! - A result is sized for a model and holds nothing of the operator's ([`outcome`]).
//! - A run that ends, with any exit status or at its time limit, is a result
//!   (`isError: false`); arguments that cannot be run and set-up failures are error results
//!   whose text is what `run` would print.
//! - `notifications/cancelled` interrupts the call's run (the daemon removes its objects);
//!   calls run concurrently, at most `--max-runs` at once (the others wait for a turn).
//! - With a progress token, the call reports progress every second while it is live:
//!   the seconds elapsed, and the run's id in the message (`run ID: 3s`).

mod outcome;
pub mod tools;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use tokio::sync::Semaphore;
use tokio_util::task::AbortOnDropHandle;

use egress_sandbox::Interruption;
use egress_serve::client::{Client, ClientError};
pub use outcome::DEFAULT_RESULT_LIMIT;
use outcome::Gathered;
pub use tools::RunTemplate;

/// How often a live call with a progress token reports.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How long a call waits before asking again a daemon that has its limit of runs live.
const BUSY_RETRY: Duration = Duration::from_millis(250);

/// The server: the daemon it runs through, the operator's bounds, the tools.
#[derive(Clone)]
pub struct McpServer {
    client: Client,
    template: Arc<RunTemplate>,
    tools: Arc<Vec<Tool>>,
    /// One permit per live call (`--max-runs`).
    turns: Arc<Semaphore>,
    max_runs: u32,
}

impl McpServer {
    pub fn new(client: Client, template: RunTemplate, max_runs: usize) -> McpServer {
        let max_runs = u32::try_from(max_runs.max(1)).unwrap_or(u32::MAX);
        McpServer {
            client,
            tools: Arc::new(tools::tools(&template)),
            template: Arc::new(template),
            turns: Arc::new(Semaphore::new(max_runs as usize)),
            max_runs,
        }
    }

    /// Resolves when no call is live (each has ended and asked for its run's end).
    pub async fn idle(&self) {
        let _all = self.turns.acquire_many(self.max_runs).await;
    }

    /// One call, to its result; `cancelled` interrupts its run.
    async fn call(
        &self,
        params: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let request = tools::parse_call(&params.name, params.arguments)
            .and_then(|call| tools::request_for(call, &self.template));
        let request = match request {
            Ok(request) => request,
            Err(invalid) => return outcome::failure(format!("egress-sandbox: error: {invalid}")),
        };
        // Waiting for a turn is part of the call: a cancellation ends the wait too.
        let turn = tokio::select! {
            turn = self.turns.acquire() => turn,
            () = context.ct.cancelled() => {
                return outcome::failure("egress-sandbox: the call was cancelled before it ran");
            }
        };
        let Ok(_turn) = turn else {
            return outcome::failure("egress-sandbox: error: the server is stopping");
        };
        let gathered = Arc::new(Mutex::new(Gathered::new(self.template.result_limit)));
        let progress = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            let started = Instant::now();
            let gathered = gathered.clone();
            AbortOnDropHandle::new(tokio::spawn(async move {
                let mut ticks = tokio::time::interval(PROGRESS_EVERY);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    let seconds = started.elapsed().as_secs_f64().floor();
                    let run = gathered.lock().expect("gathered lock").run.clone();
                    let message = match run {
                        Some(run) => format!("run {run}: {seconds}s"),
                        None => format!("setting up: {seconds}s"),
                    };
                    let update = ProgressNotificationParam::new(token.clone(), seconds)
                        .with_message(message);
                    if peer.notify_progress(update).await.is_err() {
                        return;
                    }
                }
            }))
        });
        let ran = {
            let gathered = gathered.clone();
            let run = async {
                loop {
                    let result = self
                        .client
                        .run(&request, |event| {
                            gathered.lock().expect("gathered lock").take(event)
                        })
                        .await;
                    match result {
                        Err(ClientError::Refused { status, .. })
                            if status == http::StatusCode::SERVICE_UNAVAILABLE
                                && !self.client_is_stopping(&result) =>
                        {
                            tokio::time::sleep(BUSY_RETRY).await
                        }
                        other => return other,
                    }
                }
            };
            tokio::select! {
                result = run => Some(result),
                () = context.ct.cancelled() => None,
            }
        };
        drop(progress);
        match ran {
            Some(Ok(())) => Arc::into_inner(gathered)
                .map(|gathered| gathered.into_inner().expect("gathered lock").result())
                .unwrap_or_else(|| {
                    outcome::failure("egress-sandbox: error: the run is still held")
                }),
            Some(Err(error)) => outcome::refusal(&error),
            None => {
                // The connection to the daemon is gone with the dropped call, which the
                // daemon takes as an interruption too; this says it at once.
                let run = gathered.lock().expect("gathered lock").run.clone();
                if let Some(run) = run
                    && let Err(error) = self.client.cancel(&run, Interruption::Interrupt).await
                {
                    tracing::debug!(%run, error = %egress_core::text::with_causes(&error), "cancel of a run that has ended");
                }
                outcome::failure("egress-sandbox: the call was cancelled; its run was interrupted")
            }
        }
    }

    /// Whether a 503 is the daemon stopping (not worth asking again) rather than busy.
    fn client_is_stopping(&self, result: &Result<(), ClientError>) -> bool {
        matches!(result, Err(ClientError::Refused { refusal, .. }) if refusal.error.contains("stopping"))
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "egress-sandbox",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Runs code in a throwaway sandbox whose only way out is an allowlisting proxy. \
                 The operator fixed the policy, secrets and limits; a call gives the code or \
                 command, stdin, files under /task and at most the operator's time limit.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Ok(self.call(request, &context).await.into())
    }
}
