//! A host seed: objects the host's storage holds before its apiserver first starts, copied
//! from an earlier environment, so that installing them again through the API changes
//! nothing. CRDs are the case it is for: installing Flotilla's ~30 CRDs through a v1.20
//! apiserver costs that apiserver about 6 CPU seconds (its OpenAPI document is rebuilt and
//! serialized for every change of every CRD), while an apiserver that finds the same CRDs
//! stored when it starts loads them for about 0.3 s.
//!
//! The copy is what a real apiserver stored (its own encoding, defaults and status), read
//! back from etcd once and kept in the cache next to the Kubernetes binaries, named by the
//! caller's content name and the apiserver binary it came from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::LocalEnv;
use crate::error::{Error, io};
use crate::etcd::{self, KeyValue};

/// Objects restored into the host's storage before its apiserver starts (see
/// [`crate::EnvOptions::host_seed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSeed {
    /// Names the seed's content, for example a hash of the CRDs the caller installs and of
    /// its field manager: a seed saved under another name is never restored.
    pub name: String,
    /// Storage key prefixes below the host's etcd prefix that the seed copies, e.g.
    /// `apiextensions.k8s.io/customresourcedefinitions/`.
    pub prefixes: Vec<String>,
}

impl HostSeed {
    /// Where the seed is kept once saved (see [`LocalEnv::save_host_seed`]).
    pub fn path(&self) -> Result<PathBuf, Error> {
        seed_path(self)
    }
}

/// One stored object of a saved seed: its key below the host's prefix and its value.
#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    value: String,
}

impl LocalEnv {
    /// Whether the host's storage was seeded from a saved copy when it started.
    pub fn host_seed_restored(&self) -> bool {
        self.seed_restored
    }

    /// Saves what the host's storage holds under the seed's prefixes, for the next
    /// environment with the same [`HostSeed`]: call it once the caller has installed
    /// them. Does nothing (`Ok(false)`) without a seed, when this environment was seeded
    /// or when a copy is already saved.
    pub async fn save_host_seed(&self) -> Result<bool, Error> {
        let (Some(seed), Some(port)) = (&self.options.host_seed, self.etcd_port()) else {
            return Ok(false);
        };
        let path = seed_path(seed)?;
        if self.seed_restored || path.is_file() {
            return Ok(false);
        }
        let host = format!("/{}/", self.host().name());
        let mut entries = Vec::new();
        for prefix in &seed.prefixes {
            let kvs = etcd::range(port, format!("{host}{prefix}").as_bytes())
                .await
                .map_err(io("reading the host seed from etcd"))?;
            entries.extend(kvs.iter().filter_map(|kv| entry(&host, kv)));
        }
        let text = serde_json::to_string(&entries).map_err(|e| Error::Io {
            context: "encoding the host seed".into(),
            source: std::io::Error::other(e),
        })?;
        let dir = path.parent().map(PathBuf::from).unwrap_or_default();
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        // Written aside and renamed: another process may read or write the same seed.
        let partial = dir.join(format!(".{}.{}", seed.name, std::process::id()));
        std::fs::write(&partial, text).map_err(io(format!("writing {}", partial.display())))?;
        std::fs::rename(&partial, &path).map_err(io(format!("renaming to {}", path.display())))?;
        tracing::debug!(seed = %seed.name, objects = entries.len(), "host seed saved");
        Ok(true)
    }

    /// Restores a saved seed into etcd, before the host's apiserver first starts. A seed
    /// that cannot be read or written is skipped (and a broken copy removed): the caller
    /// installs its objects through the API as without one.
    pub(super) async fn restore_host_seed(&mut self) {
        let (Some(seed), Some(port)) = (self.options.host_seed.clone(), self.etcd_port()) else {
            return;
        };
        let Ok(path) = seed_path(&seed) else {
            return;
        };
        let Ok(text) = std::fs::read_to_string(&path) else {
            return;
        };
        let host = format!("/{}/", self.host().name());
        match restore(port, &host, &text).await {
            Ok(objects) => {
                self.seed_restored = true;
                tracing::debug!(seed = %seed.name, objects, "host seed restored");
            }
            Err(e) => {
                tracing::warn!(seed = %seed.name, error = %e, "host seed not restored; removing it");
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    fn etcd_port(&self) -> Option<u16> {
        self.etcd_spec.as_ref().map(|s| s.client_port)
    }
}

async fn restore(port: u16, host: &str, text: &str) -> std::io::Result<usize> {
    let entries: Vec<Entry> = serde_json::from_str(text).map_err(std::io::Error::other)?;
    for e in &entries {
        let kv = KeyValue {
            key: format!("{host}{}", e.key).into_bytes(),
            value: etcd::from_b64(&e.value)?,
        };
        etcd::put(port, &kv).await?;
    }
    Ok(entries.len())
}

/// The saved form of one stored object of the host (`None` outside the host's prefix).
fn entry(host: &str, kv: &KeyValue) -> Option<Entry> {
    let key = std::str::from_utf8(&kv.key).ok()?.strip_prefix(host)?;
    Some(Entry {
        key: key.to_owned(),
        value: etcd::b64(&kv.value),
    })
}

/// Where a seed is kept: `<cache>/etcd-seeds/<name>-<apiserver size>-<apiserver mtime>.json`,
/// so that another apiserver build never reads what this one stored.
fn seed_path(seed: &HostSeed) -> Result<PathBuf, Error> {
    let apiserver = crate::kube_bin_dir()?.join("kube-apiserver");
    let meta =
        std::fs::metadata(&apiserver).map_err(io(format!("reading {}", apiserver.display())))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    Ok(crate::cache_root()?.join("etcd-seeds").join(format!(
        "{}-{:x}-{mtime:x}.json",
        seed.name,
        meta.len()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_hosts_keys_are_saved_and_relative_to_its_prefix() {
        let kv = |k: &str| KeyValue {
            key: k.as_bytes().to_vec(),
            value: vec![0, 1, 2],
        };
        let saved = entry(
            "/host/",
            &kv("/host/apiextensions.k8s.io/customresourcedefinitions/a"),
        )
        .expect("a host key");
        assert_eq!(
            saved.key,
            "apiextensions.k8s.io/customresourcedefinitions/a"
        );
        assert_eq!(etcd::from_b64(&saved.value).expect("base64"), vec![0, 1, 2]);
        assert!(entry("/host/", &kv("/member1/apiextensions.k8s.io/x")).is_none());
    }
}
