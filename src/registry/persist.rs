//! Where the registry is kept between runs: the [`Persistence`] seam, and its one
//! implementation for a single instance, an atomically replaced JSON [`StateFile`].
//!
//! A shared store (for replicas) implements the same trait; the registry store, the admin API
//! and the request path do not change.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::state::{FilePart, RegistryState, VERSION};
use super::RegistryError;

/// Loads and saves the registry's declarative state.
pub trait Persistence: Send + Sync + std::fmt::Debug {
    /// The saved state, `None` when nothing was saved yet. A state that cannot be read or
    /// parsed is an error naming where and why, never silently replaced.
    fn load(&self) -> Result<Option<RegistryState>, RegistryError>;
    /// Saves `state` whole; on error nothing may have changed.
    fn save(&self, state: &RegistryState) -> Result<(), RegistryError>;
}

/// No persistence: admin changes last as long as the process.
#[derive(Debug, Default)]
pub struct InMemory;

impl Persistence for InMemory {
    fn load(&self) -> Result<Option<RegistryState>, RegistryError> {
        Ok(None)
    }

    fn save(&self, _: &RegistryState) -> Result<(), RegistryError> {
        Ok(())
    }
}

/// A JSON file, replaced atomically on every change (write a private temporary file, fsync,
/// rename over the old one, fsync the folder): a crash leaves the old file or the new one,
/// never half of one. Created 0600 in a folder created 0700, since it holds key digests.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The state file at `path`; its folder is created (0700) if missing, so a wrong path
    /// stops start-up instead of failing every admin change later.
    pub fn open(path: &Path) -> Result<Self, RegistryError> {
        let dir = folder_of(path);
        if !dir.exists() {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder
                .create(&dir)
                .map_err(|e| RegistryError::Read(path.to_path_buf(), e))?;
        }
        if !dir.is_dir() {
            return Err(RegistryError::Read(
                path.to_path_buf(),
                std::io::Error::other(format!("{} is not a folder", dir.display())),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    fn temporary(&self) -> PathBuf {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "state".into());
        folder_of(&self.path).join(format!(".{name}.tmp"))
    }
}

fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A version 1 file: no record of the configuration file's part.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Version1 {
    #[allow(dead_code)]
    version: u32,
    global: crate::config::GlobalBudgetConfig,
    tenants: std::collections::BTreeMap<String, crate::config::TenantConfig>,
}

impl Persistence for StateFile {
    fn load(&self) -> Result<Option<RegistryState>, RegistryError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(RegistryError::Read(self.path.clone(), e)),
        };
        let corrupt = |e: serde_json::Error| {
            RegistryError::Corrupt(
                self.path.clone(),
                format!("line {} column {}: {e}", e.line(), e.column()),
            )
        };
        let version = serde_json::from_str::<serde_json::Value>(&text)
            .map_err(corrupt)?
            .get("version")
            .and_then(serde_json::Value::as_u64);
        let state = match version {
            Some(1) => {
                // Version 1 kept no record of the file's part: the registry's tenants are
                // taken as the file's, so the first reload applies only real file edits.
                let v1: Version1 = serde_json::from_str(&text).map_err(corrupt)?;
                let tenants: std::collections::BTreeMap<String, std::sync::Arc<_>> = v1
                    .tenants
                    .into_iter()
                    .map(|(id, t)| (id, std::sync::Arc::new(t)))
                    .collect();
                RegistryState {
                    version: VERSION,
                    file: FilePart {
                        global: v1.global.clone(),
                        tenants: tenants.clone(),
                    },
                    global: v1.global,
                    tenants,
                    versions: Default::default(),
                }
            }
            Some(v) if v == u64::from(VERSION) => serde_json::from_str(&text).map_err(corrupt)?,
            other => {
                return Err(RegistryError::Corrupt(
                    self.path.clone(),
                    format!(
                        "version {} is not one this floodgate reads (1 or {VERSION})",
                        other.map_or("missing".to_string(), |v| v.to_string())
                    ),
                ))
            }
        };
        if let Some(p) = state.problems().into_iter().next() {
            return Err(RegistryError::Corrupt(self.path.clone(), p.to_string()));
        }
        Ok(Some(state))
    }

    fn save(&self, state: &RegistryState) -> Result<(), RegistryError> {
        let failed = |e: std::io::Error| RegistryError::Write(self.path.clone(), e);
        let text = serde_json::to_vec_pretty(state).map_err(|e| failed(e.into()))?;
        let tmp = self.temporary();
        // A stale temporary file from a crash is ours to remove; a symlink in its place is
        // removed, never followed.
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(e)),
        }
        // create_new is O_CREAT|O_EXCL, which never follows a symlink at the path.
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp).map_err(failed)?;
        file.write_all(&text).map_err(failed)?;
        file.sync_all().map_err(failed)?;
        drop(file);
        std::fs::rename(&tmp, &self.path).map_err(failed)?;
        std::fs::File::open(folder_of(&self.path))
            .and_then(|d| d.sync_all())
            .map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TenantConfig;

    fn state() -> RegistryState {
        let mut state = RegistryState {
            version: VERSION,
            ..RegistryState::default()
        };
        state.tenants.insert(
            "a".into(),
            std::sync::Arc::new(TenantConfig {
                id: "a".into(),
                topics: vec!["t.*".into()],
                records_per_sec: Some(5),
                ..TenantConfig::default()
            }),
        );
        state
    }

    #[test]
    fn state_files_round_trip_and_corruption_names_the_position() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let file = StateFile::open(&path).expect("open");
        assert_eq!(file.load().expect("missing is fine"), None);
        file.save(&state()).expect("save");
        assert_eq!(file.load().expect("load"), Some(state()));
        std::fs::write(&path, "{\n  \"version\": 2,\n  \"tenants\": [\n").expect("corrupt");
        let text = file.load().expect_err("corrupt").to_string();
        assert!(
            text.contains("state.json") && text.contains("line 4"),
            "{text}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_state_file_is_private_and_its_folder_is_created() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nested/deeper/state.json");
        let file = StateFile::open(&path).expect("folder created");
        file.save(&state()).expect("save");
        let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode(&path).expect("file"), 0o600);
        assert_eq!(mode(path.parent().expect("folder")).expect("folder"), 0o700);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_in_place_of_the_temporary_file_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").expect("victim");
        let file = StateFile::open(&path).expect("open");
        std::os::unix::fs::symlink(&victim, file.temporary()).expect("symlink");
        file.save(&state()).expect("save");
        assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep me");
        assert_eq!(file.load().expect("load"), Some(state()));
    }

    #[test]
    fn unknown_versions_and_mismatched_ids_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let file = StateFile::open(&path).expect("open");
        std::fs::write(&path, r#"{"version": 9, "global": {}, "tenants": {}}"#).expect("w");
        assert!(file
            .load()
            .expect_err("v9")
            .to_string()
            .contains("version 9"));
        std::fs::write(
            &path,
            r#"{"version": 2, "global": {}, "tenants": {"a": {"id": "b", "topics": ["x"]}}}"#,
        )
        .expect("w");
        let text = file.load().expect_err("id").to_string();
        assert!(text.contains("tenants[a].id"), "{text}");
    }

    #[test]
    fn version_1_files_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        std::fs::write(
            &path,
            r#"{"version": 1, "global": {}, "tenants": {"a": {"id": "a", "topics": ["t.*"], "records_per_sec": 5}}}"#,
        )
        .expect("w");
        let loaded = StateFile::open(&path).expect("open").load().expect("v1");
        let loaded = loaded.expect("present");
        assert_eq!(loaded.tenants, state().tenants);
        assert_eq!(loaded.file.tenants, state().tenants);
    }
}
