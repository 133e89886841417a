//! Audit entries as OCSF events (schema 1.5.0, `security_control` profile), one JSON object
//! per entry, for SIEMs that already understand OCSF.
//!
//! | record | OCSF class | activity |
//! |---|---|---|
//! | `connect`, `tls`, `tcp` | Network Activity (4001) | Open (allowed, would_block), Refuse (blocked), Fail (failed) |
//! | `http` | HTTP Activity (4002) | from the request method (Get, Post, …, Other) when the record has one, else Unknown |
//! | `dns` | DNS Activity (4003) | Query |
//! | `limit`, `end` | Event Log Activity (1008) | Other ("audit limit reached"), Stop (the run's log closed) |
//!
//! The decision becomes `action_id` (what the policy said: allowed → 1 Allowed,
//! blocked/would_block → 2 Denied, failed → 1 Allowed) and `disposition_id` (what the proxy
//! did: 1 Allowed, 2 Blocked, and 17 Logged for would_block, which report mode let
//! through). `limit` and `end` lines are exported rather than skipped so a SIEM sees that a
//! run's attempts were dropped (`end.dropped`), not only the attempts that were written.
//! Everything the OCSF classes have no field for (the raw decision, reason, `seq`) is kept
//! under `unmapped.egress_sandbox`. `src_endpoint` is the client as the proxy saw it (`ip`,
//! `port`) and, when the record names it, the sandbox's host name (`hostname`).

use std::net::{IpAddr, SocketAddr};

use egress_core::audit::{Kind, Outcome};
use serde_json::{Map, Value, json};

use super::log::{Entry, LimitReached, LoggedAttempt, RunEnd};

/// The OCSF schema version the events follow (and are validated against in tests).
pub const OCSF_VERSION: &str = "1.5.0";

const NETWORK_CATEGORY: u32 = 4;
const SYSTEM_CATEGORY: u32 = 1;
const NETWORK_ACTIVITY: u32 = 4001;
const HTTP_ACTIVITY: u32 = 4002;
const DNS_ACTIVITY: u32 = 4003;
const EVENT_LOG_ACTIVITY: u32 = 1008;

/// One entry as one OCSF event.
pub fn event(entry: &Entry) -> Value {
    match entry {
        Entry::Attempt(attempt) => attempt_event(attempt),
        Entry::Limit(limit) => limit_event(limit),
        Entry::End(end) => end_event(end),
    }
}

