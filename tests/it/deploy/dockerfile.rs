//! The Dockerfile, read instruction by instruction: the build stage's
//! cached dependency layer (a stub for every target Cargo.toml declares,
//! checked by running the stub commands), the one real build and the strip;
//! the runtime targets (distroless by default, Node.js LTS, Python with uv),
//! each non-root as the Kubernetes manifests' `runAsUser`.

use std::path::Path;

use serde_json::Value;
use tokio::process::Command;

use super::{printed, read, repo, run, strings, yaml};
use crate::support::tempdir;

/// What the README gives as the way to build a production binary, made
/// reproducible with the lock file: the `mcpmux` binary only, without the
/// tests' fixture.
const RELEASE_BUILD: &str = "cargo build --release --locked --bin mcpmux";

/// Node.js release lines in (active or maintenance) long-term support, with
/// the end of their support: 22 until April 2027, 24 until April 2028.
/// Drop a line from this list when it reaches its end of life.
const NODE_LTS: [u32; 2] = [22, 24];

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

    fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.base.clone())
    }
}

/// A Dockerfile: the `ARG`s before the first `FROM` (name, default) and the
/// stages.
#[derive(Debug)]
struct Dockerfile {
    global_args: Vec<(String, String)>,
    stages: Vec<Stage>,
}

impl Dockerfile {
    fn read() -> Self {
        parse(&read(&repo().join("Dockerfile")))
    }

    fn stage(&self, name: &str) -> &Stage {
        self.stages
            .iter()
            .find(|s| s.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("the Dockerfile has no stage {name}"))
    }

    /// The one stage FROM the official Rust image.
    fn build(&self) -> &Stage {
        let builders: Vec<&Stage> = self
            .stages
            .iter()
            .filter(|s| s.base.starts_with("rust:"))
            .collect();
        let [build] = builders.as_slice() else {
            panic!("expected exactly one stage FROM rust:<tag>, found {builders:#?}");
        };
        build
    }

    /// `stage`, then the earlier stages it is built FROM, nearest first.
    fn lineage<'a>(&'a self, stage: &'a Stage) -> Vec<&'a Stage> {
        let mut chain = vec![stage];
        let mut at = stage;
        while let Some(parent) = self
            .stages
            .iter()
            .find(|s| s.name.as_deref() == Some(at.base.to_ascii_lowercase().as_str()))
        {
            assert!(
                chain.len() < self.stages.len(),
                "FROM cycle in the Dockerfile"
            );
            chain.push(parent);
            at = parent;
        }
        chain
    }

    /// The image `stage` finally starts from, with global ARGs expanded.
    fn root_image(&self, stage: &Stage) -> String {
        let mut image = self.lineage(stage).last().unwrap().base.clone();
        for (name, default) in &self.global_args {
            image = image.replace(&format!("${{{name}}}"), default);
        }
        image
    }
}

/// The stages of a Dockerfile: continuation lines joined, comments and
/// parser directives skipped.
fn parse(text: &str) -> Dockerfile {
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
    let mut global_args = Vec::new();
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
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push((instruction, args));
        } else {
            assert_eq!(instruction, "ARG", "{instruction} before the first FROM");
            let (name, default) = args.split_once('=').unwrap_or((&args, ""));
            global_args.push((name.to_owned(), default.to_owned()));
        }
    }
    Dockerfile {
        global_args,
        stages,
    }
}

/// The shell commands of a RUN instruction, split at `&&` and `;`.
fn commands(run: &str) -> Vec<String> {
    run.split("&&")
        .flat_map(|c| c.split(';'))
        .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|c| !c.is_empty())
        .collect()
}

fn is_cargo_build(command: &str) -> bool {
    command.starts_with("cargo build")
}

/// An exec-form (JSON array) ENTRYPOINT or CMD.
fn exec_form(args: &str, what: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(args)
        .unwrap_or_else(|e| panic!("{what} is not in exec form (a JSON array): {args} ({e})"));
    strings(&value, what)
}

