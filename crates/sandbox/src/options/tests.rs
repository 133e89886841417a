use std::time::Duration;

use egress_core::secret::SecretValue;

use super::*;

fn options() -> RunOptions {
    RunOptions::default()
}

fn refusal(options: RunOptions) -> SpecError {
    options
        .builder(vec!["true".into()])
        .and_then(RunSpecBuilder::build)
        .unwrap_err()
}

/// `--env KEY` alone is refused (docker would pass the caller's value on), and the
/// message says how to pass a value and where a key belongs.
#[test]
fn a_bare_env_name_is_refused_with_the_way_to_pass_it() {
    let pair = |raw: &str| EnvVar::from_flag(raw).unwrap().pair();
    assert_eq!(pair("A=b=c").unwrap(), ("A".into(), "b=c".into()));
    assert_eq!(pair("A=").unwrap(), ("A".into(), String::new()));
    let bare = pair("OPENAI_API_KEY").unwrap_err();
    assert_eq!(bare.field(), Field::Env);
    let bare = bare.to_string();
    assert!(
        bare.contains(r#"--env OPENAI_API_KEY="$OPENAI_API_KEY""#),
        "{bare}"
    );
    assert!(bare.contains("--secret OPENAI_API_KEY"), "{bare}");
    for raw in ["", "=x"] {
        let error = pair(raw).unwrap_err().to_string();
        assert!(error.contains("expected KEY=VALUE"), "{error}");
        assert!(!error.contains("--secret"), "{error}");
    }
}

/// Sizes and durations parse as in a policy: zero refused, what was typed quoted.
#[test]
fn sizes_and_durations_parse_as_in_a_policy() {
    assert_eq!(parse_size(Field::Memory, "256MiB").unwrap(), 256 << 20);
    assert_eq!(
        TimeLimit::from_flag("500ms").unwrap().duration().unwrap(),
        Duration::from_millis(500)
    );
    assert!(parse_size(Field::Memory, "lots").is_err());
    let too_small = parse_size(Field::Memory, "10").unwrap_err();
    assert_eq!(
        too_small.to_string(),
        "invalid --memory \"10\": Docker needs at least 6MiB",
        "what was typed is quoted"
    );
    assert_eq!(
        too_small.message(Names::Fields),
        "invalid memory \"10\": Docker needs at least 6MiB"
    );
    assert_eq!(parse_size(Field::Tmp, "10").unwrap(), 10);
    for raw in ["0", "0B", "0KiB"] {
        let error = parse_size(Field::OutputLimit, raw).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("invalid --output-limit {raw:?}: `{raw}` is zero")
        );
    }
    assert!(TimeLimit::from_flag("0s").unwrap().duration().is_err());
    let seconds = TimeLimit::Seconds(604800.5).duration().unwrap_err();
    assert_eq!(
        seconds.message(Names::Fields),
        "invalid timeout 604800.5: a number of seconds more than 0 and at most 604800"
    );
}

#[test]
fn mounts_parse_modes() {
    assert_eq!(
        parse_mount("/src:/dst").unwrap(),
        (PathBuf::from("/src"), "/dst".to_string(), false)
    );
    assert_eq!(
        parse_mount("/src:/dst:rw").unwrap(),
        (PathBuf::from("/src"), "/dst".to_string(), true)
    );
    assert_eq!(parse_mount("/src").unwrap_err().field(), Field::Mounts);
}

/// A pin parses as the proxy parses one, and is refused in each front end's terms.
#[test]
fn pins_parse_as_the_proxy_parses_them() {
    let parse = |raw: &str| Pin::from_flag(raw).unwrap().parse();
    let (name, ip) = parse("API.test.=127.0.0.5").unwrap();
    assert_eq!(name.as_str(), "api.test");
    assert_eq!(ip, "127.0.0.5".parse::<IpAddr>().unwrap());
    let shorthand = parse("api.test=127.1").unwrap_err();
    assert_eq!(
        shorthand.to_string(),
        "--resolve \"api.test=127.1\": `127.1` is a shorthand of 127.0.0.1; write the address in full"
    );
    assert_eq!(
        shorthand.message(Names::Fields),
        "invalid resolve \"api.test\": \"127.1\": `127.1` is a shorthand of 127.0.0.1; write the address in full"
    );
    assert!(parse("api.test=nope").is_err());
    assert_eq!(
        parse("api.test").unwrap_err().to_string(),
        "--resolve \"api.test\": expected NAME=IP"
    );
}

