//! Docker-backed tests of `sandbox::images`: the real binary becomes the proxy image, the
//! base image is built with debootstrap (minutes, the first time on a machine), and
//! containers from both run as uid 65534. Every container made here is removed.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::{StreamExt, TryStreamExt};

use egress_sandbox::DockerEngine;
use egress_sandbox::{
    BASE_IMAGE, ImageError, PROXY_REPOSITORY, ensure_base_image, ensure_proxy_image,
    require_local_image, sweep_images,
};

const BINARY: &str = env!("CARGO_BIN_EXE_egress-sandbox");

async fn engine() -> DockerEngine {
    DockerEngine::connect()
        .await
        .expect("Docker daemon reachable")
}

async fn docker() -> Docker {
    Docker::connect_with_defaults()
        .expect("Docker client")
        .negotiate_version()
        .await
        .expect("Docker daemon reachable")
}

/// Exit code and combined output of a container, which is removed on every path.
async fn run_container(docker: &Docker, config: ContainerCreateBody) -> (i64, String) {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "egress-images-test-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let config = ContainerCreateBody {
        labels: Some([("egress-sandbox.test".to_owned(), "images".to_owned())].into()),
        ..config
    };
    let outcome = async {
        docker.create_container(Some(options), config).await?;
        docker.start_container(&name, None).await?;
        let waited = docker
            .wait_container(&name, None)
            .next()
            .await
            .expect("wait result");
        let code = match waited {
            Ok(response) => response.status_code,
            Err(bollard::errors::Error::DockerContainerWaitError { code, .. }) => code,
            Err(other) => return Err(other),
        };
        let logs = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .build();
        let output: Vec<_> = docker.logs(&name, Some(logs)).try_collect().await?;
        let text: String = output.iter().map(|chunk| chunk.to_string()).collect();
        Ok::<_, bollard::errors::Error>((code, text))
    }
    .await;
    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
    let _ = docker.remove_container(&name, Some(remove)).await;
    outcome.expect("container ran")
}

#[tokio::test]
async fn the_proxy_image_is_built_once_per_binary_and_reused() {
    let (engine, docker) = (engine().await, docker().await);
    let tag = ensure_proxy_image(&engine, Path::new(BINARY))
        .await
        .unwrap();
    let hash = tag
        .strip_prefix(&format!("{PROXY_REPOSITORY}:"))
        .expect("repository");
    assert_eq!(hash.len(), 16);
    assert!(
        hash.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{tag}"
    );
    let first = docker.inspect_image(&tag).await.unwrap();

    let started = std::time::Instant::now();
    let again = ensure_proxy_image(&engine, Path::new(BINARY))
        .await
        .unwrap();
    eprintln!("second ensure_proxy_image: {:?}", started.elapsed());
    assert_eq!(again, tag);
    let second = docker.inspect_image(&tag).await.unwrap();
    assert_eq!(first.id, second.id, "the image was rebuilt");

    let config = first.config.expect("image config");
    assert_eq!(config.user.as_deref(), Some("65534:65534"));
    assert_eq!(
        config.entrypoint,
        Some(vec!["/egress-sandbox".to_owned(), "proxy".to_owned()])
    );
    assert_eq!(
        config
            .labels
            .unwrap_or_default()
            .get("egress-sandbox.image")
            .map(String::as_str),
        Some("proxy")
    );
}