/// The image's default command: the last CMD of the default (last) stage
/// or of the stages it is built from.
pub(super) fn image_cmd() -> Vec<String> {
    let dockerfile = Dockerfile::read();
    stage_cmd(&dockerfile, dockerfile.stages.last().expect("a FROM"))
}

fn stage_cmd(dockerfile: &Dockerfile, stage: &Stage) -> Vec<String> {
    let cmd = dockerfile
        .lineage(stage)
        .iter()
        .find_map(|s| s.all("CMD").last())
        .unwrap_or_else(|| panic!("stage {} has no CMD", stage.label()));
    exec_form(cmd, "CMD")
}

// ---------------------------------------------------------------------------
// Cargo targets.

/// A target Cargo.toml declares (or the package has by convention), with
/// the paths Cargo accepts for its source.
#[derive(Debug)]
struct Target {
    what: String,
    paths: Vec<String>,
}

/// The targets of a manifest: `[lib]`, every `[[bin]]`, `[[bench]]`,
/// `[[test]]` and `[[example]]` with its `path` or, without one, the paths
/// Cargo infers from its name; plus src/main.rs and src/lib.rs, which Cargo
/// picks up without a declaration, when `exists` says the package has them.
fn declared_targets(manifest: &str, exists: impl Fn(&str) -> bool) -> Vec<Target> {
    #[derive(Default)]
    struct Section {
        kind: String,
        name: Option<String>,
        path: Option<String>,
    }
    let mut sections: Vec<Section> = Vec::new();
    // The target section the lines belong to, if any.
    let mut current: Option<usize> = None;
    let mut package = None;
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']').trim();
            in_package = header == "package";
            current = None;
            if matches!(header, "lib" | "bin" | "bench" | "test" | "example") {
                current = Some(sections.len());
                sections.push(Section {
                    kind: header.to_owned(),
                    ..Section::default()
                });
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_owned();
        match (key.trim(), current) {
            ("name", None) if in_package => package = Some(value),
            ("name", Some(i)) => sections[i].name = Some(value),
            ("path", Some(i)) => sections[i].path = Some(value),
            _ => {}
        }
    }
    let package = package.expect("Cargo.toml has no [package] name");
    let mut targets: Vec<Target> = Vec::new();
    for section in sections {
        let kind = section.kind;
        let name = section.name.clone().unwrap_or_else(|| package.clone());
        let paths = match (section.path, kind.as_str()) {
            (Some(path), _) => vec![path],
            (None, "lib") => vec!["src/lib.rs".to_owned()],
            (None, "bin") if name == package => vec!["src/main.rs".to_owned()],
            (None, kind) => {
                let dir = match kind {
                    "bin" => "src/bin",
                    "bench" => "benches",
                    "test" => "tests",
                    _ => "examples",
                };
                vec![format!("{dir}/{name}.rs"), format!("{dir}/{name}/main.rs")]
            }
        };
        targets.push(Target {
            what: format!("[[{kind}]] {name}"),
            paths,
        });
    }
    for (path, what) in [("src/main.rs", "the binary"), ("src/lib.rs", "the library")] {
        let covered = targets.iter().any(|t| t.paths.iter().any(|p| p == path));
        if !covered && exists(path) {
            targets.push(Target {
                what: format!("{what} {path}"),
                paths: vec![path.to_owned()],
            });
        }
    }
    targets
}

/// The targets of `manifest` no file in `dir` stands for.
fn missing_targets(manifest: &str, dir: &Path) -> Vec<Target> {
    declared_targets(manifest, |p| repo().join(p).is_file())
        .into_iter()
        .filter(|t| !t.paths.iter().any(|p| dir.join(p).is_file()))
        .collect()
}