/// Every refusal names its field, and in a request's terms never a flag.
#[test]
fn each_refusal_names_its_field_in_either_terms() {
    type Set = fn(&mut RunOptions);
    let cases: [(Set, Field); 6] = [
        (|o| o.memory = Some("lots".into()), Field::Memory),
        (
            |o| o.on_audit_limit = Some("never".into()),
            Field::OnAuditLimit,
        ),
        (|o| o.mounts = vec!["nope".into()], Field::Mounts),
        (|o| o.workdir = Some("rel".into()), Field::Workdir),
        (|o| o.audit_limit = Some(0), Field::AuditLimit),
        (
            |o| {
                o.secrets = vec![SecretGiven::Value {
                    name: "1BAD".into(),
                    value: SecretValue::new("sk-123456".into()),
                }]
            },
            Field::Secrets,
        ),
    ];
    for (set, field) in cases {
        let mut given = options();
        set(&mut given);
        let refused = refusal(given);
        assert_eq!(refused.field(), field, "{refused}");
        let in_request_terms = refused.message(Names::Fields);
        assert!(!in_request_terms.contains("--"), "{in_request_terms}");
    }
}

/// What the command line reads from this host is carried as its contents: a request names
/// no file of the daemon's, and a local form left in is an error, never sent.
#[test]
fn carried_options_name_no_local_file() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.yaml");
    std::fs::write(&policy, "version: 1\nallow:\n  - host: a.example\n").unwrap();
    let mut given = options();
    given.policies = vec![PolicyText::from_file_flag(policy.to_str().unwrap()).unwrap()];
    given.mounts = vec!["rel:/dst:rw".into()];
    given.secrets = vec![SecretGiven::from_flag("KEY").unwrap()];
    assert!(
        serde_json::to_string(&given).is_err(),
        "a secret's source is never sent"
    );
    let spec = {
        let mut local = given.clone();
        local.secrets.clear();
        local.mounts.clear();
        local.builder(vec!["true".into()]).unwrap().build().unwrap()
    };
    given.secrets.clear();
    let carried = given.carried(spec.credentials()).unwrap();
    let json = serde_json::to_value(&carried).unwrap();
    assert_eq!(
        json["policies"][0]["file"].as_str(),
        policy.to_str(),
        "{json}"
    );
    assert!(
        json["policies"][0]["yaml"]
            .as_str()
            .unwrap()
            .contains("a.example")
    );
    let mount = json["mounts"][0].as_str().unwrap();
    assert!(
        mount.starts_with('/') && mount.ends_with("rel:/dst:rw"),
        "{mount}"
    );
}

/// A request's `env` is an object or a list of pairs, `resolve` and `secrets` objects;
/// read back as written, the secret's value never in `Debug`.
#[test]
fn the_request_forms_read_and_write() {
    let read: RunOptions = serde_json::from_str(
        r#"{"env":[["B","1"],["A","2"]],"resolve":{"a.example":"127.0.0.5"},
            "secrets":{"K":"sk-123456"},"timeout":"5s","upstream_ca":[{"file":"c.pem","pem":"x"}]}"#,
    )
    .unwrap();
    assert_eq!(read.env[0].key, "B", "pairs keep their order");
    assert!(!format!("{read:?}").contains("sk-123456"));
    let written = serde_json::to_value(&read).unwrap();
    assert_eq!(written["env"], serde_json::json!([["B", "1"], ["A", "2"]]));
    assert_eq!(written["secrets"]["K"], "sk-123456");
    let map: RunOptions = serde_json::from_str(r#"{"env":{"B":"1","A":"2"}}"#).unwrap();
    assert_eq!(map.env[0].key, "A", "an object in the order of its keys");
    let refused = serde_json::from_str::<RunOptions>(r#"{"policies":[{"path":"/etc/x"}]}"#);
    assert!(refused.is_err(), "a request cannot name a policy file");
}
