//! Audit records as OCSF events (schema 1.5.0, `security_control` profile), one JSON object
//! per line of the log, for SIEMs that already understand OCSF. The events are typed
//! ([`Event`]) and written by serde.
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

use egress_core::audit::{AuditLine, EndRecord, Kind, LimitRecord, Outcome, epoch_millis};
use serde::Serialize;

use super::log::{LoggedAttempt, LoggedLine};

/// The OCSF schema version the events follow (and are validated against in tests).
pub const OCSF_VERSION: &str = "1.5.0";

const NETWORK_CATEGORY: u32 = 4;
const SYSTEM_CATEGORY: u32 = 1;
const NETWORK_ACTIVITY: u32 = 4001;
const HTTP_ACTIVITY: u32 = 4002;
const DNS_ACTIVITY: u32 = 4003;
const EVENT_LOG_ACTIVITY: u32 = 1008;
const LOG_NAME: &str = "egress-sandbox audit";

/// One OCSF event of any class: the fields every class has, and the class's own as options
/// (attempts: Network, HTTP or DNS Activity; `limit` and `end`: Event Log Activity). Every
/// struct here declares its fields in name order, so an event's keys are written sorted:
/// one text per event.
#[derive(Debug, Serialize)]
pub struct Event {
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action_id: Option<u32>,
    activity_id: u32,
    activity_name: &'static str,
    category_name: &'static str,
    category_uid: u32,
    class_name: &'static str,
    class_uid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    connection_info: Option<ConnectionInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disposition: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disposition_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dst_endpoint: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_time: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    firewall_rule: Option<FirewallRule>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_request: Option<HttpRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_response: Option<HttpResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_name: Option<&'static str>,
    message: String,
    metadata: Metadata,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<PolicyName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<Query>,
    severity: &'static str,
    severity_id: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    src_endpoint: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_time: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_id: Option<u32>,
    /// Milliseconds since the epoch; 0 when the line's `ts` does not parse
    /// (`metadata.original_time` keeps the text).
    time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic: Option<Traffic>,
    type_name: String,
    /// `class_uid * 100 + activity_id` (OCSF).
    type_uid: u64,
    unmapped: Unmapped,
}

#[derive(Debug, Serialize)]
struct ConnectionInfo {
    direction: &'static str,
    direction_id: u32,
    protocol_name: &'static str,
}

/// `src_endpoint` or `dst_endpoint`.
#[derive(Debug, Default, Serialize)]
struct Endpoint {
    #[serde(skip_serializing_if = "Option::is_none")]
    hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
}

#[derive(Debug, Serialize)]
struct FirewallRule {
    name: String,
    uid: String,
}

#[derive(Debug, Serialize)]
struct HttpRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    http_method: Option<String>,
    url: Url,
}

#[derive(Debug, Serialize)]
struct Url {
    hostname: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    scheme: &'static str,
    url_string: String,
}

#[derive(Debug, Serialize)]
struct HttpResponse {
    code: u16,
}

#[derive(Debug, Serialize)]
struct Metadata {
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_uid: Option<String>,
    log_name: &'static str,
    original_time: String,
    product: Product,
    profiles: [&'static str; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    version: &'static str,
}

#[derive(Debug, Serialize)]
struct Product {
    name: &'static str,
    vendor_name: &'static str,
    version: &'static str,
}

#[derive(Debug, Serialize)]
struct PolicyName {
    name: String,
}

#[derive(Debug, Serialize)]
struct Query {
    class: &'static str,
    hostname: String,
}

#[derive(Debug, Serialize)]
struct Traffic {
    bytes: u64,
    bytes_in: u64,
    bytes_out: u64,
}

#[derive(Debug, Serialize)]
struct Unmapped {
    egress_sandbox: EgressFields,
}

/// What the OCSF classes have no field for, as the record names it.
#[derive(Debug, Default, Serialize)]
struct EgressFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped: Option<u64>,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
}

/// An event's class and activity, by id and name.
struct Class {
    class_uid: u32,
    class_name: &'static str,
    category_uid: u32,
    category_name: &'static str,
    activity_id: u32,
    activity_name: &'static str,
}

/// One line as one OCSF event; `None` for a kind of line this version has no mapping for.
pub fn event(line: &LoggedLine) -> Option<Event> {
    match line {
        AuditLine::Attempt(attempt) => Some(attempt_event(attempt)),
        AuditLine::Limit(limit) => Some(limit_event(limit)),
        AuditLine::End(end) => Some(end_event(end)),
        _ => None,
    }
}