#[test]
fn declared_targets_include_inferred_paths() {
    // The shape of a benchmark added later: a name and no path.
    let manifest = "[package]\nname = \"mcpmux\"\n\n[[bin]]\nname = \"mcpmux\"\npath = \"src/main.rs\"\n\n\
        [dependencies]\nserde = \"1\"\n\n[[bench]]\nname = \"gateway\"\nharness = false\n";
    let targets = declared_targets(manifest, |p| p == "src/lib.rs");
    let paths: Vec<&[String]> = targets.iter().map(|t| t.paths.as_slice()).collect();
    assert_eq!(
        paths,
        [
            &["src/main.rs".to_owned()][..],
            &[
                "benches/gateway.rs".to_owned(),
                "benches/gateway/main.rs".to_owned()
            ],
            &["src/lib.rs".to_owned()],
        ],
        "{targets:#?}"
    );
}

// ---------------------------------------------------------------------------
// The build stage.

#[tokio::test]
async fn dockerfile_caches_dependencies_in_a_layer_with_a_stub_for_every_target() {
    let dockerfile = Dockerfile::read();
    let build = dockerfile.build();
    let tag = build.base.trim_start_matches("rust:");
    assert!(
        tag.split(['-', '.'])
            .next()
            .is_some_and(|major| major.parse::<u32>().is_ok()),
        "the rust image is not pinned to a major version: {}",
        build.base
    );

    // Up to the first cargo build, only the manifest and the lock file are
    // copied: the layer it makes depends on nothing else.
    let first_build = build
        .instructions
        .iter()
        .position(|(i, a)| i == "RUN" && commands(a).iter().any(|c| is_cargo_build(c)))
        .expect("the build stage runs no cargo build");
    let before = &build.instructions[..first_build];
    let copied: Vec<&str> = before
        .iter()
        .filter(|(i, _)| i == "COPY" || i == "ADD")
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(
        copied,
        ["Cargo.toml Cargo.lock ./"],
        "before the dependency build, copy Cargo.toml and Cargo.lock only"
    );

    // The stub commands: every RUN before that build, and the commands of
    // its own RUN before `cargo build`. Run them in a directory holding the
    // manifest, as the build would, and look for every target's source.
    let mut script: Vec<String> = before
        .iter()
        .filter(|(i, _)| i == "RUN")
        .flat_map(|(_, a)| commands(a))
        .collect();
    let build_commands = commands(&build.instructions[first_build].1);
    let at = build_commands
        .iter()
        .position(|c| is_cargo_build(c))
        .unwrap();
    script.extend(build_commands[..at].iter().cloned());
    assert_eq!(
        build_commands[at], RELEASE_BUILD,
        "the dependency layer must build what the final build builds"
    );
    let dir = tempdir();
    let manifest = read(&repo().join("Cargo.toml"));
    std::fs::write(dir.join("Cargo.toml"), &manifest).unwrap();
    std::fs::copy(repo().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let output = run(
        "the Dockerfile's stub commands",
        Command::new("sh")
            .args(["-ec", &script.join("\n")])
            .current_dir(&dir),
    )
    .await;
    assert!(
        output.status.success(),
        "the stub commands failed ({}): {script:?}\n{}",
        output.status,
        printed(&output)
    );
    let missing: Vec<String> = missing_targets(&manifest, &dir)
        .iter()
        .map(|t| format!("{} (at {})", t.what, t.paths.join(" or ")))
        .collect();
    assert!(
        missing.is_empty(),
        "the dependency layer has no stub for these targets in Cargo.toml: {missing:#?}\n\
         (the stub commands: {script:?})"
    );

    // After the dependency build: the stubs under src/ are removed, and
    // the sources that replace them are rebuilt, not taken for up to date
    // (copied files keep their older modification times).
    let after: Vec<String> = build.instructions[first_build..]
        .iter()
        .filter(|(i, _)| i == "RUN")
        .flat_map(|(_, a)| commands(a))
        .collect();
    let real_build = after
        .iter()
        .rposition(|c| is_cargo_build(c))
        .expect("a cargo build");
    let between = &after[at + 1..real_build];
    assert!(
        between.iter().any(|c| c.starts_with("rm ")
            && c.split(' ')
                .any(|w| w == "src" || w == "src/" || w == "src/*")),
        "the stubs under src/ are not removed after the dependency build: {between:?}"
    );
    let forgets_stub = between
        .iter()
        .any(|c| c.starts_with("rm ") && c.contains("target/release/.fingerprint/mcpmux-"));
    let touches = between.iter().any(|c| {
        c.starts_with("touch ")
            && ["src/main.rs", "src/lib.rs"]
                .iter()
                .all(|p| c.split(' ').any(|w| w == *p))
    });
    assert!(
        forgets_stub || touches,
        "nothing makes cargo rebuild the real sources after the stub build \
         (remove target/release/.fingerprint/mcpmux-* or touch src/main.rs src/lib.rs): {between:?}"
    );
}

#[test]
fn dockerfile_builds_the_real_crate_once_after_copying_src_and_strips_it() {
    let dockerfile = Dockerfile::read();
    let build = dockerfile.build();
    let copy_src = build
        .instructions
        .iter()
        .position(|(i, a)| i == "COPY" && a.split(' ').next() == Some("src"))
        .expect("the build stage does not COPY src");
    let after = &build.instructions[copy_src..];
    let copied: Vec<&str> = after
        .iter()
        .filter(|(i, _)| i == "COPY")
        .map(|(_, a)| a.as_str())
        .collect();
    assert!(
        copied.contains(&"docs/config.schema.json ./docs/config.schema.json"),
        "the build does not COPY docs/config.schema.json (compiled in): {copied:?}"
    );
    let commands: Vec<String> = after
        .iter()
        .filter(|(i, _)| i == "RUN")
        .flat_map(|(_, a)| commands(a))
        .collect();
    let builds: Vec<&String> = commands.iter().filter(|c| is_cargo_build(c)).collect();
    assert_eq!(
        builds,
        [RELEASE_BUILD],
        "after COPY src the build stage must run exactly `{RELEASE_BUILD}` once"
    );
    let at = commands.iter().position(|c| is_cargo_build(c)).unwrap();
    let binary = "target/release/mcpmux";
    let stripped = commands[at + 1..].iter().any(|c| {
        let words: Vec<&str> = c.split(' ').collect();
        let strips = match words[0] {
            "strip" => true,
            "objcopy" => words.iter().any(|w| w.starts_with("--strip")),
            _ => false,
        };
        strips && words.last() == Some(&binary)
    });
    assert!(
        stripped,
        "{binary} is not stripped after the build: {commands:?}"
    );
    // Nothing after the build stage's last instruction could change it: the
    // runtime stages copy the file that was stripped.
    let build_name = build
        .name
        .as_deref()
        .expect("the build stage has an AS name");
    let source = format!("--from={build_name} /build/{binary} /usr/local/bin/mcpmux");
    assert!(
        dockerfile
            .stages
            .iter()
            .flat_map(|s| s.all("COPY"))
            .any(|c| c == source),
        "no stage copies the stripped /build/{binary}"
    );
    assert_eq!(
        build.all("WORKDIR").last(),
        Some("/build"),
        "the build stage's WORKDIR"
    );
}

// ---------------------------------------------------------------------------
// The runtime stages.

/// The uid the Kubernetes Deployment runs the container as.
fn kubernetes_run_as_user() -> u64 {
    let deployment = yaml(&repo().join("deploy/kubernetes/base/deployment.yaml"));
    let spec = &deployment["spec"]["template"]["spec"];
    let uid = &spec["containers"][0]["securityContext"]["runAsUser"];
    let uid = if uid.is_null() {
        &spec["securityContext"]["runAsUser"]
    } else {
        uid
    };
    uid.as_u64().expect("the Deployment sets runAsUser")
}

/// The ENV variables a stage and its parents set (later ones win).
fn env_of(dockerfile: &Dockerfile, stage: &Stage) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for s in dockerfile.lineage(stage).iter().rev() {
        for args in s.all("ENV") {
            for pair in args.split(' ') {
                let (k, v) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("ENV {args}: write ENV NAME=VALUE"));
                env.push((k.to_owned(), v.trim_matches('"').to_owned()));
            }
        }
    }
    env
}

