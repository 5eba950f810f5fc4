//! Who is calling a tool, as far as the transport can tell.

/// Facts about the client behind a tool call, filled in by the transport.
///
/// Toolsets may use them (for example as a default identity) but must not
/// depend on which transport set them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// A short human-readable label for logs: `stdio`, `http`, `sse 4f1c…`.
    pub label: String,
    /// The process id of the client, when the transport can verify it.
    pub pid: Option<u32>,
    /// A name for the agent behind this client, when the transport can tell
    /// one (the relay derives it from the agent's process), for toolsets to
    /// use when the agent gives none.
    pub default_nick: Option<String>,
}

impl Caller {
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            ..Self::default()
        }
    }
}
