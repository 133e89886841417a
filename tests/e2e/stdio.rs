//! Input and output as a user expects them: the caller's stdin reaches the command and
//! ends with it, and Python's output before a time-limit kill is not lost in a buffer.

use crate::support::{Run, TestNetwork, assert_nothing_left};

#[test]
fn the_callers_stdin_reaches_python_reading_a_script_from_it() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .stdin("print(6*7)\n")
        .run(&["python3", "-"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "42\n", "{}", run.describe());
    assert_nothing_left(&run.run_id(), run.pid);
}

#[test]
fn cat_echoes_stdin_byte_for_byte_and_sees_its_end() {
    let network = TestNetwork::create();
    // More than a pipe buffer, and bytes that are not text: nothing is lost or reframed.
    let input: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let run = Run::new(&network)
        .stdin(input.clone())
        .run(&["sh", "-c", "cat | sha256sum"]);
    run.assert_code(0);
    let expected = {
        use sha2::Digest;
        sha2::Sha256::digest(&input)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert!(
        run.stdout.starts_with(&expected),
        "the command saw other bytes than the caller's stdin\n{}",
        run.describe()
    );
    assert_nothing_left(&run.run_id(), run.pid);
}

#[test]
fn without_stdin_the_command_reads_eof_at_once() {
    let network = TestNetwork::create();
    let run = Run::new(&network).run(&["sh", "-c", "cat; echo end"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "end\n", "{}", run.describe());
}

#[test]
fn python_output_before_a_time_limit_kill_is_shown() {
    let network = TestNetwork::create();
    let run = Run::new(&network).timeout("2s").run(&[
        "python3",
        "-c",
        "print('a'); import time; time.sleep(30)",
    ]);
    run.assert_code(124);
    assert_eq!(run.stdout, "a\n", "{}", run.describe());
    assert_nothing_left(&run.run_id(), run.pid);
}

#[test]
fn python_unbuffered_can_be_turned_off_with_env() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .option("--env", "PYTHONUNBUFFERED=")
        .run(&["sh", "-c", "echo \"[$PYTHONUNBUFFERED]\""]);
    run.assert_code(0);
    assert_eq!(run.stdout, "[]\n", "{}", run.describe());
}
