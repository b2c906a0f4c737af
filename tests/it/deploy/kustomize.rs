//! Rendering a kustomization the way `kubectl kustomize` does, for the
//! fields the manifests under `deploy/kubernetes/` use (resources, patches,
//! namespace), so the overlays can be validated as they are applied. There
//! is no kustomize in CI; any other field fails the test rather than being
//! ignored.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{strings, yaml};

/// The files a kustomization names as patches.
pub(super) fn patch_files(dir: &Path) -> Vec<PathBuf> {
    let kustomization = yaml(&dir.join("kustomization.yaml"));
    kustomization["patches"]
        .as_array()
        .map(|patches| {
            patches
                .iter()
                .map(|p| dir.join(p["path"].as_str().expect("a patch without path")))
                .collect()
        })
        .unwrap_or_default()
}

/// The objects a kustomization directory makes: its resources (files, or
/// directories with their own kustomization), with its patches applied and
/// its namespace set. Fails on any kustomization field it does not
/// implement, so nothing is silently left out.
pub(super) fn render(dir: &Path) -> Vec<Value> {
    let kustomization = yaml(&dir.join("kustomization.yaml"));
    let fields = kustomization.as_object().expect("a kustomization mapping");
    for key in fields.keys() {
        assert!(
            ["apiVersion", "kind", "resources", "patches", "namespace"].contains(&key.as_str()),
            "{}: the test's renderer does not implement `{key}`; extend render()",
            dir.display()
        );
    }
    let mut objects = Vec::new();
    for resource in strings(&kustomization["resources"], "resources") {
        let path = dir.join(&resource);
        if path.is_dir() {
            objects.extend(render(&path));
        } else {
            objects.push(yaml(&path));
        }
    }
    for file in patch_files(dir) {
        let patch = yaml(&file);
        let targets: Vec<&mut Value> = objects
            .iter_mut()
            .filter(|o| {
                o["kind"] == patch["kind"] && o["metadata"]["name"] == patch["metadata"]["name"]
            })
            .collect();
        let [target] = <[&mut Value; 1]>::try_from(targets).unwrap_or_else(|t| {
            panic!(
                "{}: the patch matches {} objects, not one",
                file.display(),
                t.len()
            )
        });
        strategic_merge(target, &patch, &file);
    }
    if let Some(namespace) = kustomization["namespace"].as_str() {
        for object in &mut objects {
            if object["kind"] != "Namespace" {
                object["metadata"]["namespace"] = namespace.into();
            }
        }
    }
    objects
}

/// A strategic merge patch, for what the overlays use: mappings merge key by
/// key, lists of mappings with a `name` merge by name (containers, env),
/// other lists are replaced.
fn strategic_merge(target: &mut Value, patch: &Value, file: &Path) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                assert!(
                    !key.starts_with('$'),
                    "{}: the test's renderer does not implement {key}",
                    file.display()
                );
                match target.get_mut(key) {
                    Some(existing) => strategic_merge(existing, value, file),
                    None => {
                        target.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(target), Value::Array(patch))
            if patch
                .iter()
                .chain(target.iter())
                .all(|v| v["name"].is_string()) =>
        {
            for item in patch {
                match target.iter_mut().find(|t| t["name"] == item["name"]) {
                    Some(existing) => strategic_merge(existing, item, file),
                    None => target.push(item.clone()),
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}
