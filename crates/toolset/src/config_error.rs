//! The one error a toolset's configuration gives: which key, and what is
//! wrong with it. Toolsets check their own sections; the binary reports
//! every such error the same way, naming the key.

/// A config value that cannot work, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    key: String,
    message: String,
}

impl ConfigError {
    /// `key` is the dotted path of the offending key, as a user writes it
    /// (`docs.sources[0].llms_txt`); `message` says what is wrong and what
    /// would be accepted.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The dotted path of the offending key, e.g. `commands.actions[2].argv[3]`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What is wrong with it and how to fix it.
    pub fn message(&self) -> &str {
        &self.message
    }
}
