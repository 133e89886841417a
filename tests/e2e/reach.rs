//! An allowed host is reachable: through HTTPS_PROXY (CONNECT), through the plain HTTP
//! proxy, and transparently with the proxy variables unset (the proxy's DNS answer sends
//! the program to the proxy's :443, routed by SNI, and :80, routed by Host).

use crate::support::{
    Run, TestNetwork, Upstream, WITHOUT_PROXY_VARIABLES, gateway_policy, random_hex,
};

#[test]
fn allowed_host_is_reachable_through_https_proxy_and_http_proxy() {
    let network = TestNetwork::create();
    let https = Upstream::https(
        (network.gateway, 0),
        &["upstream.test"],
        &format!("tls-{}", random_hex()),
    );
    let http = Upstream::http((network.gateway, 0), &format!("plain-{}", random_hex()));
    let (https_port, http_port) = (https.port(), http.port());
    let script = format!(
        "curl -sSk --max-time 20 https://upstream.test:{https_port}/secure; echo; \
         curl -sS --max-time 20 http://upstream.test:{http_port}/plain; echo"
    );

    let run = Run::new(&network)
        .policy(&gateway_policy(
            "reach",
            network.gateway,
            &[https_port, http_port],
            &[],
        ))
        .allow(&format!("upstream.test:{https_port}"))
        .allow(&format!("upstream.test:{http_port}"))
        .resolve("upstream.test", network.gateway)
        .timeout("60s")
        .run(&["sh", "-c", &script]);

    run.assert_code(0);
    for upstream in [&https, &http] {
        assert!(
            run.stdout.contains(&upstream.body),
            "{} not reached\n{}",
            upstream.addr,
            run.describe()
        );
        assert_eq!(upstream.requests().len(), 1, "{}", run.describe());
    }
    assert!(https.requests()[0].head.starts_with("GET /secure "));
    assert_eq!(https.requests()[0].sni.as_deref(), Some("upstream.test"));
    assert!(http.requests()[0].head.starts_with("GET /plain "));
    let allowed = |kind: &str, port: u16| {
        !run.audit_where(|record| {
            record["kind"] == kind
                && record["host"] == "upstream.test"
                && record["port"] == port
                && record["decision"] == "allowed"
        })
        .is_empty()
    };
    assert!(allowed("connect", https_port), "{}", run.describe());
    assert!(allowed("http", http_port), "{}", run.describe());
    // A plain request is read in clear: its record has the method, path and status, and,
    // as every attempt record of a local run, the sandbox's host name.
    let plain = run.audit_where(|record| {
        record["kind"] == "http"
            && record["method"] == "GET"
            && record["path"] == "/plain"
            && record["status"] == 200
            && record["sandbox_hostname"]
                .as_str()
                .is_some_and(|name| name.starts_with("sandbox-"))
    });
    assert_eq!(plain.len(), 1, "{}", run.describe());
    run.assert_nothing_left();
}

#[test]
fn allowed_host_is_reachable_transparently_without_proxy_variables() {
    let network = TestNetwork::create();
    let https = Upstream::https(
        (network.gateway, 443),
        &["upstream.test"],
        &format!("tls-{}", random_hex()),
    );
    let http = Upstream::http((network.gateway, 80), &format!("plain-{}", random_hex()));
    let mut program: Vec<&str> = WITHOUT_PROXY_VARIABLES.to_vec();
    program.extend([
        "sh",
        "-c",
        "env | grep -i _proxy; \
         curl -sSk --max-time 20 https://upstream.test/secure; echo; \
         curl -sS --max-time 20 http://upstream.test/plain; echo",
    ]);

    let run = Run::new(&network)
        .policy(&gateway_policy(
            "transparent",
            network.gateway,
            &[443, 80],
            &[],
        ))
        .allow("upstream.test:443")
        .allow("upstream.test:80")
        .resolve("upstream.test", network.gateway)
        .timeout("60s")
        .run(&program);

    run.assert_code(0);
    assert!(
        !run.stdout.to_lowercase().contains("_proxy="),
        "proxy variables were not unset\n{}",
        run.describe()
    );
    for upstream in [&https, &http] {
        assert!(
            run.stdout.contains(&upstream.body),
            "{} not reached transparently\n{}",
            upstream.addr,
            run.describe()
        );
        assert_eq!(upstream.requests().len(), 1, "{}", run.describe());
    }
    assert_eq!(https.requests()[0].sni.as_deref(), Some("upstream.test"));
    let allowed = |port: u16, kind: Option<&str>| {
        !run.audit_where(|record| {
            record["host"] == "upstream.test"
                && record["port"] == port
                && record["decision"] == "allowed"
                && kind.is_none_or(|kind| record["kind"] == kind)
        })
        .is_empty()
    };
    assert!(allowed(443, Some("tls")), "{}", run.describe());
    assert!(allowed(80, None), "{}", run.describe());
    assert!(
        !run.audit_where(|record| record["kind"] == "dns"
            && record["host"] == "upstream.test"
            && record["decision"] == "allowed")
            .is_empty(),
        "the DNS answer for upstream.test is not in the audit log\n{}",
        run.describe()
    );
    run.assert_nothing_left();
}

#[test]
fn tunnel_to_an_allowed_host_carrying_another_name_is_refused() {
    let network = TestNetwork::create();
    // On :443, where the proxy checks the ClientHello of every CONNECT tunnel.
    let upstream = Upstream::https(
        (network.gateway, 443),
        &["upstream.test", "front.test"],
        &format!("tls-{}", random_hex()),
    );
    // Domain fronting: CONNECT names the allowed host, the TLS ClientHello another one.
    let script = "curl -sSk --max-time 20 https://upstream.test/control; echo; \
                  curl -sSk --max-time 20 --connect-to front.test:443:upstream.test:443 \
                  https://front.test/fronted && echo FRONTED; true";

    let run = Run::new(&network)
        .policy(&gateway_policy("sni", network.gateway, &[443], &[]))
        .allow("upstream.test")
        .resolve("upstream.test", network.gateway)
        .resolve("front.test", network.gateway)
        .timeout("60s")
        .run(&["sh", "-c", script]);

    run.assert_code(0);
    assert!(
        run.stdout.contains(&upstream.body),
        "the control request failed\n{}",
        run.describe()
    );
    let requests = upstream.requests();
    assert!(
        requests.len() == 1 && requests[0].head.starts_with("GET /control "),
        "the upstream served {requests:?}\n{}",
        run.describe()
    );
    assert!(!run.stdout.contains("FRONTED"), "{}", run.describe());
    assert!(
        !run.audit_where(|record| record["host"] == "upstream.test"
            && record["decision"] == "blocked"
            && record["reason"] == "sni_mismatch")
            .is_empty(),
        "no sni_mismatch record\n{}",
        run.describe()
    );
    run.assert_nothing_left();
}
