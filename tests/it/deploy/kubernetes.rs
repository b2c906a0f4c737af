//! The Kubernetes manifests: `deploy/kubernetes/base` (the kustomization
//! and every object mcpmux needs), `overlays/{dev,prod}` (rendered here the
//! way kustomize renders them, then validated like the base), and the
//! optional ServiceMonitor in `monitoring/`. Every object is validated
//! strictly against the Kubernetes schemas, and the objects are checked to
//! agree: selectors, ports, the Secret's keys, the config's variables.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::process::Command;

use super::kustomize::{patch_files, render};
use super::{
    configmap_config, image_cmd, interop, mcpmux_check_with, printed, repo, run, strings, tempdir,
    venv_tool, yaml, yaml_files,
};

/// Kubernetes versions the manifests must validate against, from the schemas
/// bundled in `kubernetes-validate` 1.37.0 (it ships 1.25.0 to 1.37.0, `.0`
/// releases only, so these work offline): an older release still common on
/// managed clusters, and the newest it ships.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

fn kubernetes() -> PathBuf {
    repo().join("deploy/kubernetes")
}

fn base() -> PathBuf {
    kubernetes().join("base")
}

/// The overlay directories, sorted.
fn overlays() -> Vec<PathBuf> {
    let dir = kubernetes().join("overlays");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.join("kustomization.yaml").is_file())
        .collect();
    found.sort();
    let names: Vec<String> = found.iter().map(|p| file_name(p)).collect();
    for needed in ["dev", "prod"] {
        assert!(
            names.iter().any(|n| n == needed),
            "no overlay {needed}: {names:?}"
        );
    }
    found
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// The base object of `kind`.
fn base_object(kind: &str) -> Value {
    render(&base())
        .into_iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("the base has no {kind}"))
}

// ---------------------------------------------------------------------------
// Schemas.

