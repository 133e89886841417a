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
    assert!(https.requests()[0].starts_with("GET /secure "));
    assert!(http.requests()[0].starts_with("GET /plain "));
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