#[tokio::test]
async fn a_proxy_container_runs_the_binary_as_nobody() {
    let (engine, docker) = (engine().await, docker().await);
    let tag = ensure_proxy_image(&engine, Path::new(BINARY))
        .await
        .unwrap();
    let (code, output) = run_container(
        &docker,
        ContainerCreateBody {
            image: Some(tag.clone()),
            cmd: Some(vec!["--help".into()]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("Usage: egress-sandbox proxy"), "{output}");
    // The image, not the caller, makes it run unprivileged.
    let image = docker.inspect_image(&tag).await.unwrap();
    assert_eq!(
        image.config.and_then(|c| c.user).as_deref(),
        Some("65534:65534")
    );
}

#[tokio::test]
async fn a_dynamic_binary_is_refused_with_a_way_out() {
    let engine = engine().await;
    let error = ensure_proxy_image(&engine, Path::new("/bin/ls"))
        .await
        .unwrap_err();
    assert!(matches!(error, ImageError::NotStatic { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("/bin/ls") && message.contains("crt-static"),
        "{message}"
    );
}

/// The same static binary with its ELF header saying it is for the other one of amd64 and
/// arm64 than the engine: refused before anything is imported, with the build that fits.
#[tokio::test]
async fn a_binary_for_another_architecture_than_the_engines_is_refused_with_the_build_that_fits() {
    let (engine, docker) = (engine().await, docker().await);
    let engine_arch = docker.version().await.unwrap().arch.unwrap();
    let (foreign_machine, foreign_arch, fitting_target): (u16, _, _) = match engine_arch.as_str() {
        "amd64" => (183, "linux/arm64", "x86_64-unknown-linux-gnu"),
        "arm64" => (62, "linux/amd64", "aarch64-unknown-linux-gnu"),
        other => panic!("the test knows no other architecture than {other}'s"),
    };
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("egress-sandbox");
    let mut bytes = std::fs::read(BINARY).unwrap();
    bytes[0x12..0x14].copy_from_slice(&foreign_machine.to_le_bytes());
    std::fs::write(&foreign, bytes).unwrap();
    let error = ensure_proxy_image(&engine, &foreign).await.unwrap_err();
    assert!(
        matches!(error, ImageError::WrongPlatform { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("built for {foreign_arch}"))
            && message.contains(&format!("runs linux/{engine_arch}"))
            && message.contains(&format!("cargo build --release --target {fitting_target}")),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_image_is_reported_and_never_pulled() {
    let (engine, docker) = (engine().await, docker().await);
    let image = "egress-sandbox-test/no-such-image:never";
    let error = require_local_image(&engine, image).await.unwrap_err();
    assert!(
        matches!(&error, ImageError::Missing { image: i } if i == image),
        "{error:?}"
    );
    assert!(error.to_string().contains("not found locally"), "{error}");
    assert!(
        docker.inspect_image(image).await.is_err(),
        "something was pulled"
    );
}

#[tokio::test]
async fn an_existing_local_image_is_accepted() {
    let engine = engine().await;
    let tag = ensure_proxy_image(&engine, Path::new(BINARY))
        .await
        .unwrap();
    require_local_image(&engine, &tag).await.unwrap();
}

#[tokio::test]
async fn the_base_image_runs_python_and_curl_as_nobody() {
    let (engine, docker) = (engine().await, docker().await);
    let tag = ensure_base_image(&engine).await.unwrap();
    assert_eq!(tag, BASE_IMAGE);
    assert_eq!(ensure_base_image(&engine).await.unwrap(), BASE_IMAGE);
    let script = "python3 -c 'print(1)' && curl --version | head -n1 && id -un && id -u \
                  && stat -c %a /tmp && ls /usr/share/doc | wc -l";
    let (code, output) = run_container(
        &docker,
        ContainerCreateBody {
            image: Some(tag.clone()),
            user: Some("65534:65534".into()),
            cmd: Some(vec!["sh".into(), "-c".into(), script.into()]),
            network_disabled: Some(true),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(code, 0, "{output}");
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines[0], "1", "{output}");
    assert!(lines[1].starts_with("curl "), "{output}");
    assert_eq!(&lines[2..], ["nobody", "65534", "1777", "0"], "{output}");

    let config = docker.inspect_image(&tag).await.unwrap().config.unwrap();
    let env = config.env.unwrap_or_default();
    assert!(env.iter().any(|e| e == "LANG=C.UTF-8"), "{env:?}");
    assert!(
        env.iter()
            .any(|e| e.starts_with("PATH=") && e.contains("/usr/bin")),
        "{env:?}"
    );
    assert_eq!(config.cmd, Some(vec!["/bin/sh".to_owned()]));
    assert_eq!(
        config
            .labels
            .unwrap_or_default()
            .get("egress-sandbox.image")
            .map(String::as_str),
        Some("base")
    );
}

#[tokio::test]
async fn the_sweep_keeps_the_images_in_use() {
    let engine = engine().await;
    let proxy = ensure_proxy_image(&engine, Path::new(BINARY))
        .await
        .unwrap();
    let base = ensure_base_image(&engine).await.unwrap();
    sweep_images(&engine).await;
    require_local_image(&engine, &proxy).await.unwrap();
    require_local_image(&engine, &base).await.unwrap();
}
