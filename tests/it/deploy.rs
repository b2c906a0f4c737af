//! The packaging: the Dockerfile (`deploy/dockerfile.rs`), the Kubernetes
//! manifests under `deploy/kubernetes/` (`deploy/kubernetes.rs`),
//! `deploy/compose.yaml` and the example configs (here).
//!
//! No container engine runs in CI, so nothing here builds or starts an
//! image. Instead the manifests are validated offline against the schemas
//! bundled in the PyPI packages `kubernetes-validate` and `check-jsonschema`
//! (installed in the interop venv by `scripts/setup-interop.sh`), every
//! config the packaging ships is checked with the real `mcpmux check`, and
//! the files are read to check that they agree with each other: the image's
//! command and user, the Deployment's args and the compose command; the
//! ConfigMap and Secret the Deployment uses; the selectors of the Service,
//! PodDisruptionBudget, NetworkPolicy and ServiceMonitor; the config
//! checksum annotation.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tokio::process::Command;

use crate::support::{exe, interop, tempdir, within};

mod dockerfile;
mod kubernetes;
mod kustomize;

use dockerfile::image_cmd;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A command-line tool installed in the interop venv.
fn venv_tool(name: &str) -> PathBuf {
    let path = interop::dir().join(".venv/bin").join(name);
    assert!(
        path.exists(),
        "missing {}: run scripts/setup-interop.sh first (scripts/test.sh does)",
        path.display()
    );
    path
}

/// The `*.yaml` files directly in `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A YAML file as JSON values (through the package's own YAML parser).
fn yaml(path: &Path) -> Value {
    serde_saphyr::from_str::<Value>(&read(path))
        .unwrap_or_else(|e| panic!("{}: invalid YAML: {e}", path.display()))
}

/// Runs `cmd` to completion within the test deadline.
async fn run(what: &str, cmd: &mut Command) -> Output {
    let output = cmd.kill_on_drop(true).output();
    within(what, output)
        .await
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"))
}

/// stdout and stderr of a finished command, for assertion messages.
fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `mcpmux check --config FILE`, with no `MCPMUX*` variable in its
/// environment but those the file documents as required (its secrets), so
/// a config passes only on its own defaults.
async fn mcpmux_check(file: &Path) -> Output {
    let variables = required_variables(file);
    mcpmux_check_with(file, variables.iter().map(|&(k, v)| (k, v))).await
}

/// `mcpmux check --config FILE` with no `MCPMUX*` variable in its
/// environment but `variables`.
async fn mcpmux_check_with<'a>(
    file: &Path,
    variables: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Output {
    let mut cmd = Command::new(exe());
    cmd.arg("check").arg("--config").arg(file);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MCPMUX") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(variables);
    run(&format!("mcpmux check {}", file.display()), &mut cmd).await
}

/// The variables a shipped config requires on purpose: its credentials.
fn required_variables(file: &Path) -> Vec<(&'static str, &'static str)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    [
        ("MCPMUX_API_KEY", "an-api-key-for-the-check-0123"),
        ("MCPMUX_OPS_KEY", "an-ops-key-for-the-check-0123"),
        ("MCPMUX_ADMIN_KEY", "an-admin-key-for-the-check-0123"),
        ("MCPMUX_JWT_ISSUER", "https://idp.example.com"),
        ("MCPMUX_JWT_AUDIENCE", "https://mcp.example.com/mcp"),
        ("MCPMUX_JWKS_URL", "https://idp.example.com/jwks"),
        ("MCPMUX_IDP_ISSUER", "https://idp.example.com"),
        ("MCPMUX_IDP_CLIENT_ID", "mcpmux"),
        ("MCPMUX_IDP_CLIENT_SECRET", "a-client-secret-for-the-check"),
        (
            "MCPMUX_TOKEN_KEY",
            "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
        ),
    ]
    .into_iter()
    .filter(|(name, _)| text.contains(&format!("${{{name}}}")))
    .collect()
}

