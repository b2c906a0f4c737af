//! The packaging: the Dockerfile, the Kubernetes manifests under
//! `deploy/kubernetes/`, `deploy/compose.yaml` and the example configs.
//!
//! No container engine runs in CI, so nothing here builds or starts an
//! image. Instead the manifests are validated offline against the schemas
//! bundled in the PyPI packages `kubernetes-validate` and `check-jsonschema`
//! (installed in the interop venv by `scripts/setup-interop.sh`), every
//! config the packaging ships is checked with the real `mcpmux check`, and
//! the files are read to check that they agree with each other: the image's
//! command, the Deployment's args and the compose command; the ConfigMap the
//! Deployment mounts; the config checksum annotation.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tokio::process::Command;

use crate::support::{exe, interop, tempdir, within};

/// Kubernetes versions the manifests must validate against, from the schemas
/// bundled in `kubernetes-validate` 1.37.0 (it ships 1.25.0 to 1.37.0, `.0`
/// releases only, so these work offline): an older release still common on
/// managed clusters, and the newest it ships.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

/// What the README gives as the way to build a production binary, made
/// reproducible with the lock file: the `mcpmux` binary only, without the
/// tests' fixture.
const RELEASE_BUILD: &str = "cargo build --release --locked --bin mcpmux";

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
    let mut cmd = Command::new(exe());
    cmd.arg("check").arg("--config").arg(file);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MCPMUX") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(required_variables(file));
    run(&format!("mcpmux check {}", file.display()), &mut cmd).await
}

/// The variables a shipped config requires on purpose: its credentials.
fn required_variables(file: &Path) -> Vec<(&'static str, &'static str)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    [
        ("MCPMUX_API_KEY", "an-api-key-for-the-check-0123"),
        ("MCPMUX_OPS_KEY", "an-ops-key-for-the-check-0123"),
        ("MCPMUX_JWT_ISSUER", "https://idp.example.com"),
        ("MCPMUX_JWT_AUDIENCE", "https://mcp.example.com/mcp"),
        ("MCPMUX_JWKS_URL", "https://idp.example.com/jwks"),
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
// The Dockerfile, read instruction by instruction.

/// One `FROM` and the instructions after it.
#[derive(Debug)]
struct Stage {
    /// The image or earlier stage it starts from.
    base: String,
    /// The `AS` name, lowercased.
    name: Option<String>,
    /// (INSTRUCTION in upper case, its arguments), in order.
    instructions: Vec<(String, String)>,
}

impl Stage {
    fn all(&self, instruction: &str) -> impl Iterator<Item = &str> {
        self.instructions
            .iter()
            .filter(move |(i, _)| i == instruction)
            .map(|(_, args)| args.as_str())
    }
}

/// The stages of a Dockerfile: continuation lines joined, comments and
/// parser directives skipped.
fn dockerfile_stages(text: &str) -> Vec<Stage> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && !current.is_empty()) {
            continue; // comments (also inside a continued instruction)
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        if !current.trim().is_empty() {
            logical.push(std::mem::take(&mut current));
        }
        current.clear();
    }
    assert!(
        current.trim().is_empty(),
        "the Dockerfile ends inside a continued line"
    );
    let mut stages: Vec<Stage> = Vec::new();
    for line in logical {
        let (instruction, args) = line
            .trim()
            .split_once(char::is_whitespace)
            .unwrap_or((&line, ""));
        let instruction = instruction.to_ascii_uppercase();
        let args = args.split_whitespace().collect::<Vec<_>>().join(" ");
        if instruction == "FROM" {
            let words: Vec<&str> = args
                .split(' ')
                .filter(|w| !w.starts_with("--platform"))
                .collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_ascii_lowercase()),
                [_] => None,
                _ => panic!("unexpected FROM line: {line}"),
            };
            stages.push(Stage {
                base: words[0].to_owned(),
                name,
                instructions: Vec::new(),
            });
        } else {
            let stage = stages
                .last_mut()
                .unwrap_or_else(|| panic!("{instruction} before the first FROM"));
            stage.instructions.push((instruction, args));
        }
    }
    stages
}