#[test]
fn dockerfile_runtime_targets_run_non_root_and_the_default_is_distroless() {
    let dockerfile = Dockerfile::read();
    let build = dockerfile.build();
    let build_name = build.name.as_deref().unwrap();
    let uid = kubernetes_run_as_user();
    let default = dockerfile.stages.last().unwrap();

    // Images someone may run: the runtime* targets and the default (last)
    // stage. Every other stage only feeds them files (COPY --from).
    let runnable: Vec<&Stage> = dockerfile
        .stages
        .iter()
        .filter(|s| {
            std::ptr::eq(*s, default) || s.name.as_deref().is_some_and(|n| n.starts_with("runtime"))
        })
        .collect();
    let copy_sources: Vec<&str> = dockerfile
        .stages
        .iter()
        .flat_map(|s| s.all("COPY"))
        .filter_map(|c| c.strip_prefix("--from="))
        .filter_map(|c| c.split(' ').next())
        .collect();
    for stage in &dockerfile.stages {
        let name = stage.name.as_deref().unwrap_or_default();
        assert!(
            runnable.iter().any(|r| std::ptr::eq(*r, stage)) || copy_sources.contains(&name),
            "stage {} is neither a runtime target nor used by COPY --from",
            stage.label()
        );
    }
    let mut names: Vec<&str> = runnable.iter().filter_map(|s| s.name.as_deref()).collect();
    names.sort();
    for needed in ["runtime", "runtime-node", "runtime-python"] {
        assert!(names.contains(&needed), "no {needed} target: {names:?}");
    }

    let default_cmd = image_cmd();
    for stage in &runnable {
        let label = stage.label();
        let chain = dockerfile.lineage(stage);
        let user = chain
            .iter()
            .find_map(|s| s.all("USER").last())
            .unwrap_or_else(|| panic!("stage {label} has no USER, so it runs as root"));
        let (account, group) = user.split_once(':').unwrap_or((user, ""));
        assert_eq!(
            account.parse::<u64>().ok(),
            Some(uid),
            "stage {label}: USER {user} is not the Kubernetes runAsUser {uid} (numeric)"
        );
        assert!(uid != 0, "runAsUser is root");
        assert!(
            group.is_empty() || group.parse::<u64>().is_ok_and(|g| g != 0),
            "stage {label}: USER {user} has a root or non-numeric group"
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
        let copies: Vec<&str> = chain.iter().flat_map(|s| s.all("COPY")).collect();
        let binary =
            format!("--from={build_name} /build/target/release/mcpmux /usr/local/bin/mcpmux");
        assert!(
            copies.contains(&binary.as_str()),
            "stage {label} does not COPY the release binary to /usr/local/bin/mcpmux"
        );
        assert!(
            copies.contains(&"config/demo-container.yaml /etc/mcpmux/config.yaml"),
            "stage {label} does not ship config/demo-container.yaml at the default config path"
        );
        let entrypoint = chain
            .iter()
            .find_map(|s| s.all("ENTRYPOINT").last())
            .unwrap_or_else(|| panic!("stage {label} has no ENTRYPOINT"));
        assert_eq!(exec_form(entrypoint, "ENTRYPOINT"), ["mcpmux"], "{label}");
        assert_eq!(
            stage_cmd(&dockerfile, stage),
            default_cmd,
            "stage {label} runs another command than the default image"
        );
        // Every base image is built on the build stage's Debian release, so
        // the binary finds the glibc it was linked against.
        let root = dockerfile.root_image(stage);
        assert!(
            root.contains("bookworm") || root.contains("debian12"),
            "stage {label} is not on Debian bookworm like the build stage: {root}"
        );
    }

    // The default target: distroless with the C runtime (glibc, libgcc, CA
    // certificates), the non-root variant, and no shell, so no RUN.
    let chain = dockerfile.lineage(default);
    let root = dockerfile.root_image(default);
    assert!(
        root.starts_with("gcr.io/distroless/cc-") && root.ends_with(":nonroot"),
        "the default target is not built on gcr.io/distroless/cc-*:nonroot: {root}"
    );
    let runs: Vec<&str> = chain.iter().flat_map(|s| s.all("RUN")).collect();
    assert!(
        runs.is_empty(),
        "the distroless default target has no shell to RUN {runs:?}"
    );
    assert!(
        chain.iter().all(|s| !s
            .name
            .as_deref()
            .unwrap_or_default()
            .starts_with("runtime-")),
        "the default target (the last stage) includes a runtime-* variant"
    );
    let cmd = image_cmd();
    let arg = |flag: &str| {
        cmd.iter()
            .position(|a| a == flag)
            .map(|i| cmd[i + 1].as_str())
    };
    assert_eq!(
        arg("--listen"),
        Some("0.0.0.0:8080"),
        "the image must listen on all interfaces: CMD {cmd:?}"
    );
    assert_eq!(arg("--config"), Some("/etc/mcpmux/config.yaml"));

    // The Node.js variant: a supported LTS line. Both variants have uv and
    // uvx from the official image, and their caches (and HOME) under /tmp,
    // the one writable path under a read-only root filesystem.
    let node = dockerfile.stage("runtime-node");
    let node_image = dockerfile.root_image(node);
    let major = node_image
        .strip_prefix("node:")
        .and_then(|tag| tag.split(['-', '.']).next())
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("runtime-node is not FROM node:<major>-...: {node_image}"));
    assert!(
        NODE_LTS.contains(&major),
        "runtime-node uses Node.js {major}, not a supported LTS line {NODE_LTS:?}"
    );
    let python = dockerfile.stage("runtime-python");
    let python_image = dockerfile.root_image(python);
    let minor = python_image
        .strip_prefix("python:3.")
        .and_then(|tag| tag.split(['-', '.']).next())
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or_else(|| {
            panic!("runtime-python is not FROM python:3.<minor>-...: {python_image}")
        });
    assert!(minor >= 10, "runtime-python has Python 3.{minor}");

    let uv_stages: Vec<&str> = dockerfile
        .stages
        .iter()
        .filter(|s| {
            dockerfile
                .root_image(s)
                .starts_with("ghcr.io/astral-sh/uv:")
        })
        .filter_map(|s| s.name.as_deref())
        .collect();
    let [uv] = uv_stages.as_slice() else {
        panic!("expected one stage FROM ghcr.io/astral-sh/uv, found {uv_stages:?}");
    };
    let uv_image = dockerfile.root_image(dockerfile.stage(uv));
    let uv_version = uv_image.trim_start_matches("ghcr.io/astral-sh/uv:");
    assert!(
        uv_version.split('.').count() == 3
            && uv_version.split('.').all(|n| n.parse::<u32>().is_ok()),
        "the uv image is not pinned to a version: {uv_image}"
    );
    for (stage, caches) in [
        (
            node,
            &[
                "npm_config_cache",
                "UV_CACHE_DIR",
                "UV_PYTHON_INSTALL_DIR",
                "HOME",
            ][..],
        ),
        (
            python,
            &["UV_CACHE_DIR", "UV_PYTHON_INSTALL_DIR", "HOME"][..],
        ),
    ] {
        let label = stage.label();
        let copies: Vec<&str> = dockerfile
            .lineage(stage)
            .iter()
            .flat_map(|s| s.all("COPY"))
            .collect();
        assert!(
            copies.contains(&format!("--from={uv} /uv /uvx /usr/local/bin/").as_str()),
            "stage {label} does not copy uv and uvx onto PATH: {copies:?}"
        );
        let env = env_of(&dockerfile, stage);
        for name in caches {
            let value = env
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str());
            assert!(
                value.is_some_and(|v| v == "/tmp" || v.starts_with("/tmp/")),
                "stage {label}: {name} is not under /tmp ({value:?})"
            );
        }
    }

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