fn attempt_event(attempt: &LoggedAttempt) -> Value {
    let (class_uid, class_name, activity_id, activity_name) = class_and_activity(attempt);
    let (action_id, action) = match attempt.decision {
        Outcome::Allowed | Outcome::Failed => (1, "Allowed"),
        Outcome::Blocked | Outcome::WouldBlock => (2, "Denied"),
        // An outcome this version does not know: OCSF's "Unknown".
        _ => (0, "Unknown"),
    };
    let (disposition_id, disposition) = match attempt.decision {
        Outcome::Allowed | Outcome::Failed => (1, "Allowed"),
        Outcome::Blocked => (2, "Blocked"),
        Outcome::WouldBlock => (17, "Logged"),
        _ => (0, "Unknown"),
    };
    let (severity_id, severity) = match attempt.decision {
        Outcome::Allowed | Outcome::Failed => (1, "Informational"),
        Outcome::WouldBlock => (2, "Low"),
        Outcome::Blocked => (3, "Medium"),
        _ => (0, "Unknown"),
    };
    let (status_id, status) = match attempt.decision {
        Outcome::Allowed | Outcome::WouldBlock => (1, "Success"),
        Outcome::Blocked | Outcome::Failed => (2, "Failure"),
        _ => (0, "Unknown"),
    };
    let mut event = base(
        class_uid,
        class_name,
        NETWORK_CATEGORY,
        "Network Activity",
        activity_id,
        activity_name,
        attempt.time_ms,
        (severity_id, severity),
    );
    event.insert(
        "metadata".into(),
        metadata(attempt.run.as_deref(), attempt.seq, &attempt.ts),
    );
    event.insert("action_id".into(), json!(action_id));
    event.insert("action".into(), json!(action));
    event.insert("disposition_id".into(), json!(disposition_id));
    event.insert("disposition".into(), json!(disposition));
    event.insert("status_id".into(), json!(status_id));
    event.insert("status".into(), json!(status));
    event.insert("status_detail".into(), json!(attempt.reason));
    event.insert("message".into(), json!(message(attempt)));
    if attempt.duration_ms > 0
        && let Some(end) = attempt.time_ms
    {
        let duration = i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX);
        event.insert("duration".into(), json!(duration));
        event.insert("end_time".into(), json!(end));
        event.insert("start_time".into(), json!(end.saturating_sub(duration)));
    }
    if let Some(policy) = &attempt.policy {
        event.insert("policy".into(), json!({ "name": policy }));
    }
    if let Some(rule) = &attempt.rule {
        event.insert("firewall_rule".into(), json!({ "uid": rule, "name": rule }));
    }
    if let Some(source) = source(attempt) {
        event.insert("src_endpoint".into(), source);
    }
    event.insert("dst_endpoint".into(), destination(attempt));
    if attempt.kind != Kind::Dns {
        event.insert(
            "connection_info".into(),
            json!({ "protocol_name": "tcp", "direction_id": 2, "direction": "Outbound" }),
        );
        event.insert(
            "traffic".into(),
            json!({
                "bytes_out": attempt.bytes_up,
                "bytes_in": attempt.bytes_down,
                "bytes": attempt.bytes_up.saturating_add(attempt.bytes_down),
            }),
        );
    }
    match attempt.kind {
        Kind::Http => {
            event.insert("http_request".into(), http_request(attempt));
            if let Some(code) = attempt.status {
                event.insert("http_response".into(), json!({ "code": code }));
            }
        }
        Kind::Dns => {
            event.insert(
                "query".into(),
                json!({ "hostname": attempt.host, "class": "IN" }),
            );
        }
        Kind::Connect | Kind::Tls | Kind::Tcp => {}
        // A kind this version does not know: only the unmapped fields below.
        _ => {}
    }
    let mut unmapped = json!({
        "kind": attempt.kind.as_str(),
        "decision": attempt.decision.as_str(),
        "reason": attempt.reason,
    });
    if let Some(seq) = attempt.seq {
        unmapped["seq"] = json!(seq);
    }
    if let Some(method) = &attempt.method {
        unmapped["method"] = json!(method);
    }
    event.insert("unmapped".into(), json!({ "egress_sandbox": unmapped }));
    Value::Object(event)
}

fn class_and_activity(attempt: &LoggedAttempt) -> (u32, &'static str, u32, &'static str) {
    match attempt.kind {
        Kind::Connect | Kind::Tls | Kind::Tcp => {
            let (id, name) = match attempt.decision {
                Outcome::Allowed | Outcome::WouldBlock => (1, "Open"),
                Outcome::Blocked => (5, "Refuse"),
                Outcome::Failed => (4, "Fail"),
                _ => (0, "Unknown"),
            };
            (NETWORK_ACTIVITY, "Network Activity", id, name)
        }
        Kind::Http => {
            let (id, name) = http_activity(attempt.method.as_deref());
            (HTTP_ACTIVITY, "HTTP Activity", id, name)
        }
        Kind::Dns => (DNS_ACTIVITY, "DNS Activity", 1, "Query"),
        _ => (NETWORK_ACTIVITY, "Network Activity", 0, "Unknown"),
    }
}

