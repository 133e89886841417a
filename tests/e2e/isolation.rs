//! With the proxy variables unset, nothing but the proxy is reachable: not outside
//! addresses, not the test's upstream directly, not the host through any of its addresses,
//! and a DNS lookup of a fresh name never leaves the run. A local run's sandbox has no
//! network at all: its loopback, where the proxy serves the doors the launcher passed it, is
//! all there is.

use crate::support::docker::{docker0_address, host_address};
use crate::support::{
    Canary, Run, TestNetwork, WITHOUT_PROXY_VARIABLES, random_hex, runs_have_a_network,
};

/// Lists the sandbox's interfaces and routes, then connects to every `HOST:PORT` argument.
const CONNECT_PROGRAM: &str = r#"
import socket, sys
interfaces = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
print("INTERFACES", " ".join(sorted(interfaces)), flush=True)
routes = open("/proc/net/route").read().splitlines()[1:]
print("ROUTES", len(routes), flush=True)
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        print("CONNECTED", target, flush=True)
    except Exception as error:
        print("FAILED", target, error, flush=True)
"#;

#[test]
fn without_proxy_variables_direct_connections_fail_and_the_host_hears_nothing() {
    let network = TestNetwork::create();
    // A listener on every host address: must receive nothing from the sandbox.
    let host_listener = Canary::bind(([0, 0, 0, 0], 0));
    let port = host_listener.addr.port();
    // The test's upstream address, reached directly rather than through the proxy.
    let upstream = Canary::bind((network.gateway, 0));
    let targets = [
        "203.0.113.10:80".to_owned(),
        upstream.addr.to_string(),
        format!("{}:{port}", network.gateway),
        format!("{}:{port}", docker0_address()),
        format!("{}:{port}", host_address()),
    ];
    let mut program: Vec<&str> = WITHOUT_PROXY_VARIABLES.to_vec();
    program.extend(["python3", "-c", CONNECT_PROGRAM]);
    program.extend(targets.iter().map(String::as_str));

    let run = Run::new(&network)
        .allow("upstream.test:443")
        .resolve("upstream.test", network.gateway)
        .timeout("90s")
        .run(&program);

    run.assert_code(0);
    if runs_have_a_network() {
        // The run-network wiring (gVisor): one interface, on the run's internal network.
        assert!(
            run.stdout.contains("INTERFACES eth0 lo\n"),
            "the sandbox has another interface than its run network's\n{}",
            run.describe()
        );
    } else {
        assert!(
            run.stdout.contains("INTERFACES lo\n") && run.stdout.contains("ROUTES 0\n"),
            "the sandbox has an interface or a route besides its loopback\n{}",
            run.describe()
        );
    }
    let failed = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAILED "))
        .count();
    assert!(
        !run.stdout.contains("CONNECTED ") && failed == targets.len(),
        "a direct connection got through (or was not tried)\n{}",
        run.describe()
    );
    host_listener.assert_untouched();
    upstream.assert_untouched();
    run.assert_nothing_left();
}

#[test]
fn dns_lookup_of_a_fresh_name_never_leaves_the_run() {
    let network = TestNetwork::create();
    let name = format!("leak-{}.example.test", random_hex());
    let program = format!(
        "import socket\n\
         try:\n    print('LOOKUP-ANSWERED', socket.getaddrinfo('{name}', 443), flush=True)\n\
         except Exception as error:\n    print('LOOKUP-FAILED', error, flush=True)\n"
    );
    let mut command: Vec<&str> = WITHOUT_PROXY_VARIABLES.to_vec();
    command.extend(["python3", "-c", &program]);

    let run = Run::new(&network)
        .allow("upstream.test:443")
        .timeout("60s")
        .run(&command);

    run.assert_code(0);
    assert!(
        run.stdout.contains("LOOKUP-FAILED") && !run.stdout.contains("LOOKUP-ANSWERED"),
        "the fresh name resolved\n{}",
        run.describe()
    );
    let lookups = run.audit_where(|record| record["kind"] == "dns" && record["host"] == name);
    assert!(
        !lookups.is_empty(),
        "the lookup of {name} is not in the audit log (did it leave the run?)\n{}",
        run.describe()
    );
    assert!(
        lookups.iter().all(|record| record["decision"] == "blocked"),
        "a lookup of {name} was not blocked\n{}",
        run.describe()
    );
    run.assert_nothing_left();
}

