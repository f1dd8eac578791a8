//! What the calendar quotas (the tenants', the global ones) have used, kept across restarts of
//! a single replica: a JSON file (`[quotas] state_file`) rewritten whole every
//! `[quotas] save_ms` and once more when the run drains, and read back at start.
//!
//! A clean shutdown loses nothing; a crash loses what was admitted since the last save (at
//! most `save_ms`, 1 s by default). The file is replaced atomically (a private temporary file,
//! fsync, rename, fsync of the folder), so a crash leaves the old counts or the new ones. A
//! count read back applies only if its window is still the current one (`QuotaSpec::used_at`),
//! so a file from last month gives nobody anything back or takes anything away.
//!
//! Layer: decisions and state. Reads the tenants; nothing imports it but the assembly.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::quota::global::GlobalQuotas;
use crate::quota::{QuotaUse, Window};
use crate::record::Charge;
use crate::tenant::Tenants;

const VERSION: u32 = 1;

/// One window's count as the file keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Counted {
    window: WindowKey,
    /// The window's first second (Unix).
    start: i64,
    records: u64,
    bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum WindowKey {
    Hour,
    Day,
    Month,
}

impl From<Window> for WindowKey {
    fn from(w: Window) -> Self {
        match w {
            Window::Hour => WindowKey::Hour,
            Window::Day => WindowKey::Day,
            Window::Month => WindowKey::Month,
        }
    }
}

impl From<WindowKey> for Window {
    fn from(w: WindowKey) -> Self {
        match w {
            WindowKey::Hour => Window::Hour,
            WindowKey::Day => Window::Day,
            WindowKey::Month => Window::Month,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    tenants: BTreeMap<String, Vec<Counted>>,
    /// The global quotas' counts (`[global] quotas`); absent in files written before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    global: Vec<Counted>,
}

/// Why the counts could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum QuotaFileError {
    #[error("quota counts {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("quota counts {0} cannot be read: {1}")]
    Corrupt(PathBuf, String),
}

/// The file the counts are kept in.
#[derive(Debug)]
pub struct QuotaFile {
    path: PathBuf,
    /// One save at a time: the periodic save and the drain's write the same temporary file,
    /// and two at once could rename one half-written by the other (review 39 of #37).
    writing: std::sync::Mutex<()>,
}

impl QuotaFile {
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            writing: std::sync::Mutex::new(()),
        }
    }

    /// Gives each tenant of `tenants` the counts the file holds for it, and the global quotas
    /// theirs; returns how many tenants had some. A missing file is a first start: nothing to
    /// give.
    pub fn load_into(
        &self,
        tenants: &Tenants,
        global: &GlobalQuotas,
    ) -> Result<usize, QuotaFileError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(QuotaFileError::Io(self.path.clone(), e)),
        };
        let file: File = serde_json::from_str(&text)
            .map_err(|e| QuotaFileError::Corrupt(self.path.clone(), e.to_string()))?;
        if file.version != VERSION {
            return Err(QuotaFileError::Corrupt(
                self.path.clone(),
                format!("version {} is not {VERSION}", file.version),
            ));
        }
        let directory = tenants.load();
        let mut given = 0;
        for (id, counts) in file.tenants {
            let Some(tenant) = directory.get(&id) else {
                continue; // removed since
            };
            restore(&mut tenant.admission_state().quotas.used, counts);
            given += 1;
        }
        restore(&mut global.lock().used, file.global);
        Ok(given)
    }

    /// Writes every live tenant's counts and the global quotas', replacing the file whole.
    pub fn save(&self, tenants: &Tenants, global: &GlobalQuotas) -> Result<(), QuotaFileError> {
        let mut file = File {
            version: VERSION,
            tenants: BTreeMap::new(),
            global: counted(&global.lock().used),
        };
        for tenant in tenants.load().tenants() {
            let Some(state) = tenant.admission_if_live() else {
                continue; // never admitted anything: nothing used
            };
            let counts = counted(&state.quotas.used);
            if !counts.is_empty() {
                file.tenants.insert(tenant.id.as_str().to_string(), counts);
            }
        }
        let failed = |e: std::io::Error| QuotaFileError::Io(self.path.clone(), e);
        let text = serde_json::to_vec(&file).map_err(|e| failed(e.into()))?;
        let folder = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = folder.join(".quota-counts.tmp");
        let _one = self
            .writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = std::fs::File::create(&tmp).map_err(failed)?;
        out.write_all(&text).map_err(failed)?;
        out.sync_all().map_err(failed)?;
        std::fs::rename(&tmp, &self.path).map_err(failed)?;
        std::fs::File::open(&folder)
            .and_then(|d| d.sync_all())
            .map_err(failed)
    }
}

/// The windows of `used` that counted something, as the file keeps them.
fn counted(used: &[QuotaUse; 3]) -> Vec<Counted> {
    used.iter()
        .filter_map(|u| {
            let (window, start) = u.window?;
            Some(Counted {
                window: window.into(),
                start,
                records: u.used.records,
                bytes: u.used.bytes,
            })
        })
        .collect()
}

/// The file's counts back into `used`.
fn restore(used: &mut [QuotaUse; 3], counts: Vec<Counted>) {
    for c in counts {
        let window = Window::from(c.window);
        used[window as usize] = QuotaUse {
            window: Some((window, c.start)),
            used: Charge::new(c.records, c.bytes),
            // Worked out on the first request: the file keeps starts only.
            ends: 0,
        };
    }
}
