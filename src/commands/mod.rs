//! One module per subcommand. Each `run` returns the process exit code; an `Err` is a
//! set-up failure and exits 125.

pub mod audit;
pub mod gc;
pub mod policy;
pub mod proxy;
pub mod run;
pub mod run_client;
pub mod run_flags;
pub mod sandbox_gate;
pub mod serve;