#[tokio::test]
async fn kubernetes_manifests_and_rendered_overlays_pass_strict_schema_validation() {
    let validator = venv_tool("kubernetes-validate");
    // The base's and the overlays' own files, but the kustomizations (not
    // API objects) and the patches (partial objects, validated merged).
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [vec![base()], overlays()].concat() {
        let patches = patch_files(&dir);
        files.extend(
            yaml_files(&dir)
                .into_iter()
                .filter(|f| file_name(f) != "kustomization.yaml" && !patches.contains(f)),
        );
    }
    assert!(
        files.len() >= 8,
        "expected the base's 6 manifests and the overlays' namespaces, found {files:?}"
    );
    // Each overlay as it is applied: every object written to its own file.
    let rendered = tempdir();
    for overlay in overlays() {
        let objects = render(&overlay);
        assert!(objects.len() >= 6, "{}: {objects:#?}", overlay.display());
        for object in objects {
            let path = rendered.join(format!(
                "{}-{}-{}.yaml",
                file_name(&overlay),
                object["kind"].as_str().unwrap().to_ascii_lowercase(),
                object["metadata"]["name"].as_str().unwrap()
            ));
            std::fs::write(&path, serde_json::to_string_pretty(&object).unwrap()).unwrap();
            files.push(path);
        }
    }
    for version in KUBERNETES_VERSIONS {
        let output = run(
            "kubernetes-validate",
            Command::new(&validator)
                .args(["--strict", "--kubernetes-version", version])
                .args(&files),
        )
        .await;
        let said = printed(&output);
        assert!(
            output.status.success(),
            "kubernetes-validate --strict --kubernetes-version {version} failed ({}):\n{said}",
            output.status
        );
        // A kind it has no schema for only gets a warning and exit 0.
        for file in &files {
            let about = format!("{} ", file.display());
            let lines: Vec<&str> = said.lines().filter(|l| l.contains(&about)).collect();
            assert!(
                lines.iter().any(|l| l.contains("passed for resource"))
                    && lines.iter().all(|l| !l.starts_with("WARN")),
                "{} was not validated against a Kubernetes {version} schema:\n{said}",
                file.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Kustomizations.

#[test]
fn kustomizations_list_the_base_manifests_and_the_overlays_build_on_the_base() {
    // The base lists every manifest in its directory; the ServiceMonitor
    // is elsewhere, so that the base applies without the Prometheus
    // Operator's CRDs.
    let kustomization = yaml(&base().join("kustomization.yaml"));
    let mut listed = strings(&kustomization["resources"], "base resources");
    listed.sort();
    let present: Vec<String> = yaml_files(&base())
        .iter()
        .map(|p| file_name(p))
        .filter(|name| name != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present, "base/kustomization.yaml resources");
    let kinds: Vec<Value> = render(&base()).iter().map(|o| o["kind"].clone()).collect();
    for kind in [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Secret",
        "Service",
    ] {
        assert!(kinds.contains(&kind.into()), "the base has no {kind}");
    }
    assert!(
        !kinds.contains(&"ServiceMonitor".into()),
        "the base includes the ServiceMonitor"
    );
    let monitoring = render(&kubernetes().join("monitoring"));
    assert_eq!(
        monitoring
            .iter()
            .map(|o| o["kind"].clone())
            .collect::<Vec<_>>(),
        ["ServiceMonitor"],
        "monitoring/ holds the ServiceMonitor alone"
    );

    // `kubectl apply -k deploy/kubernetes` applies the base.
    let top = yaml(&kubernetes().join("kustomization.yaml"));
    assert_eq!(strings(&top["resources"], "resources"), ["base"]);

    // Each overlay builds on the base, puts everything in its own
    // namespace (which it creates), keeps every base object, and its
    // patches change existing containers instead of adding new ones.
    let base_objects = render(&base());
    let base_replicas = base_object("Deployment")["spec"]["replicas"].clone();
    let mut replicas = BTreeSet::new();
    for overlay in overlays() {
        let label = overlay.display();
        let kustomization = yaml(&overlay.join("kustomization.yaml"));
        let resources = strings(&kustomization["resources"], "overlay resources");
        assert!(
            resources.iter().any(|r| overlay
                .join(r)
                .canonicalize()
                .is_ok_and(|p| p == base().canonicalize().unwrap())),
            "{label} does not build on the base: {resources:?}"
        );
        let namespace = kustomization["namespace"]
            .as_str()
            .unwrap_or_else(|| panic!("{label} sets no namespace"));
        let objects = render(&overlay);
        assert!(
            objects
                .iter()
                .any(|o| o["kind"] == "Namespace" && o["metadata"]["name"] == namespace),
            "{label} does not create its namespace {namespace}"
        );
        for object in &base_objects {
            assert!(
                objects.iter().any(|o| o["kind"] == object["kind"]
                    && o["metadata"]["name"] == object["metadata"]["name"]),
                "{label} lost {} {}",
                object["kind"],
                object["metadata"]["name"]
            );
        }
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("a Deployment");
        let containers = deployment["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 1, "{label}: a patch added a container");
        assert!(containers[0]["image"].is_string(), "{label}: no image");
        for (kind, key) in [
            ("requests", "cpu"),
            ("requests", "memory"),
            ("limits", "memory"),
        ] {
            assert!(
                containers[0]["resources"][kind][key].is_string(),
                "{label}: no resources.{kind}.{key}"
            );
        }
        // The PodDisruptionBudget lets a node drain at every replica count.
        let count = deployment["spec"]["replicas"].as_u64().expect("replicas");
        let pdb = objects
            .iter()
            .find(|o| o["kind"] == "PodDisruptionBudget")
            .unwrap();
        let spec = &pdb["spec"];
        let drains = match (
            spec["maxUnavailable"].as_u64(),
            spec["minAvailable"].as_u64(),
        ) {
            (Some(max), None) => max >= 1,
            (None, Some(min)) => min < count,
            _ => false,
        };
        assert!(
            drains,
            "{label}: with {count} replicas the PodDisruptionBudget blocks drains: {spec}"
        );
        replicas.insert(count);
    }
    assert!(
        replicas.iter().any(|r| Some(*r) != base_replicas.as_u64()),
        "no overlay changes the replica count ({replicas:?})"
    );
}

// ---------------------------------------------------------------------------
// The objects agree with each other.

/// Fails unless every label `selector` (a matchLabels mapping) asks for is
/// among `labels`, and it asks for at least one.
fn assert_selects(selector: &Value, labels: &Value, what: &str) {
    let selector = selector
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no label selector"));
    assert!(!selector.is_empty(), "{what}: an empty selector");
    for (key, value) in selector {
        assert_eq!(
            &labels[key], value,
            "{what} selects {key}={value}; the target does not have it"
        );
    }
}

/// The Deployment's pod labels.
fn pod_labels() -> Value {
    base_object("Deployment")["spec"]["template"]["metadata"]["labels"].clone()
}

/// The Secret's key names.
fn secret_keys(secret: &Value) -> BTreeSet<String> {
    ["data", "stringData"]
        .iter()
        .filter_map(|field| secret[field].as_object())
        .flat_map(|m| m.keys().cloned())
        .collect()
}

/// The `${NAME}`s in `text` (not `$${...}`, a literal dollar).
fn variables(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let escaped = rest[..at].ends_with('$');
        rest = &rest[at + 2..];
        let end = rest.find('}').unwrap_or(rest.len());
        let name = rest[..end].split(":-").next().unwrap();
        if !escaped {
            found.insert(name.to_owned());
        }
        rest = &rest[end..];
    }
    found
}

#[test]
fn the_pdb_and_the_networkpolicy_select_the_pods_and_admit_8080_only() {
    let labels = pod_labels();
    let deployment = base_object("Deployment");
    assert_selects(
        &deployment["spec"]["selector"]["matchLabels"],
        &labels,
        "the Deployment",
    );

    let pdb = base_object("PodDisruptionBudget");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_selects(
        &pdb["spec"]["selector"]["matchLabels"],
        &labels,
        "the PodDisruptionBudget",
    );

    let policy = base_object("NetworkPolicy");
    let spec = &policy["spec"];
    assert_selects(
        &spec["podSelector"]["matchLabels"],
        &labels,
        "the NetworkPolicy",
    );
    let types = strings(&spec["policyTypes"], "policyTypes");
    assert!(
        types.contains(&"Ingress".to_owned()) && types.contains(&"Egress".to_owned()),
        "the NetworkPolicy must restrict both directions: {types:?}"
    );
    // Ingress: every rule names its ports, and they are 8080 (by number or
    // by the container port's name) over TCP.
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let port_name = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["containerPort"] == 8080)
        .and_then(|p| p["name"].as_str())
        .unwrap_or("8080")
        .to_owned();
    let ingress = spec["ingress"].as_array().expect("ingress rules");
    assert!(!ingress.is_empty(), "the NetworkPolicy admits nothing");
    for rule in ingress {
        let ports = rule["ports"]
            .as_array()
            .unwrap_or_else(|| panic!("an ingress rule admits every port: {rule}"));
        assert!(
            !ports.is_empty(),
            "an ingress rule admits every port: {rule}"
        );
        for port in ports {
            assert!(
                (port["port"] == 8080 || port["port"] == port_name.as_str())
                    && (port["protocol"].is_null() || port["protocol"] == "TCP"),
                "the NetworkPolicy admits another port than 8080/TCP: {port}"
            );
        }
    }
    // Egress: DNS at least, or no name resolves.
    let egress = spec["egress"].as_array().expect("egress rules");
    assert!(
        egress
            .iter()
            .any(|rule| rule["ports"].as_array().is_some_and(|ports| ports
                .iter()
                .any(|p| p["port"] == 53 && p["protocol"] == "UDP"))),
        "the NetworkPolicy does not allow DNS (53/UDP): {egress:?}"
    );
}

#[tokio::test]
async fn the_secret_holds_what_the_deployment_and_config_use_and_placeholders_are_refused() {
    let secret = base_object("Secret");
    let secret_name = secret["metadata"]["name"].as_str().expect("Secret name");
    let keys = secret_keys(&secret);
    assert!(!keys.is_empty(), "the Secret has no keys");

    // The Deployment takes the Secret's keys as variables: all of them
    // through envFrom, or each through a secretKeyRef; nothing else.
    let container = &base_object("Deployment")["spec"]["template"]["spec"]["containers"][0];
    let mut referenced = BTreeSet::new();
    let mut defined: BTreeSet<String> = BTreeSet::from(["MCPMUX_EXE".to_owned()]);
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let name = from["secretRef"]["name"]
            .as_str()
            .unwrap_or_else(|| panic!("envFrom {from}"));
        assert_eq!(name, secret_name, "envFrom names another Secret");
        assert!(
            from["prefix"].is_null(),
            "envFrom with a prefix renames the keys"
        );
        referenced.extend(keys.iter().cloned());
        defined.extend(keys.iter().cloned());
    }
    for env in container["env"].as_array().into_iter().flatten() {
        defined.insert(env["name"].as_str().unwrap().to_owned());
        let from = &env["valueFrom"]["secretKeyRef"];
        if !from.is_null() {
            assert_eq!(from["name"], secret_name, "{env}: another Secret");
            let key = from["key"].as_str().unwrap();
            assert!(keys.contains(key), "{env}: the Secret has no key {key}");
            referenced.insert(key.to_owned());
        }
    }
    assert_eq!(
        referenced, keys,
        "the Secret's keys and the ones the Deployment references differ"
    );
    for key in &keys {
        assert!(
            key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !key.starts_with(|c: char| c.is_ascii_digit()),
            "the Secret's key {key} is not a variable name"
        );
    }

    // The config names each key as ${KEY} (commented examples count), and
    // every variable of its live lines is defined in the pod.
    let config = configmap_config();
    let used = variables(&config);
    for key in &keys {
        assert!(
            used.contains(key),
            "the Secret's key {key} is not used in the ConfigMap's config"
        );
    }
    let live: String = config
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for name in variables(&live) {
        assert!(
            defined.contains(&name),
            "the config uses ${{{name}}}, which the Deployment does not define"
        );
    }

    // The placeholders are refused: with any one of the keys the config
    // uses left at its placeholder, the config does not pass.
    let placeholders: Vec<(String, String)> = keys
        .iter()
        .map(|k| {
            let value = secret["stringData"][k]
                .as_str()
                .unwrap_or_else(|| panic!("the placeholder {k} is not in stringData"));
            (k.clone(), value.to_owned())
        })
        .collect();
    let file = tempdir().join("config.yaml");
    std::fs::write(&file, &config).unwrap();
    let live_keys: Vec<&(String, String)> = placeholders
        .iter()
        .filter(|(k, _)| variables(&live).contains(k))
        .collect();
    assert!(
        !live_keys.is_empty(),
        "the config uses none of the Secret's keys"
    );
    for (key, placeholder) in live_keys {
        let values = placeholders.iter().map(|(k, _)| {
            let value = if k == key {
                placeholder.as_str()
            } else {
                "a-real-looking-value-for-the-check-0123"
            };
            (k.as_str(), value)
        });
        let output = mcpmux_check_with(&file, values).await;
        assert!(
            !output.status.success(),
            "the config passes with {key}'s placeholder {placeholder:?}, so an unedited \
             Secret would serve with a published key:\n{}",
            printed(&output)
        );
    }
}

#[test]
fn the_servicemonitor_scrapes_metrics_on_the_service_with_the_admin_key() {
    let path = kubernetes().join("monitoring/servicemonitor.yaml");
    let monitor = yaml(&path);
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["kind"], "ServiceMonitor");
    assert!(monitor["metadata"]["name"].is_string());
    let service = base_object("Service");
    assert_selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"],
        "the ServiceMonitor",
    );
    assert!(
        monitor["spec"]["namespaceSelector"].is_null(),
        "the ServiceMonitor looks in other namespaces than its own (the Service's)"
    );
    let port_names: Vec<&str> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let endpoints = monitor["spec"]["endpoints"].as_array().expect("endpoints");
    assert!(!endpoints.is_empty(), "the ServiceMonitor has no endpoints");
    let secret = base_object("Secret");
    let config = serde_saphyr::from_str::<Value>(&configmap_config()).expect("config YAML");
    for endpoint in endpoints {
        let port = endpoint["port"].as_str().expect("endpoint port (a name)");
        assert!(
            port_names.contains(&port),
            "the Service has no port named {port}: {port_names:?}"
        );
        assert_eq!(endpoint["path"], "/metrics");
        // /metrics answers only with the admin key: Prometheus sends the
        // Secret's key the config names for auth.admin.
        let credentials = &endpoint["authorization"]["credentials"];
        assert_eq!(endpoint["authorization"]["type"], "Bearer");
        assert_eq!(credentials["name"], secret["metadata"]["name"]);
        let key = credentials["key"].as_str().expect("credentials key");
        assert!(
            secret_keys(&secret).contains(key),
            "the Secret has no {key}"
        );
        assert_eq!(config["auth"]["admin"]["access"], "key");
        assert_eq!(
            config["auth"]["admin"]["key"],
            format!("${{{key}}}"),
            "Prometheus sends {key}, the config wants another admin key"
        );
    }
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
    let dir = base();
    let deployment = yaml(&dir.join("deployment.yaml"));
    assert_eq!(deployment["kind"], "Deployment");
    assert!(
        deployment["spec"]["replicas"]
            .as_u64()
            .is_some_and(|n| n >= 2),
        "the base runs fewer than 2 replicas, so the PodDisruptionBudget cannot keep one"
    );
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
    assert_selects(
        &service["spec"]["selector"],
        &pod["metadata"]["labels"],
        "the Service",
    );
    let service_ports = service["spec"]["ports"].as_array().expect("Service ports");
    assert!(
        service_ports
            .iter()
            .any(|p| p["port"] == 8080 && (p["targetPort"] == port_name || p["targetPort"] == 8080)),
        "the Service does not map 8080 to the container's port: {service_ports:?}"
    );
}

#[test]
fn the_configmap_marks_optional_upstreams_not_required() {
    // Every upstream says whether it is required (the default, true, takes
    // every replica out of the Service while that upstream is down), and
    // the remote example shows `required: false`.
    let text = configmap_config();
    let config = serde_saphyr::from_str::<Value>(&text).expect("config YAML");
    let upstreams = config["upstreams"].as_object().expect("upstreams");
    assert!(!upstreams.is_empty());
    for (name, upstream) in upstreams {
        assert!(
            upstream["required"].is_boolean(),
            "upstream {name} does not say whether it is required"
        );
    }
    let commented: String = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        commented.contains("required: false"),
        "the ConfigMap shows no optional upstream (`required: false`)"
    );
}