fn assert_check_passes(file: &Path, output: &Output) {
    assert!(
        output.status.success(),
        "mcpmux check --config {} failed ({}):\n{}",
        file.display(),
        output.status,
        printed(output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(": ok ("),
        "mcpmux check --config {} printed no ok line:\n{}",
        file.display(),
        printed(output)
    );
}

/// A JSON string array as strings.
fn strings(value: &Value, what: &str) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{what}: not a list: {value}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("{what}: not a string: {v}"))
                .to_owned()
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Configs.

#[tokio::test]
async fn every_example_config_passes_mcpmux_check() {
    let files = yaml_files(&repo().join("config"));
    assert!(
        files.len() >= 4,
        "expected at least 4 configs under config/, found {files:?}"
    );
    for file in &files {
        assert_check_passes(file, &mcpmux_check(file).await);
    }
}

/// The `config.yaml` key of the ConfigMap.
fn configmap_config() -> String {
    let path = repo().join("deploy/kubernetes/base/configmap.yaml");
    let configmap = yaml(&path);
    assert_eq!(configmap["kind"], "ConfigMap", "{}", path.display());
    configmap["data"]["config.yaml"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: no data.config.yaml string", path.display()))
        .to_owned()
}

#[tokio::test]
async fn the_configmap_holds_a_config_that_passes_mcpmux_check() {
    let file = tempdir().join("config.yaml");
    std::fs::write(&file, configmap_config()).unwrap();
    assert_check_passes(&file, &mcpmux_check(&file).await);
}

// ---------------------------------------------------------------------------
// docker compose.

#[tokio::test]
async fn the_compose_file_passes_the_compose_spec_and_mounts_the_container_config() {
    let path = repo().join("deploy/compose.yaml");
    let output = run(
        "check-jsonschema",
        Command::new(venv_tool("check-jsonschema"))
            .args(["--builtin-schema", "vendor.compose-spec"])
            .arg(&path),
    )
    .await;
    assert!(
        output.status.success(),
        "deploy/compose.yaml does not match the compose specification ({}):\n{}",
        output.status,
        printed(&output)
    );

    // Relative paths in a compose file are resolved from its directory.
    let base = path.parent().unwrap();
    let compose = yaml(&path);
    let service = &compose["services"]["mcpmux"];
    let context = base.join(service["build"]["context"].as_str().expect("build.context"));
    let dockerfile = service["build"]["dockerfile"]
        .as_str()
        .unwrap_or("Dockerfile");
    assert!(
        context.join(dockerfile).is_file(),
        "the build does not use the repository's Dockerfile"
    );
    assert_eq!(
        context.canonicalize().unwrap(),
        repo().canonicalize().unwrap(),
        "the build context is not the repository root"
    );

    let volumes = service["volumes"].as_array().expect("volumes");
    let config = volumes
        .iter()
        .find_map(|v| match v {
            Value::String(short) => {
                let parts: Vec<&str> = short.split(':').collect();
                (parts.get(1) == Some(&"/etc/mcpmux/config.yaml"))
                    .then(|| (parts[0].to_owned(), parts.get(2) == Some(&"ro")))
            }
            long => (long["target"] == "/etc/mcpmux/config.yaml").then(|| {
                (
                    long["source"].as_str().expect("volume source").to_owned(),
                    long["read_only"] == true,
                )
            }),
        })
        .expect("nothing is mounted at /etc/mcpmux/config.yaml");
    let (source, read_only) = config;
    assert_eq!(
        base.join(&source).canonicalize().unwrap(),
        repo()
            .join("config/demo-container.yaml")
            .canonicalize()
            .unwrap(),
        "the mounted config is not config/demo-container.yaml"
    );
    assert!(read_only, "the config is not mounted read-only");

    let ports = strings(&service["ports"], "ports");
    assert!(
        ports.iter().any(|p| p.ends_with(":8080")),
        "port 8080 is not published: {ports:?}"
    );
    assert_eq!(service["read_only"], true);
    let user = service["user"].as_str().expect("user");
    assert_eq!(user.split(':').next(), Some("10001"));
    if !service["command"].is_null() {
        assert_eq!(strings(&service["command"], "command"), image_cmd());
    }
}
