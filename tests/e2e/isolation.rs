//! With the proxy variables unset, nothing but the proxy is reachable: not outside
//! addresses, not the test's upstream directly, not the host through any of its addresses,
//! and a DNS lookup of a fresh name never leaves the run.

use crate::support::docker::{docker0_address, host_address};
use crate::support::{Canary, Run, TestNetwork, WITHOUT_PROXY_VARIABLES, random_hex};

/// Connects to every `HOST:PORT` argument and to the run network's gateway (.1 of the
/// sandbox's own subnet, read from the routing table) on the port given by `--gateway-port`.
const CONNECT_PROGRAM: &str = r#"
import socket, struct, sys
args = sys.argv[1:]
gateway_port = int(args[args.index("--gateway-port") + 1])
targets = [a for a in args if ":" in a]
for line in open("/proc/net/route").read().splitlines()[1:]:
    fields = line.split()
    destination, mask = int(fields[1], 16), int(fields[7], 16)
    if fields[0] != "lo" and mask != 0:
        network = struct.unpack(">I", struct.pack("<I", destination))[0]
        gateway = socket.inet_ntoa(struct.pack(">I", network + 1))
        print("RUN-GATEWAY", gateway, flush=True)
        targets.append(f"{gateway}:{gateway_port}")
for target in targets:
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
    program.extend(["python3", "-c", CONNECT_PROGRAM, "--gateway-port"]);
    let port_text = port.to_string();
    program.push(&port_text);
    program.extend(targets.iter().map(String::as_str));

    let run = Run::new(&network)
        .allow("upstream.test:443")
        .resolve("upstream.test", network.gateway)
        .timeout("90s")
        .run(&program);

    run.assert_code(0);
    assert!(
        run.stdout.contains("RUN-GATEWAY "),
        "the program found no run network gateway\n{}",
        run.describe()
    );
    let failed = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAILED "))
        .count();
    assert!(
        !run.stdout.contains("CONNECTED ") && failed == targets.len() + 1,
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

/// Docker's embedded resolver (127.0.0.11) answered the run network's own names and
/// addresses by itself, unrecorded: a reverse lookup of the proxy's address (in
/// `HTTP_PROXY`) gave the proxy container's name and with it the run id. The sandbox's
/// resolv.conf names the proxy instead: that lookup is refused and recorded, while the
/// sandbox's own host name still resolves (from /etc/hosts) and leaves no refusal.
#[test]
fn the_run_networks_own_names_are_answered_only_by_the_proxy() {
    let network = TestNetwork::create();
    let script = r#"
ip=${HTTP_PROXY#http://}; ip=${ip%%:*}
cat /etc/resolv.conf
echo "REVERSE [$(getent hosts "$ip")]"
echo "OWN [$(getent hosts "$(hostname)")]"
python3 -c 'import socket; socket.getaddrinfo(socket.gethostname(), None); print("FQDN", socket.getfqdn())'
"#;
    let run = Run::new(&network).timeout("60s").run(&["sh", "-c", script]);

    run.assert_code(0);
    assert!(
        !run.stdout.contains("127.0.0.11") && run.stdout.contains("nameserver "),
        "resolv.conf does not name the proxy alone\n{}",
        run.describe()
    );
    assert!(
        run.stdout.contains("REVERSE []") && !run.stdout.contains("egress-run-"),
        "the proxy's address was resolved back to a name\n{}",
        run.describe()
    );
    let reverse = run.audit_where(|record| {
        record["kind"] == "dns"
            && record["host"]
                .as_str()
                .is_some_and(|host| host.ends_with(".in-addr.arpa"))
    });
    assert!(
        !reverse.is_empty() && reverse.iter().all(|record| record["decision"] == "blocked"),
        "the reverse lookup is not a refused record\n{}",
        run.describe()
    );
    assert!(
        !run.stdout.contains("OWN []") && run.stdout.contains("FQDN sandbox-"),
        "the sandbox's own host name does not resolve\n{}",
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
