//! `egress-sandbox policy check FILE...` and `egress-sandbox policy test -p FILE... TARGET`:
//! what a security team uses to validate policies and review what they do, without Docker.
//!
//! Exit status: `check` 0 when every file is valid (warnings allowed), 1 otherwise.
//! `test` 0 when the target is allowed, 1 when it is blocked (or would be blocked in report
//! mode), 2 when the input is invalid and nothing was decided: no policy given, a target
//! that is not host[:port] or an http(s) URL, a policy or `--allow` that is invalid or
//! policies whose credentials conflict (their diagnostics are printed on stderr). As with
//! `grep`, 1 is an answer and 2 is not, so a script can tell them apart.

use std::path::PathBuf;
use std::process::ExitCode;

use egress_core::policy::{Decision, Diagnostic, Policy, PolicySet, Verdict, split_path};
use egress_core::target::Target;
use egress_core::text::visible;

use super::USAGE;
use crate::cli::{PolicyArgs, PolicyCommand};

/// One line on stdout. Everything printed here may quote a policy file's text, its file
/// name or a target someone pasted: control, bidi and separator characters are shown as
/// visible escapes (`text::visible`), never raw.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::commands::print_out(&format!("{}\n", visible(&format!($($arg)*))))
    };
}

/// As [`say!`], on stderr.
macro_rules! warn {
    ($($arg:tt)*) => { eprintln!("{}", visible(&format!($($arg)*))) };
}

mod suggest;

pub fn run(args: PolicyArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PolicyCommand::Suggest {
            files,
            name,
            wildcard_after,
        } => suggest::suggest(&files, &name, wildcard_after),
        PolicyCommand::Check { files, within } => Ok(check(&files, within.as_deref())),
        PolicyCommand::Test {
            policies,
            allow,
            words,
        } => Ok(match words.as_slice() {
            [target] => test(&policies, &allow, None, target),
            [method, target] => test(&policies, &allow, Some(method), target),
            _ => unreachable!("clap takes one or two words"),
        }),
    }
}

