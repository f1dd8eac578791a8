//! What is wrong with a configuration, one problem per key.

/// One thing wrong with a configuration, naming its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigProblem {
    pub key: String,
    pub message: String,
}

impl ConfigProblem {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Why a configuration could not be used: every problem found, one per key.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    pub problems: Vec<ConfigProblem>,
}