impl Event {
    /// The fields every event has, the class-specific ones left out.
    fn new(
        class: Class,
        ts: &str,
        (severity_id, severity): (u32, &'static str),
        metadata: Metadata,
        message: String,
        unmapped: EgressFields,
    ) -> Event {
        Event {
            action: None,
            action_id: None,
            activity_id: class.activity_id,
            activity_name: class.activity_name,
            category_name: class.category_name,
            category_uid: class.category_uid,
            class_name: class.class_name,
            class_uid: class.class_uid,
            connection_info: None,
            count: None,
            disposition: None,
            disposition_id: None,
            dst_endpoint: None,
            duration: None,
            end_time: None,
            firewall_rule: None,
            http_request: None,
            http_response: None,
            log_name: None,
            message,
            metadata,
            policy: None,
            query: None,
            severity,
            severity_id,
            src_endpoint: None,
            start_time: None,
            status: None,
            status_detail: None,
            status_id: None,
            // A line whose `ts` does not parse still exports; 0 says "unknown" and
            // `original_time` keeps the text.
            time: epoch_millis(ts).unwrap_or(0),
            traffic: None,
            type_name: format!("{}: {}", class.class_name, class.activity_name),
            type_uid: u64::from(class.class_uid) * 100 + u64::from(class.activity_id),
            unmapped: Unmapped {
                egress_sandbox: unmapped,
            },
        }
    }
}

fn attempt_event(attempt: &LoggedAttempt) -> Event {
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
    let severity = match attempt.decision {
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
    let method = attempt
        .request
        .as_ref()
        .map(|request| request.method.clone());
    let unmapped = EgressFields {
        decision: Some(attempt.decision.as_str()),
        kind: attempt.kind.as_str(),
        method: method.clone(),
        reason: Some(attempt.reason.to_string()),
        seq: attempt.seq,
        ..EgressFields::default()
    };
    let metadata = metadata(attempt.run.as_deref(), attempt.seq, &attempt.ts);
    let mut event = Event::new(
        class(attempt),
        &attempt.ts,
        severity,
        metadata,
        message(attempt),
        unmapped,
    );
    event.action_id = Some(action_id);
    event.action = Some(action);
    event.disposition_id = Some(disposition_id);
    event.disposition = Some(disposition);
    event.status_id = Some(status_id);
    event.status = Some(status);
    event.status_detail = Some(attempt.reason.to_string());
    if attempt.duration_ms > 0
        && let Some(end) = epoch_millis(&attempt.ts)
    {
        let duration = i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX);
        event.duration = Some(duration);
        event.end_time = Some(end);
        event.start_time = Some(end.saturating_sub(duration));
    }
    event.policy = attempt.policy.clone().map(|name| PolicyName { name });
    event.firewall_rule = attempt.rule.clone().map(|rule| FirewallRule {
        name: rule.clone(),
        uid: rule,
    });
    event.src_endpoint = source(attempt);
    event.dst_endpoint = Some(destination(attempt));
    if attempt.kind != Kind::Dns {
        event.connection_info = Some(ConnectionInfo {
            direction: "Outbound",
            direction_id: 2,
            protocol_name: "tcp",
        });
        event.traffic = Some(Traffic {
            bytes: attempt.bytes_up.saturating_add(attempt.bytes_down),
            bytes_in: attempt.bytes_down,
            bytes_out: attempt.bytes_up,
        });
    }
    match attempt.kind {
        Kind::Http => {
            event.http_request = Some(http_request(attempt));
            event.http_response = attempt
                .request
                .as_ref()
                .and_then(|request| request.status)
                .map(|code| HttpResponse { code });
        }
        Kind::Dns => {
            event.query = Some(Query {
                class: "IN",
                hostname: attempt.host.clone(),
            });
        }
        // Connect, Tls, Tcp, and a kind this version does not know: nothing more.
        _ => {}
    }
    event
}

fn class(attempt: &LoggedAttempt) -> Class {
    let network = |class_uid, class_name, (activity_id, activity_name)| Class {
        class_uid,
        class_name,
        category_uid: NETWORK_CATEGORY,
        category_name: "Network Activity",
        activity_id,
        activity_name,
    };
    match attempt.kind {
        Kind::Connect | Kind::Tls | Kind::Tcp => {
            let activity = match attempt.decision {
                Outcome::Allowed | Outcome::WouldBlock => (1, "Open"),
                Outcome::Blocked => (5, "Refuse"),
                Outcome::Failed => (4, "Fail"),
                _ => (0, "Unknown"),
            };
            network(NETWORK_ACTIVITY, "Network Activity", activity)
        }
        Kind::Http => {
            let method = attempt.request.as_ref().map(|r| r.method.as_str());
            network(HTTP_ACTIVITY, "HTTP Activity", http_activity(method))
        }
        Kind::Dns => network(DNS_ACTIVITY, "DNS Activity", (1, "Query")),
        _ => network(NETWORK_ACTIVITY, "Network Activity", (0, "Unknown")),
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

fn metadata(run: Option<&str>, seq: Option<u64>, ts: &str) -> Metadata {
    Metadata {
        correlation_uid: run.map(str::to_owned),
        log_name: LOG_NAME,
        original_time: ts.to_owned(),
        product: Product {
            name: "egress-sandbox",
            vendor_name: "egress-sandbox",
            version: env!("CARGO_PKG_VERSION"),
        },
        profiles: ["security_control"],
        sequence: seq,
        uid: run.zip(seq).map(|(run, seq)| format!("{run}:{seq}")),
        version: OCSF_VERSION,
    }
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
fn source(attempt: &LoggedAttempt) -> Option<Endpoint> {
    let client = attempt
        .client
        .as_deref()
        .and_then(|text| text.parse::<SocketAddr>().ok());
    let endpoint = Endpoint {
        hostname: attempt.sandbox_hostname.clone(),
        ip: client.map(|addr| addr.ip().to_string()),
        port: client.map(|addr| addr.port()),
    };
    (endpoint.hostname.is_some() || endpoint.ip.is_some()).then_some(endpoint)
}

/// Where the attempt went: the host as asked (a name, or an IP literal), its port, and the
/// address the proxy connected to when it did.
fn destination(attempt: &LoggedAttempt) -> Endpoint {
    let literal = attempt
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let connected = attempt
        .addr
        .as_deref()
        .and_then(|a| a.parse::<SocketAddr>().ok());
    Endpoint {
        hostname: literal.is_none().then(|| attempt.host.clone()),
        ip: connected
            .map(|addr| addr.ip())
            .or(literal)
            .map(|ip| ip.to_string()),
        port: connected.map(|addr| addr.port()).or(attempt.port),
    }
}

fn http_request(attempt: &LoggedAttempt) -> HttpRequest {
    let port = attempt
        .port
        .filter(|&port| port != 80)
        .map_or_else(String::new, |port| format!(":{port}"));
    let path = attempt.request.as_ref().map(|request| request.path.clone());
    let url = Url {
        hostname: attempt.host.clone(),
        port: attempt.port,
        scheme: "http",
        url_string: format!(
            "http://{}{port}{}",
            attempt.host,
            path.as_deref().unwrap_or("")
        ),
        path,
    };
    // OCSF's `http_method` is an enum of the eight RFC 9110 methods; any other method
    // (PATCH, WebDAV's, a hostile client's) stays in `unmapped.egress_sandbox.method`.
    let http_method = attempt
        .request
        .as_ref()
        .map(|request| request.method.to_ascii_uppercase())
        .filter(|method| http_activity(Some(method)).0 != 99);
    HttpRequest { http_method, url }
}

/// `limit` and `end` lines: Event Log Activity of the run's log.
fn log_class(activity_id: u32, activity_name: &'static str) -> Class {
    Class {
        class_uid: EVENT_LOG_ACTIVITY,
        class_name: "Event Log Activity",
        category_uid: SYSTEM_CATEGORY,
        category_name: "System Activity",
        activity_id,
        activity_name,
    }
}

fn limit_event(limit: &LimitRecord) -> Event {
    let message = format!(
        "audit limit of {} records reached: later attempts of this run are counted, not written",
        limit.limit
    );
    let unmapped = EgressFields {
        kind: "limit",
        limit: Some(limit.limit),
        reason: Some("audit_limit".to_owned()),
        seq: limit.seq,
        ..EgressFields::default()
    };
    let metadata = metadata(limit.run.as_deref(), limit.seq, &limit.ts);
    let class = log_class(99, "Audit limit reached");
    let mut event = Event::new(class, &limit.ts, (3, "Medium"), metadata, message, unmapped);
    event.log_name = Some(LOG_NAME);
    event
}

fn end_event(end: &EndRecord) -> Event {
    let severity = if end.dropped > 0 {
        (3, "Medium")
    } else {
        (1, "Informational")
    };
    let message = format!(
        "audit log of the run closed: {} records written, {} attempts dropped",
        end.records, end.dropped
    );
    let unmapped = EgressFields {
        dropped: Some(end.dropped),
        kind: "end",
        records: Some(end.records),
        seq: end.seq,
        ..EgressFields::default()
    };
    let metadata = metadata(end.run.as_deref(), end.seq, &end.ts);
    let mut event = Event::new(
        log_class(7, "Stop"),
        &end.ts,
        severity,
        metadata,
        message,
        unmapped,
    );
    event.log_name = Some(LOG_NAME);
    event.count = Some(end.records);
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_core::audit::read_log;
    use serde_json::{Value, json};

    fn export(line: &str) -> Value {
        let line = read_log(line.as_bytes()).next().unwrap().unwrap();
        serde_json::to_value(event(&line.record.unwrap())).unwrap()
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

    /// Fields declared out of name order would change the export's text.
    #[test]
    fn an_events_keys_are_written_sorted_at_every_level() {
        let limit = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"limit","reason":"audit_limit","limit":5,"seq":5,"prev":"x"}"#;
        let end = r#"{"v":1,"ts":"2026-11-29T18:40:44.000Z","run":"r-1","policy":"p","kind":"end","records":6,"dropped":9,"seq":6,"prev":"y"}"#;
        let dns = PLAIN_GET.replace(r#""kind":"http""#, r#""kind":"dns""#);
        for line in [PLAIN_GET, &dns, limit, end] {
            let line = read_log(line.as_bytes()).next().unwrap().unwrap();
            let event = event(&line.record.unwrap()).unwrap();
            let written = serde_json::to_string(&event).unwrap();
            let sorted = serde_json::to_value(&event).unwrap().to_string();
            assert_eq!(written, sorted);
        }
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
