//! What the sandbox sends never reaches the operator raw, and never grows the caller:
//! a DNS label holding terminal controls is shown escaped in the summary line, and a flood
//! of unique made-up names leaves the caller's memory and the report bounded.

use crate::support::{Run, TestNetwork};

/// Sends one DNS query for `ESC[2K CR all-clear.test` straight to the run's resolver (the
/// proxy, whose address the sandbox knows from HTTP_PROXY) and prints the answer's size.
const HOSTILE_LABEL_QUERY: &str = r#"
import os, socket, struct
proxy = os.environ["HTTP_PROXY"].split("//")[1].rsplit(":", 1)[0]
label = b"\x1b[2K\rall-clear"
query = (struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
         + bytes([len(label)]) + label + b"\x04test\x00" + struct.pack(">HH", 1, 1))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.sendto(query, (proxy, 53))
print("answered", len(s.recv(4096)), flush=True)
"#;

/// The issue's reproduction: before, `cat -v` showed `^[[2K^Mall-clear…` in the summary.
#[test]
fn a_dns_label_with_terminal_controls_is_shown_escaped_in_the_summary() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .timeout("60s")
        .run(&["python3", "-c", HOSTILE_LABEL_QUERY]);
    run.assert_code(0);
    let context = run.describe();
    assert!(run.stdout.contains("answered"), "{context}");
    assert!(
        !run.stderr.contains('\u{1b}') && !run.stderr.contains('\r'),
        "raw ESC or CR on stderr:\n{:?}",
        run.stderr
    );
    let summary = run.summary_line();
    eprintln!("summary line: {summary}");
    assert!(
        summary.contains(r"\x1b[2K") && summary.contains("all-clear"),
        "the refused label is not shown escaped in the summary: {summary:?}\n{context}"
    );
    assert!(summary.contains("1 blocked"), "{summary:?}");
    run.assert_nothing_left();
}
