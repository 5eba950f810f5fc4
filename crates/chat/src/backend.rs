//! The seam between the chat tools and the network that carries messages.
//!
//! The tools validate input, read the history and format results; a backend
//! delivers messages and knows who is where. The local hub and the IRC client
//! both implement [`ChatBackend`], and the tools never know which one they have.

use futures::future::BoxFuture;

use crate::{
    history::{HistoryError, Message, SenderKind, Unstored},
    names::{Channel, NameRules, Nick},
};

/// What a backend reports after sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The messages as the history stored them, when the backend stores on
    /// send (the local hub); empty when the network's echo is recorded later.
    pub stored: Vec<Message>,
    /// How many lines went out.
    pub lines: usize,
    /// True when delivery is confirmed: the local hub committed the lines,
    /// or switchboard heard them back in the IRC channel.
    pub confirmed: bool,
    /// The nick the lines went out as (an IRC sender whose nick was taken
    /// may have become `nick_`).
    pub sent_as: String,
}

/// A member of a channel, and who it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member {
    pub nick: String,
    pub kind: SenderKind,
}

/// A backend operation failed; the message is written for the agent.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error("{0}")]
    Network(String),
    /// The network takes nothing from this sender (switchboard's own nick).
    #[error("{0}")]
    Sender(String),
}

impl From<Unstored> for ChatError {
    fn from(unstored: Unstored) -> Self {
        Self::History(unstored.error)
    }
}

/// A chat network as the tools see it.
pub trait ChatBackend: Send + Sync + 'static {
    /// The naming rules of the network (they may change when an IRC server
    /// announces its ISUPPORT).
    fn rules(&self) -> NameRules;

    /// Sends `lines` to `channel` as `sender` (an agent or a person, as
    /// `kind` says), creating the channel if needed. Succeeds only when every
    /// line was delivered.
    fn send<'a>(
        &'a self,
        channel: &'a Channel,
        sender: &'a Nick,
        kind: SenderKind,
        lines: Vec<String>,
    ) -> BoxFuture<'a, Result<Delivery, ChatError>>;

    /// Posts a notice from switchboard itself (kind `system`) to `channel`.
    /// `once` names a notice that every process sharing the history may
    /// post for the same event (a loop guard's pause): it is stored once,
    /// and not posted again once stored.
    fn announce<'a>(
        &'a self,
        channel: &'a Channel,
        text: String,
        once: Option<String>,
    ) -> BoxFuture<'a, Result<(), ChatError>>;

    /// Puts `nick` in `channel` (on IRC, its connection JOINs), or takes it
    /// out (PART). The history's cursors record the membership either way.
    fn set_presence<'a>(
        &'a self,
        channel: &'a Channel,
        nick: &'a Nick,
        present: bool,
    ) -> BoxFuture<'a, Result<(), ChatError>>;

    /// Creates `channel`; true when it did not exist before.
    fn create_channel<'a>(&'a self, channel: &'a Channel)
    -> BoxFuture<'a, Result<bool, ChatError>>;

    /// The channels this backend knows and is in.
    fn channels(&self) -> BoxFuture<'_, Result<Vec<String>, ChatError>>;

    /// Who is in `channel`, ordered by folded nick.
    fn members<'a>(&'a self, channel: &'a Channel)
    -> BoxFuture<'a, Result<Vec<Member>, ChatError>>;

    /// Why what is said on the network is not being recorded right now (an
    /// IRC connection that is down), if it is not. The default: always
    /// recording.
    fn outage(&self) -> Option<String> {
        None
    }

    /// Leaves the network politely at shutdown. The default has nothing to do.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
