//! Secrets the configuration names by environment variable (`[admin] token_env`,
//! `[cluster] registry_secret_env`, `[metrics] token_env`, `[schema_registry] username_env` and
//! `password_env`): read from the variable `NAME` itself, or from the file that `NAME_FILE`
//! names, which is how Kubernetes Secrets and Docker secrets are mounted. The file is read
//! when the secret is (at start-up), so a rotated Secret takes effect at the next start, as a
//! changed variable does.
//!
//! Errors name the variable and the file, never any part of the secret.
//!
//! Layer: foundations. Imports nothing of floodgate's.

use std::io::Read;
use std::path::Path;

/// The largest secret file read (a list of admin tokens or registry secrets is a few hundred
/// bytes; a larger file is a wrong mount, not a secret).
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// The secret in `NAME`, else in the file `NAME_FILE` names; `None` when neither is set.
/// Both set is refused: which one wins would be a guess. One trailing line end (`\n` or
/// `\r\n`) of a file is dropped, since `echo token > file` leaves one.
pub fn read(name: &str) -> Result<Option<String>, String> {
    read_with(name, |var| std::env::var_os(var))
}

/// As [`read`], with the environment given (tests need not touch the process's).
pub fn read_with(
    name: &str,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Option<String>, String> {
    let file_var = format!("{name}_FILE");
    match (env(name), env(&file_var)) {
        (Some(_), Some(_)) => Err(format!(
            "both {name} and {file_var} are set: set one of them"
        )),
        (Some(value), None) => value
            .into_string()
            .map(Some)
            .map_err(|_| format!("the environment variable {name} is not UTF-8")),
        (None, Some(path)) => read_file(&file_var, Path::new(&path)).map(Some),
        (None, None) => Ok(None),
    }
}

fn read_file(file_var: &str, path: &Path) -> Result<String, String> {
    let failed = |what: String| format!("{file_var}: cannot read {}: {what}", path.display());
    let file = std::fs::File::open(path).map_err(|e| failed(e.kind().to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| failed(e.kind().to_string()))?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(failed(format!("larger than {MAX_SECRET_FILE_BYTES} bytes")));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| failed("not UTF-8".into()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_variable_is_read_as_it_is() {
        let got = read_with("T", env(&[("T", "ops:abc \n")])).expect("ok");
        assert_eq!(got.as_deref(), Some("ops:abc \n"));
        assert_eq!(read_with("T", env(&[])).expect("ok"), None);
    }

    #[test]
    fn the_file_twin_is_read_with_one_line_end_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        for (written, read) in [
            ("s3cret-s3cret-s3cret\n", "s3cret-s3cret-s3cret"),
            ("s3cret-s3cret-s3cret\r\n", "s3cret-s3cret-s3cret"),
            ("a,b\n\n", "a,b\n"),
            ("no-line-end", "no-line-end"),
        ] {
            std::fs::write(&path, written).expect("write");
            let file = path.to_str().expect("utf-8 path");
            let got = read_with("T", env(&[("T_FILE", file)])).expect("ok");
            assert_eq!(got.as_deref(), Some(read), "{written:?}");
        }
    }

    #[test]
    fn both_set_a_missing_file_and_an_oversized_one_are_refused_without_the_secret() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret-s3cret-s3cret").expect("write");
        let file = path.to_str().expect("utf-8 path");

        let both = read_with("T", env(&[("T", "s3cret-s3cret-s3cret"), ("T_FILE", file)]))
            .expect_err("both");
        assert!(both.contains("T and T_FILE"), "{both}");
        assert!(!both.contains("s3cret"), "{both}");

        let missing = dir.path().join("absent");
        let missing = missing.to_str().expect("utf-8 path");
        let e = read_with("T", env(&[("T_FILE", missing)])).expect_err("missing");
        assert!(
            e.starts_with("T_FILE: cannot read") && e.contains("absent"),
            "{e}"
        );

        let big = "x".repeat(MAX_SECRET_FILE_BYTES as usize + 1);
        std::fs::write(&path, big).expect("write");
        let e = read_with("T", env(&[("T_FILE", file)])).expect_err("too big");
        assert!(e.contains("larger than"), "{e}");
        assert!(!e.contains("xxx"), "{e}");
    }
}