/// `stage`, then the earlier stages it is built FROM, nearest first.
fn lineage<'a>(stages: &'a [Stage], stage: &'a Stage) -> Vec<&'a Stage> {
    let mut chain = vec![stage];
    let mut at = stage;
    while let Some(parent) = stages
        .iter()
        .find(|s| s.name.as_deref() == Some(at.base.to_ascii_lowercase().as_str()))
    {
        assert!(chain.len() < stages.len(), "FROM cycle in the Dockerfile");
        chain.push(parent);
        at = parent;
    }
    chain
}

/// An exec-form (JSON array) ENTRYPOINT or CMD.
fn exec_form(args: &str, what: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(args)
        .unwrap_or_else(|e| panic!("{what} is not in exec form (a JSON array): {args} ({e})"));
    strings(&value, what)
}

/// The image's default command: the last CMD of the default (last) stage
/// or of the stages it is built from.
fn image_cmd() -> Vec<String> {
    let stages = dockerfile_stages(&read(&repo().join("Dockerfile")));
    let last = stages.last().expect("the Dockerfile has a FROM");
    let cmd = lineage(&stages, last)
        .iter()
        .find_map(|s| s.all("CMD").last())
        .expect("the default image has a CMD");
    exec_form(cmd, "CMD")
}

#[test]
fn dockerfile_builds_the_locked_release_and_runs_as_a_non_root_user() {
    let dockerfile = repo().join("Dockerfile");
    let stages = dockerfile_stages(&read(&dockerfile));
    assert!(stages.len() >= 2, "not a multi-stage build: {stages:#?}");

    // The build stage: the official Rust image, pinned to a major version.
    let builders: Vec<&Stage> = stages
        .iter()
        .filter(|s| s.base.starts_with("rust:"))
        .collect();
    let [build] = builders.as_slice() else {
        panic!("expected exactly one stage FROM rust:<tag>, found {builders:#?}");
    };
    let tag = build.base.trim_start_matches("rust:");
    assert!(
        tag.split(['-', '.'])
            .next()
            .is_some_and(|major| major.parse::<u32>().is_ok()),
        "the rust image is not pinned to a major version: {}",
        build.base
    );
    let builds: Vec<&str> = build
        .all("RUN")
        .filter(|r| r.contains("cargo build"))
        .collect();
    assert_eq!(
        builds,
        [RELEASE_BUILD],
        "the build stage must run exactly `{RELEASE_BUILD}`"
    );
    let copied: Vec<&str> = build.all("COPY").collect();
    for needed in ["Cargo.toml", "Cargo.lock", "src"] {
        assert!(
            copied.iter().any(|c| c.split(' ').any(|w| w == needed)),
            "the build stage does not COPY {needed}: {copied:?}"
        );
    }
    let build_name = build
        .name
        .as_deref()
        .expect("the build stage has an AS name");

    // Every other stage is an image someone may run: each must end up as a
    // non-root user, expose 8080 and carry the binary.
    let runnable: Vec<&Stage> = stages
        .iter()
        .filter(|s| !std::ptr::eq(*s, *build))
        .collect();
    assert!(!runnable.is_empty(), "no runtime stage");
    for stage in &runnable {
        let label = stage.name.clone().unwrap_or_else(|| stage.base.clone());
        let chain = lineage(&stages, stage);
        let user = chain
            .iter()
            .find_map(|s| s.all("USER").last())
            .unwrap_or_else(|| panic!("stage {label} has no USER, so it runs as root"));
        let account = user.split(':').next().unwrap_or_default();
        assert!(
            !account.is_empty() && account != "root" && account != "0",
            "stage {label} runs as root (USER {user})"
        );
        let exposed: Vec<&str> = chain
            .iter()
            .flat_map(|s| s.all("EXPOSE"))
            .flat_map(|e| e.split(' '))
            .collect();
        assert!(
            exposed.iter().any(|p| *p == "8080" || *p == "8080/tcp"),
            "stage {label} does not EXPOSE 8080 (exposes {exposed:?})"
        );
        let binary =
            format!("--from={build_name} /build/target/release/mcpmux /usr/local/bin/mcpmux");
        assert!(
            chain
                .iter()
                .flat_map(|s| s.all("COPY"))
                .any(|c| c == binary),
            "stage {label} does not COPY the release binary to /usr/local/bin/mcpmux"
        );
    }

    // The default target is the slim image, not the one with Node.js.
    let last = stages.last().unwrap();
    let chain = lineage(&stages, last);
    assert_eq!(
        chain.last().unwrap().base,
        "debian:bookworm-slim",
        "the default target does not build on debian:bookworm-slim"
    );
    assert!(
        chain
            .iter()
            .all(|s| s.name.as_deref() != Some("runtime-node")),
        "the default target (the last stage) includes runtime-node"
    );
    assert!(
        stages
            .iter()
            .any(|s| s.name.as_deref() == Some("runtime-node")),
        "no runtime-node target"
    );

    let entrypoint = chain
        .iter()
        .find_map(|s| s.all("ENTRYPOINT").last())
        .expect("the default image has an ENTRYPOINT");
    assert_eq!(exec_form(entrypoint, "ENTRYPOINT"), ["mcpmux"]);
    let cmd = image_cmd();
    let listen = cmd
        .iter()
        .position(|a| a == "--listen")
        .map(|i| &cmd[i + 1]);
    assert_eq!(
        listen.map(String::as_str),
        Some("0.0.0.0:8080"),
        "the image must listen on all interfaces: CMD {cmd:?}"
    );
    let config = cmd
        .iter()
        .position(|a| a == "--config")
        .map(|i| &cmd[i + 1]);
    assert_eq!(config.map(String::as_str), Some("/etc/mcpmux/config.yaml"));

    // The build context leaves out what the build never reads.
    let ignore = read(&repo().join(".dockerignore"));
    let ignored: Vec<&str> = ignore.lines().map(str::trim).collect();
    for entry in [
        "target/",
        "tests/interop/node_modules",
        "tests/interop/.venv",
        ".git",
    ] {
        assert!(ignored.contains(&entry), ".dockerignore lacks {entry}");
    }
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
    let path = repo().join("deploy/kubernetes/configmap.yaml");
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
// Kubernetes.

#[tokio::test]
async fn kubernetes_manifests_pass_strict_schema_validation() {
    let validator = venv_tool("kubernetes-validate");
    let files = yaml_files(&repo().join("deploy/kubernetes"));
    assert!(
        files.len() >= 4,
        "expected at least 4 manifests under deploy/kubernetes/, found {files:?}"
    );
    for version in KUBERNETES_VERSIONS {
        for file in &files {
            let output = run(
                "kubernetes-validate",
                Command::new(&validator)
                    .args(["--strict", "--kubernetes-version", version])
                    .arg(file),
            )
            .await;
            let said = printed(&output);
            assert!(
                output.status.success(),
                "kubernetes-validate --strict --kubernetes-version {version} {} failed ({}):\n{said}",
                file.display(),
                output.status
            );
            // A kind it has no schema for only gets a warning and exit 0;
            // only the kustomization (a kustomize file, not an API object)
            // may be one.
            if yaml(file)["kind"] != "Kustomization" {
                assert!(
                    said.contains("passed for resource") && !said.contains("WARN"),
                    "{} was not validated against a Kubernetes {version} schema:\n{said}",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn the_kustomization_lists_every_manifest() {
    let dir = repo().join("deploy/kubernetes");
    let kustomization = yaml(&dir.join("kustomization.yaml"));
    let mut listed = strings(&kustomization["resources"], "kustomization resources");
    listed.sort();
    let present: Vec<String> = yaml_files(&dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| name != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present, "kustomization.yaml resources");
}

/// SHA-256 of a file, by the venv's Python (the test crate has no hash crate).
async fn sha256(path: &Path) -> String {
    let output = run(
        "python hashlib",
        Command::new(interop::python())
            .args([
                "-c",
                "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())",
            ])
            .arg(path),
    )
    .await;
    assert!(output.status.success(), "{}", printed(&output));
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn the_deployment_runs_the_image_command_hardened_with_probes() {
    let dir = repo().join("deploy/kubernetes");
    let deployment = yaml(&dir.join("deployment.yaml"));
    assert_eq!(deployment["kind"], "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().expect("containers");
    let [container] = containers.as_slice() else {
        panic!("expected one container, found {}", containers.len());
    };

    // The same command as the image.
    let args = strings(&container["args"], "container args");
    assert_eq!(
        args,
        image_cmd(),
        "the container's args differ from the image's CMD"
    );
    assert!(
        container.get("command").is_none(),
        "command would replace the image's ENTRYPOINT"
    );

    // Probes on the named container port 8080.
    let ports = container["ports"].as_array().expect("container ports");
    let http = ports
        .iter()
        .find(|p| p["containerPort"] == 8080)
        .expect("container port 8080");
    let port_name = http["name"].as_str().expect("port 8080 has a name");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(
            get["port"] == port_name || get["port"] == 8080,
            "{probe} is not on port 8080: {get}"
        );
    }
    for (kind, key) in [
        ("requests", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
    ] {
        assert!(
            container["resources"][kind][key].is_string(),
            "no resources.{kind}.{key}"
        );
    }

    // Unprivileged, read-only, no capabilities, the default seccomp profile.
    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"], 10001);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(
        strings(&security["capabilities"]["drop"], "capabilities.drop"),
        ["ALL"]
    );
    let seccomp = if security["seccompProfile"].is_null() {
        &spec["securityContext"]["seccompProfile"]
    } else {
        &security["seccompProfile"]
    };
    assert_eq!(seccomp["type"], "RuntimeDefault");

    // The ConfigMap is mounted where --config points, as a directory (a
    // subPath mount would never see ConfigMap updates).
    let configmap = yaml(&dir.join("configmap.yaml"));
    let configmap_name = configmap["metadata"]["name"]
        .as_str()
        .expect("ConfigMap name");
    let volume = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["configMap"]["name"] == configmap_name)
        .unwrap_or_else(|| panic!("no volume from ConfigMap {configmap_name}"));
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap volume is not mounted");
    assert_eq!(mount["mountPath"], "/etc/mcpmux");
    assert!(
        mount.get("subPath").is_none(),
        "the ConfigMap is mounted with subPath"
    );
    let config_arg = args
        .iter()
        .position(|a| a == "--config")
        .map(|i| args[i + 1].as_str());
    assert_eq!(config_arg, Some("/etc/mcpmux/config.yaml"));

    // Kubernetes waits longer than mcpmux drains (plus any preStop sleep).
    let config = serde_saphyr::from_str::<Value>(&configmap_config()).expect("config YAML");
    let grace = config["shutdown_grace"].as_str().unwrap_or("10s");
    let grace = humantime::parse_duration(grace)
        .expect("shutdown_grace")
        .as_secs_f64();
    let pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
        .as_array()
        .and_then(|c| match c.as_slice() {
            [sleep, secs] if sleep == "sleep" => secs.as_str()?.parse::<f64>().ok(),
            _ => None,
        })
        .unwrap_or(0.0);
    let termination = spec["terminationGracePeriodSeconds"]
        .as_f64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        termination > grace + pre_stop,
        "terminationGracePeriodSeconds {termination} is not above shutdown_grace {grace}s + preStop {pre_stop}s"
    );

    // The checksum annotation follows the ConfigMap, so a change rolls the pods.
    let checksum = format!("sha256:{}", sha256(&dir.join("configmap.yaml")).await);
    assert_eq!(
        pod["metadata"]["annotations"]["checksum/config"], checksum,
        "the checksum/config annotation in deployment.yaml is stale: set it to {checksum:?}"
    );

    // The Service selects these pods and targets the container port.
    let service = yaml(&dir.join("service.yaml"));
    assert_eq!(service["spec"]["type"], "ClusterIP");
    let labels = &pod["metadata"]["labels"];
    let selector = service["spec"]["selector"]
        .as_object()
        .expect("Service selector");
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(
            &labels[key], value,
            "the Service selects {key}={value}; the pods do not have it"
        );
    }
    let service_ports = service["spec"]["ports"].as_array().expect("Service ports");
    assert!(
        service_ports
            .iter()
            .any(|p| p["port"] == 8080 && (p["targetPort"] == port_name || p["targetPort"] == 8080)),
        "the Service does not map 8080 to the container's port: {service_ports:?}"
    );
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