/// Docker's embedded resolver (127.0.0.11) answered a run network's own names and
/// addresses by itself, unrecorded: a reverse lookup of the proxy's address gave the proxy
/// container's name and with it the run id. The sandbox's resolv.conf names the proxy's
/// DNS door alone (on its loopback): a reverse lookup of an address is refused and
/// recorded, while the sandbox's own host name still resolves (from /etc/hosts, to its
/// loopback) and leaves no refusal.
#[test]
fn the_sandboxs_lookups_are_answered_only_by_the_proxy() {
    let network = TestNetwork::create();
    let script = r#"
cat /etc/resolv.conf
echo "REVERSE [$(getent hosts 10.213.0.10)]"
echo "OWN [$(getent hosts "$(hostname)")]"
python3 -c 'import socket; socket.getaddrinfo(socket.gethostname(), None); print("OWN-ADDRESS", socket.gethostbyname(socket.gethostname()))'
"#;
    let run = Run::new(&network).timeout("60s").run(&["sh", "-c", script]);

    run.assert_code(0);
    // With a run network (gVisor) the proxy's DNS door is on its address there, and the
    // sandbox's host name is its own address on that network (Docker's /etc/hosts).
    let (door, own_address) = if runs_have_a_network() {
        let own = run
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix("OWN-ADDRESS "))
            .and_then(|address| address.parse::<std::net::Ipv4Addr>().ok())
            .unwrap_or_else(|| panic!("no own address\n{}", run.describe()));
        let proxy = std::net::Ipv4Addr::from(u32::from(own) - 1);
        (proxy.to_string(), own.to_string())
    } else {
        ("127.0.0.1".to_owned(), "127.0.0.1".to_owned())
    };
    assert!(
        run.stdout.contains(&format!("nameserver {door}\n"))
            && run.stdout.matches("nameserver ").count() == 1,
        "resolv.conf does not name the proxy's door alone\n{}",
        run.describe()
    );
    assert!(
        run.stdout.contains("REVERSE []"),
        "an address was resolved back to a name\n{}",
        run.describe()
    );
    let reverse = run.audit_where(|record| {
        record["kind"] == "dns" && record["host"] == "10.0.213.10.in-addr.arpa"
    });
    assert!(
        !reverse.is_empty() && reverse.iter().all(|record| record["decision"] == "blocked"),
        "the reverse lookup is not a refused record\n{}",
        run.describe()
    );
    assert!(
        !run.stdout.contains("OWN []")
            && run.stdout.contains(&format!("OWN-ADDRESS {own_address}\n")),
        "the sandbox's own host name does not resolve to its loopback\n{}",
        run.describe()
    );
    let own = run.audit_where(|record| {
        record["kind"] == "dns"
            && record["host"]
                .as_str()
                .is_some_and(|host| host.starts_with("sandbox-"))
    });
    assert!(
        own.is_empty(),
        "lookups of the sandbox's own host name were recorded: {own:?}\n{}",
        run.describe()
    );
    run.assert_nothing_left();
}

/// The proxy's doors on the sandbox's loopback are sockets the proxy holds, passed by the
/// launcher before the command ran: the command finds them taken (it cannot put a listener of
/// its own there), answered by the proxy (a refusal, and its record names the loopback
/// client), and the Unix socket they were passed through gone, on a mount it cannot write
/// (so it cannot pass doors of its own).
#[test]
fn the_doors_are_the_proxys_and_the_command_cannot_pass_its_own() {
    if runs_have_a_network() {
        // No doors are passed in the run-network wiring: the proxy binds its own, on its
        // address there (the other isolation tests cover that wiring).
        eprintln!("not applicable: the runs of this process have a network of their own");
        return;
    }
    let network = TestNetwork::create();
    let program = r#"
import os, socket
doors = "/.egress-sandbox/doors"
print("DOORS", sorted(os.listdir(doors)), flush=True)
for port in (3128, 53, 443, 80):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        print("BOUND", port, flush=True)
    except OSError as error:
        print("TAKEN", port, error.errno, flush=True)
try:
    open(doors + "/listeners.sock", "w")
    print("WROTE", flush=True)
except OSError as error:
    print("READ-ONLY", error.errno, flush=True)
u = socket.socket(socket.AF_UNIX)
try:
    u.connect(doors + "/listeners.sock")
    print("PASS-SOCKET-OPEN", flush=True)
except OSError as error:
    print("PASS-SOCKET-GONE", error.errno, flush=True)
c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
c.sendall(b"CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n")
print("ANSWER", c.recv(100).split(b"\r\n")[0].decode(), flush=True)
"#;
    let run = Run::new(&network)
        .allow("upstream.test:443")
        .timeout("60s")
        .run(&["python3", "-c", program]);

    run.assert_code(0);
    for port in [3128, 53, 443, 80] {
        assert!(
            run.stdout.contains(&format!("TAKEN {port} ")),
            "port {port} on the loopback was free for the command\n{}",
            run.describe()
        );
    }
    assert!(
        run.stdout.contains("DOORS []")
            && run.stdout.contains("READ-ONLY 30")
            && run.stdout.contains("PASS-SOCKET-GONE 2"),
        "the doors directory still offers a way to pass sockets\n{}",
        run.describe()
    );
    assert!(
        run.stdout.contains("ANSWER HTTP/1.1 403"),
        "the explicit door did not answer as the proxy\n{}",
        run.describe()
    );
    let refused = run.audit_where(|record| record["host"] == "refused.test");
    assert!(
        refused.len() == 1
            && refused[0]["decision"] == "blocked"
            && refused[0]["client"]
                .as_str()
                .is_some_and(|client| client.starts_with("127.0.0.1:")),
        "the refusal's record is missing or does not name the loopback client\n{}",
        run.describe()
    );
    run.assert_nothing_left();
}