/// HTTP Activity's activity ids are request methods.
fn http_activity(method: Option<&str>) -> (u32, &'static str) {
    let Some(method) = method else {
        return (0, "Unknown");
    };
    match method.to_ascii_uppercase().as_str() {
        "CONNECT" => (1, "Connect"),
        "DELETE" => (2, "Delete"),
        "GET" => (3, "Get"),
        "HEAD" => (4, "Head"),
        "OPTIONS" => (5, "Options"),
        "POST" => (6, "Post"),
        "PUT" => (7, "Put"),
        "TRACE" => (8, "Trace"),
        _ => (99, "Other"),
    }
}

/// The fields every event has. `type_uid` is `class_uid * 100 + activity_id` (OCSF).
#[allow(clippy::too_many_arguments)]
fn base(
    class_uid: u32,
    class_name: &str,
    category_uid: u32,
    category_name: &str,
    activity_id: u32,
    activity_name: &str,
    time_ms: Option<i64>,
    (severity_id, severity): (u32, &str),
) -> Map<String, Value> {
    let mut event = Map::new();
    event.insert("class_uid".into(), json!(class_uid));
    event.insert("class_name".into(), json!(class_name));
    event.insert("category_uid".into(), json!(category_uid));
    event.insert("category_name".into(), json!(category_name));
    event.insert("activity_id".into(), json!(activity_id));
    event.insert("activity_name".into(), json!(activity_name));
    event.insert(
        "type_uid".into(),
        json!(u64::from(class_uid) * 100 + u64::from(activity_id)),
    );
    event.insert(
        "type_name".into(),
        json!(format!("{class_name}: {activity_name}")),
    );
    // A line whose `ts` does not parse still exports; 0 says "unknown" and `original_time`
    // keeps the text.
    event.insert("time".into(), json!(time_ms.unwrap_or(0)));
    event.insert("severity_id".into(), json!(severity_id));
    event.insert("severity".into(), json!(severity));
    event
}

