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

    /// Checks that `value` lies in `range`, in one wording for every
    /// section; `unit` follows the bounds (`" bytes"`, or `""`).
    ///
    /// ```
    /// # use switchboard_toolset::ConfigError;
    /// assert!(ConfigError::check_range("docs.search_limit", 5, 1..=50, "").is_ok());
    /// let e = ConfigError::check_range("docs.page_chars", 10, 500..=100_000, " characters")
    ///     .unwrap_err();
    /// assert_eq!(
    ///     e.to_string(),
    ///     "docs.page_chars: must be between 500 and 100000 characters (got 10)"
    /// );
    /// ```
    pub fn check_range<T: PartialOrd + std::fmt::Display>(
        key: &str,
        value: T,
        range: std::ops::RangeInclusive<T>,
        unit: &str,
    ) -> Result<(), Self> {
        if range.contains(&value) {
            return Ok(());
        }
        Err(Self::new(
            key,
            format!(
                "must be between {} and {}{unit} (got {value})",
                range.start(),
                range.end()
            ),
        ))
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