/// Prints every diagnostic and one summary line per file, on stdout: the report is the
/// command's output.
/// With `within`, each valid file is also checked against that upper policy
/// (`policy::check_within`); an invalid UPPER fails the whole check.
fn check(files: &[PathBuf], within: Option<&std::path::Path>) -> ExitCode {
    let upper = match within.map(load_upper) {
        None => None,
        Some(Some(upper)) => Some(upper),
        Some(None) => return ExitCode::FAILURE,
    };
    let mut all_valid = true;
    for file in files {
        let shown = file.display();
        let loaded = Policy::load(file).and_then(|(policy, warnings)| {
            beyond_upper(&shown.to_string(), &policy, upper.as_ref(), warnings)
        });
        match loaded {
            Ok((policy, warnings)) => {
                for warning in &warnings {
                    say!("{warning}");
                }
                say!(
                    "{shown}: ok ({}, {}, {})",
                    count(policy.allow_count(), "allow rule"),
                    count(policy.deny_count(), "deny rule"),
                    count(warnings.len(), "warning"),
                );
            }
            Err(error) => {
                all_valid = false;
                for diagnostic in &error.diagnostics {
                    say!("{diagnostic}");
                }
                let errors = error.diagnostics.iter().filter(|d| d.is_error()).count();
                let warnings = error.diagnostics.len() - errors;
                say!(
                    "{shown}: invalid ({}, {})",
                    count(errors, "error"),
                    count(warnings, "warning")
                );
            }
        }
    }
    if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// UPPER of `check --within`, or None after printing why it cannot serve.
fn load_upper(path: &std::path::Path) -> Option<(String, Policy)> {
    match Policy::load(path) {
        Ok((policy, _)) => Some((path.display().to_string(), policy)),
        Err(error) => {
            for diagnostic in &error.diagnostics {
                say!("{diagnostic}");
            }
            say!(
                "{}: invalid, so it cannot serve as --within",
                path.display()
            );
            None
        }
    }
}

/// A valid policy that reaches beyond UPPER becomes an error, like any other invalid one.
fn beyond_upper(
    file: &str,
    policy: &Policy,
    upper: Option<&(String, Policy)>,
    warnings: Vec<Diagnostic>,
) -> Result<(Policy, Vec<Diagnostic>), egress_core::policy::PolicyError> {
    let errors = upper.map_or_else(Vec::new, |(upper_file, upper)| {
        egress_core::policy::check_within(file, policy, upper_file, upper)
    });
    if errors.is_empty() {
        return Ok((policy.clone(), warnings));
    }
    let mut diagnostics = errors;
    diagnostics.extend(warnings);
    Err(egress_core::policy::PolicyError { diagnostics })
}

fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Loads the policies and flags, decides, prints the verdict on stdout (diagnostics on
/// stderr).
fn test(files: &[PathBuf], allow: &[String], method: Option<&str>, raw_target: &str) -> ExitCode {
    if files.is_empty() && allow.is_empty() {
        warn!("egress-sandbox: error: give at least one policy (-p FILE) or --allow HOST[:PORT]");
        return ExitCode::from(USAGE);
    }
    let shown_target = visible(raw_target);
    let (target, port, path, plain) = match parse_test_target(raw_target) {
        Ok(parsed) => parsed,
        Err(message) => {
            warn!("egress-sandbox: error: TARGET `{shown_target}`: {message}");
            return ExitCode::from(USAGE);
        }
    };
    if let Some(method) = method
        && (method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()))
    {
        warn!("egress-sandbox: error: METHOD `{method}` is not an HTTP method (e.g. GET, POST)");
        return ExitCode::from(USAGE);
    }
    // As in a policy's `methods:`: methods are case-sensitive, and a request says `post`
    // only by mistake (it would be judged as a method no rule names).
    if let Some(method) = method
        && method.bytes().any(|b| b.is_ascii_lowercase())
    {
        warn!(
            "egress-sandbox: error: HTTP methods are case-sensitive and upper case: write `{}`",
            method.to_ascii_uppercase()
        );
        return ExitCode::from(USAGE);
    }
    let Some(set) = load_set(files, allow) else {
        return ExitCode::from(USAGE);
    };
    let mut decision = set.decide(&target, port);
    let mut checked_address = false;
    if let Target::Ip(addr) = target
        && decision.verdict != Verdict::Block
    {
        // The proxy connects to a literal address as given: the floor applies now.
        let address = set.check_address(addr, port);
        if address.verdict == Verdict::Block {
            decision = address;
        }
        checked_address = true;
    }
    // As the proxy judges it: plain HTTP to a TLS-reserved port is refused, unless a
    // credential makes the proxy send it over TLS itself.
    let reserved = plain
        && decision.verdict != Verdict::Block
        && set.reserves_for_tls(port)
        && set.credential_tls_port(&target, port).is_none();
    if reserved {
        decision = Decision::new(
            Verdict::Block,
            egress_core::policy::Reason::SniMismatch,
            None,
        );
    }
    print_decision(&set, &target, port, &decision);
    if reserved {
        say!(
            "  note: port {port} is reserved for TLS (tls.ports, sni: strict) and http:// is plain \
             HTTP: the proxy refuses it"
        );
    }
    match &target {
        Target::Name(_) if decision.verdict != Verdict::Block => say!(
            "  note: the name was not resolved; the proxy resolves it when connecting and refuses \
             private addresses (reason=private_address) unless a cidr rule covers them"
        ),
        Target::Ip(_) if checked_address => {
            say!("  note: address checked against deny cidr rules and the private-address floor")
        }
        _ => {}
    }
    if decision.verdict != Verdict::Block {
        print_inspection(&set, &target, port);
        if let Some(method) = method {
            decision = set.decide_request(&target, port, method, &path);
            print_request(&set, method, &path, &decision);
        }
    }
    if decision.verdict == Verdict::Allow {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Whether the proxy reads this target's requests in clear, and which credential it adds.
fn print_inspection(set: &PolicySet, target: &Target, port: u16) {
    let Some(inspection) = set.inspection(target, port) else {
        say!("  inspected: no (tunnelled as is; the proxy never sees its requests)");
        return;
    };
    let why = match (inspection.credential.is_some(), inspection.restricted) {
        (true, true) => "a credential and method/path rules apply",
        (true, false) => "a credential applies",
        _ => "method/path rules apply",
    };
    say!(
        "  inspected: yes ({why}); TLS is terminated with the run CA and re-originated to the upstream, verified"
    );
    if let Some(credential) = inspection.credential {
        say!(
            "  credential: secret {} sent as `{}: {}` (the client's own `{}` is dropped)",
            credential.secret,
            credential.header,
            credential.value,
            credential.header
        );
    }
}

/// The verdict on one request (method, path without query).
fn print_request(set: &PolicySet, method: &str, path: &str, decision: &Decision) {
    let verdict = decision.verdict;
    let rule = decision
        .rule
        .as_ref()
        .map_or_else(|| "-".to_owned(), ToString::to_string);
    say!(
        "request: {verdict}  {method} {path}  reason={}  rule={rule}",
        decision.reason
    );
    if let Some(rule) = &decision.rule
        && let Some(text) = set.describe_rule(rule)
    {
        say!("  {rule}: {text}");
    }
}

/// One line a reviewer can paste, then the matching rule as written.
fn print_decision(set: &PolicySet, target: &Target, port: u16, decision: &Decision) {
    let verdict = decision.verdict;
    let rule = decision
        .rule
        .as_ref()
        .map_or_else(|| "-".to_owned(), ToString::to_string);
    say!(
        "{verdict}  {target}:{port}  reason={}  rule={rule}  policy={}",
        decision.reason,
        set.name()
    );
    if let Some(rule) = &decision.rule
        && let Some(text) = set.describe_rule(rule)
    {
        say!("  {rule}: {text}");
    }
    if decision.verdict == Verdict::WouldBlock {
        say!("  note: report mode: the proxy lets this through and records it as would_block");
    }
}

/// All policies and flags merged, or None after printing the diagnostics of a bad one or
/// the conflicts of their credentials.
fn load_set(files: &[PathBuf], allow: &[String]) -> Option<PolicySet> {
    let mut policies = Vec::with_capacity(files.len() + 1);
    let mut failed = false;
    let report = |diagnostics: &[Diagnostic]| {
        for diagnostic in diagnostics {
            warn!("{diagnostic}");
        }
    };
    for file in files {
        match Policy::load(file) {
            Ok((policy, warnings)) => {
                report(&warnings);
                policies.push(policy);
            }
            Err(error) => {
                report(&error.diagnostics);
                failed = true;
            }
        }
    }
    if !allow.is_empty() {
        match Policy::from_allow_flags(allow) {
            Ok(policy) => policies.push(policy),
            Err(error) => {
                report(&error.diagnostics);
                failed = true;
            }
        }
    }
    if failed {
        return None;
    }
    match PolicySet::merge(policies) {
        Ok(set) => Some(set),
        Err(conflicts) => {
            for conflict in conflicts.conflicts() {
                warn!("egress-sandbox: error: {conflict}");
            }
            None
        }
    }
}

/// `host[:port]` (port default 443) or a URL `http(s)://host[:port]/...` (port from the
/// scheme), the URL's path without its query (`/` when none), and whether the URL says
/// plain HTTP (`http://`, `ws://`): the host decides the connection, the path is judged
/// only for a request (a METHOD given).
fn parse_test_target(raw: &str) -> Result<(Target, u16, String, bool), String> {
    let mut plain = false;
    let (authority, default_port, path) = match raw.split_once("://") {
        Some((scheme, rest)) => {
            let port = match scheme.to_ascii_lowercase().as_str() {
                "http" | "ws" => {
                    plain = true;
                    80
                }
                "https" | "wss" => 443,
                other => {
                    return Err(format!(
                        "unsupported scheme `{}`; use http or https",
                        visible(other)
                    ));
                }
            };
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let path = split_path(&rest[end..]);
            let path = if path.is_empty() { "/" } else { path };
            (&rest[..end], port, path.to_owned())
        }
        None => (raw, 443, "/".to_owned()),
    };
    let (target, port) = Target::parse_authority(authority, Some(default_port))
        .map_err(|error| error.to_string())?;
    Ok((target, port, path, plain))
}