fn metadata(run: Option<&str>, seq: Option<u64>, ts: &str) -> Value {
    let mut metadata = json!({
        "version": OCSF_VERSION,
        "product": {
            "name": "egress-sandbox",
            "vendor_name": "egress-sandbox",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "profiles": ["security_control"],
        "log_name": "egress-sandbox audit",
        "original_time": ts,
    });
    if let Some(run) = run {
        metadata["correlation_uid"] = json!(run);
    }
    if let Some(seq) = seq {
        metadata["sequence"] = json!(seq);
        if let Some(run) = run {
            metadata["uid"] = json!(format!("{run}:{seq}"));
        }
    }
    metadata
}

fn message(attempt: &LoggedAttempt) -> String {
    let port = attempt
        .port
        .map_or_else(String::new, |port| format!(":{port}"));
    let rule = attempt
        .rule
        .as_deref()
        .map_or_else(String::new, |rule| format!(" ({rule})"));
    format!(
        "{} {} {}{port}: {}{rule}",
        attempt.decision.as_str(),
        attempt.kind.as_str(),
        attempt.host,
        attempt.reason
    )
}

/// Where the attempt came from: the client's `ip:port` (IPv6 in brackets) as the proxy saw
/// it, and the sandbox's host name when the record names one. None when it has neither.
fn source(attempt: &LoggedAttempt) -> Option<Value> {
    let mut endpoint = Map::new();
    if let Some(addr) = attempt
        .client
        .as_deref()
        .and_then(|text| text.parse::<SocketAddr>().ok())
    {
        endpoint.insert("ip".into(), json!(addr.ip().to_string()));
        endpoint.insert("port".into(), json!(addr.port()));
    }
    if let Some(name) = &attempt.sandbox_hostname {
        endpoint.insert("hostname".into(), json!(name));
    }
    (!endpoint.is_empty()).then_some(Value::Object(endpoint))
}

/// Where the attempt went: the host as asked (a name, or an IP literal), its port, and the
/// address the proxy connected to when it did.
fn destination(attempt: &LoggedAttempt) -> Value {
    let mut endpoint = Map::new();
    let literal = attempt
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    match literal {
        Some(ip) => {
            endpoint.insert("ip".into(), json!(ip.to_string()));
        }
        None => {
            endpoint.insert("hostname".into(), json!(attempt.host));
        }
    }
    if let Some(port) = attempt.port {
        endpoint.insert("port".into(), json!(port));
    }
    if let Some(addr) = attempt
        .addr
        .as_deref()
        .and_then(|a| a.parse::<SocketAddr>().ok())
    {
        endpoint.insert("ip".into(), json!(addr.ip().to_string()));
        endpoint.insert("port".into(), json!(addr.port()));
    }
    Value::Object(endpoint)
}

fn http_request(attempt: &LoggedAttempt) -> Value {
    let port = attempt
        .port
        .filter(|&port| port != 80)
        .map_or_else(String::new, |port| format!(":{port}"));
    let path = attempt.path.as_deref().unwrap_or("");
    let mut url = json!({
        "scheme": "http",
        "hostname": attempt.host,
        "url_string": format!("http://{}{port}{path}", attempt.host),
    });
    if let Some(port) = attempt.port {
        url["port"] = json!(port);
    }
    if let Some(path) = &attempt.path {
        url["path"] = json!(path);
    }
    let mut request = json!({ "url": url });
    // OCSF's `http_method` is an enum of the eight RFC 9110 methods; any other method
    // (PATCH, WebDAV's, a hostile client's) stays in `unmapped.egress_sandbox.method`.
    if let Some(method) = &attempt.method {
        let method = method.to_ascii_uppercase();
        if http_activity(Some(&method)).0 != 99 {
            request["http_method"] = json!(method);
        }
    }
    request
}

fn limit_event(limit: &LimitReached) -> Value {
    let mut event = base(
        EVENT_LOG_ACTIVITY,
        "Event Log Activity",
        SYSTEM_CATEGORY,
        "System Activity",
        99,
        "Audit limit reached",
        limit.time_ms,
        (3, "Medium"),
    );
    event.insert(
        "metadata".into(),
        metadata(limit.run.as_deref(), limit.seq, &limit.ts),
    );
    event.insert("log_name".into(), json!("egress-sandbox audit"));
    event.insert(
        "message".into(),
        json!(format!(
            "audit limit of {} records reached: later attempts of this run are counted, not written",
            limit.limit
        )),
    );
    let mut unmapped = json!({ "kind": "limit", "reason": "audit_limit", "limit": limit.limit });
    if let Some(seq) = limit.seq {
        unmapped["seq"] = json!(seq);
    }
    event.insert("unmapped".into(), json!({ "egress_sandbox": unmapped }));
    Value::Object(event)
}

fn end_event(end: &RunEnd) -> Value {
    let severity = if end.dropped > 0 {
        (3, "Medium")
    } else {
        (1, "Informational")
    };
    let mut event = base(
        EVENT_LOG_ACTIVITY,
        "Event Log Activity",
        SYSTEM_CATEGORY,
        "System Activity",
        7,
        "Stop",
        end.time_ms,
        severity,
    );
    event.insert(
        "metadata".into(),
        metadata(end.run.as_deref(), end.seq, &end.ts),
    );
    event.insert("log_name".into(), json!("egress-sandbox audit"));
    event.insert("count".into(), json!(end.records));
    event.insert(
        "message".into(),
        json!(format!(
            "audit log of the run closed: {} records written, {} attempts dropped",
            end.records, end.dropped
        )),
    );
    let mut unmapped = json!({ "kind": "end", "records": end.records, "dropped": end.dropped });
    if let Some(seq) = end.seq {
        unmapped["seq"] = json!(seq);
    }
    event.insert("unmapped".into(), json!({ "egress_sandbox": unmapped }));
    Value::Object(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::parse_line;

    fn export(line: &str) -> Value {
        event(&parse_line(line).unwrap())
    }

    #[test]
    fn a_blocked_connect_is_a_refused_network_activity() {
        let event = export(
            r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"connect","client":"10.0.0.3:5","host":"a.example.org","port":443,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"seq":2}"#,
        );
        assert_eq!(event["class_uid"], 4001);
        assert_eq!(event["type_uid"], 400105);
        assert_eq!(event["action_id"], 2);
        assert_eq!(event["disposition_id"], 2);
        assert_eq!(event["time"], 1_795_977_643_123_i64);
        assert_eq!(event["dst_endpoint"]["hostname"], "a.example.org");
        assert_eq!(event["src_endpoint"]["ip"], "10.0.0.3");
        assert_eq!(event["metadata"]["correlation_uid"], "r-1");
        assert_eq!(event["metadata"]["uid"], "r-1:2");
        assert_eq!(event["status_detail"], "not_allowed");
    }

    #[test]
    fn would_block_is_denied_by_policy_but_only_logged() {
        let event = export(
            r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"http","client":null,"host":"[2001:db8::1]","port":80,"decision":"would_block","reason":"ip_literal","rule":null,"addr":"[2001:db8::1]:80","bytes_up":5,"bytes_down":7,"duration_ms":3,"method":"POST","path":"/x","status":201}"#,
        );
        assert_eq!(event["class_uid"], 4002);
        assert_eq!(event["activity_id"], 6);
        assert_eq!(event["action_id"], 2);
        assert_eq!(event["disposition_id"], 17);
        assert_eq!(event["dst_endpoint"]["ip"], "2001:db8::1");
        assert_eq!(event["http_request"]["url"]["path"], "/x");
        assert_eq!(event["http_response"]["code"], 201);
        assert_eq!(event["traffic"]["bytes"], 12);
        assert_eq!(event["start_time"], 1_795_977_643_120_i64);
    }

    /// A plain-HTTP record as the proxy writes it: method, path and status read in clear,
    /// no credential, and the run's sandbox host name.
    const PLAIN_GET: &str = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"http","client":"127.0.0.1:40512","sandbox_hostname":"sandbox-1a2b3c","host":"a.example.org","port":80,"decision":"allowed","reason":"rule","rule":"p:allow[0]","addr":"10.0.0.9","bytes_up":80,"bytes_down":120,"duration_ms":4,"method":"GET","path":"/index.html","status":200,"credential":null,"seq":0,"prev":"ab"}"#;

    #[test]
    fn a_plain_http_request_is_an_http_activity_of_its_method() {
        let event = export(PLAIN_GET);
        assert_eq!(event["class_uid"], 4002);
        assert_eq!(
            (&event["activity_id"], &event["activity_name"]),
            (&json!(3), &json!("Get"))
        );
        assert_eq!(event["type_uid"], 400203);
        assert_eq!(event["http_request"]["http_method"], "GET");
        assert_eq!(event["http_request"]["url"]["path"], "/index.html");
        assert_eq!(event["http_response"]["code"], 200);
        let patch = export(&PLAIN_GET.replace(r#""GET""#, r#""PATCH""#));
        assert_eq!(patch["activity_id"], 99);
        assert_eq!(patch["unmapped"]["egress_sandbox"]["method"], "PATCH");
    }

    #[test]
    fn the_source_endpoint_names_the_sandbox_host() {
        let event = export(PLAIN_GET);
        assert_eq!(
            event["src_endpoint"],
            json!({ "ip": "127.0.0.1", "port": 40512, "hostname": "sandbox-1a2b3c" })
        );
        let without_client = export(&PLAIN_GET.replace(r#""127.0.0.1:40512""#, "null"));
        assert_eq!(
            without_client["src_endpoint"],
            json!({ "hostname": "sandbox-1a2b3c" })
        );
        let without_name =
            export(&PLAIN_GET.replace(r#""sandbox_hostname":"sandbox-1a2b3c","#, ""));
        assert_eq!(
            without_name["src_endpoint"],
            json!({ "ip": "127.0.0.1", "port": 40512 })
        );
    }
}
