//! Fifty connections at once to an allowed host, each with its own lookup (A and AAAA, as
//! glibc, Node and Python make them), from Node `fetch` and from Python threads: the
//! proxy's DNS answers every one, and records the name once.

use crate::support::{
    Finished, Run, TestNetwork, Upstream, WITHOUT_PROXY_VARIABLES, gateway_policy, random_hex,
};

const CONNECTIONS: usize = 50;

/// Node: 50 `fetch`es at once; undici opens a connection, with its own `dns.lookup`, for
/// each request it cannot put on an idle one, and none is idle yet.
const NODE_FETCHES: &str = r#"
const count = Number(process.argv.at(-1));
Promise.allSettled(Array.from({ length: count }, (_, i) =>
  fetch(`http://burst.test/node-${i}`).then((response) => response.text())
)).then((results) => {
  results.forEach((result, i) =>
    console.log(result.status === 'fulfilled' ? `${i} OK ${result.value}` : `${i} FAILED ${result.reason.cause?.code ?? result.reason}`));
});
"#;

/// Python: 50 threads released at once, each resolving with `getaddrinfo` and connecting.
const PYTHON_THREADS: &str = r#"
import socket, sys, threading
count = int(sys.argv[1])
start = threading.Barrier(count)
lines = [None] * count
def one(i):
    start.wait()
    try:
        family, kind, proto, _, address = socket.getaddrinfo("burst.test", 80, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as connection:
            connection.settimeout(30)
            connection.connect(address)
            connection.sendall(f"GET /python-{i} HTTP/1.1\r\nHost: burst.test\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
        body = answer.split(b"\r\n\r\n", 1)[1].decode()
        lines[i] = f"{i} OK {body}"
    except Exception as error:
        lines[i] = f"{i} FAILED {error!r}"
threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("\n".join(lines))
"#;

fn burst_run(network: &TestNetwork, program: &[&str]) -> Finished {
    let mut command: Vec<&str> = WITHOUT_PROXY_VARIABLES.to_vec();
    command.extend(program);
    Run::new(network)
        .policy(&gateway_policy(
            "dns-burst",
            network.gateway,
            &[80],
            &[("burst.test", 80)],
        ))
        .resolve("burst.test", network.gateway)
        .timeout("120s")
        .run(&command)
}

/// Every one of the 50 got the site's body, the site saw 50 requests, and the lookups of
/// `burst.test` are one `dns` record.
fn assert_all_reached(run: &Finished, site: &Upstream) {
    run.assert_code(0);
    let reached = run
        .stdout
        .lines()
        .filter(|line| line.ends_with(&format!(" OK {}", site.body)))
        .count();
    assert_eq!(
        reached,
        CONNECTIONS,
        "not every connection resolved and reached the site\n{}",
        run.describe()
    );
    assert_eq!(site.requests().len(), CONNECTIONS, "{}", run.describe());
    let lookups =
        run.audit_where(|record| record["kind"] == "dns" && record["host"] == "burst.test");
    assert_eq!(lookups.len(), 1, "{}", run.describe());
    assert_eq!(lookups[0]["decision"], "allowed");
}

#[test]
fn fifty_node_fetches_at_once_each_resolve_and_connect() {
    let network = TestNetwork::create();
    let site = Upstream::http((network.gateway, 80), &format!("node-{}", random_hex()));
    let count = CONNECTIONS.to_string();
    let run = burst_run(&network, &["node", "-e", NODE_FETCHES, &count]);
    assert_all_reached(&run, &site);
    run.assert_nothing_left();
}

#[test]
fn fifty_python_threads_at_once_each_resolve_and_connect() {
    let network = TestNetwork::create();
    let site = Upstream::http((network.gateway, 80), &format!("python-{}", random_hex()));
    let count = CONNECTIONS.to_string();
    let run = burst_run(&network, &["python3", "-c", PYTHON_THREADS, &count]);
    assert_all_reached(&run, &site);
    run.assert_nothing_left();
}
