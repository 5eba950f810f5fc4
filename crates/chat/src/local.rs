//! The local hub: chat between the agents of one switchboard, no network.
//!
//! Channels and messages live in the history; a message is delivered the
//! moment it is committed, and everyone waiting on the channel wakes then.
//! A channel's members are the nicks that have spoken in it or joined it,
//! less those that left. This is the reference behaviour the IRC backend
//! matches.

use futures::{FutureExt, future::BoxFuture};

use crate::{
    backend::{ChatBackend, ChatError, Delivery, Member},
    history::{History, NewMessage, SenderKind},
    names::{Channel, NameRules, Nick},
};

/// The nick switchboard's own notices go out under; no agent or person
/// may speak under it.
pub const SYSTEM_NICK: &str = "switchboard";

/// The in-process chat hub.
pub struct LocalHub {
    history: History,
    rules: NameRules,
}

impl LocalHub {
    pub fn new(history: History) -> Self {
        Self {
            history,
            rules: NameRules::default(),
        }
    }
}

impl ChatBackend for LocalHub {
    fn rules(&self) -> NameRules {
        self.rules.clone()
    }

    fn send<'a>(
        &'a self,
        channel: &'a Channel,
        sender: &'a Nick,
        kind: SenderKind,
        lines: Vec<String>,
    ) -> BoxFuture<'a, Result<Delivery, ChatError>> {
        async move {
            // What comes from this nick is switchboard's own word (approval
            // acknowledgements, loop-guard pauses): nobody else may use it.
            if sender.key() == self.rules.fold(SYSTEM_NICK) {
                return Err(ChatError::Sender(format!(
                    "{} is the nick of switchboard's own notices; speak under another nick",
                    sender.name()
                )));
            }
            let count = lines.len();
            let messages = lines
                .into_iter()
                .map(|text| {
                    NewMessage::live(channel.clone(), sender.name(), sender.key(), text, kind)
                })
                .collect();
            let stored = self.history.append(messages).await?;
            Ok(Delivery {
                stored,
                lines: count,
                confirmed: true,
                sent_as: sender.name().to_owned(),
            })
        }
        .boxed()
    }

    fn announce<'a>(
        &'a self,
        channel: &'a Channel,
        text: String,
        once: Option<String>,
    ) -> BoxFuture<'a, Result<(), ChatError>> {
        async move {
            let mut notice = NewMessage::live(
                channel.clone(),
                SYSTEM_NICK,
                SYSTEM_NICK,
                text,
                SenderKind::System,
            );
            // A second copy is dropped as a duplicate.
            notice.msgid = once;
            self.history.append(vec![notice]).await?;
            Ok(())
        }
        .boxed()
    }

    fn set_presence<'a>(
        &'a self,
        _channel: &'a Channel,
        _nick: &'a Nick,
        _present: bool,
    ) -> BoxFuture<'a, Result<(), ChatError>> {
        // The hub has no connections: the history's cursors are the membership.
        async { Ok(()) }.boxed()
    }

    fn create_channel<'a>(
        &'a self,
        channel: &'a Channel,
    ) -> BoxFuture<'a, Result<bool, ChatError>> {
        async move { Ok(self.history.ensure_channel(channel).await?) }.boxed()
    }

    fn channels(&self) -> BoxFuture<'_, Result<Vec<String>, ChatError>> {
        async move { Ok(self.history.channels()?) }.boxed()
    }

    fn members<'a>(
        &'a self,
        channel: &'a Channel,
    ) -> BoxFuture<'a, Result<Vec<Member>, ChatError>> {
        async move {
            let Some(row) = self.history.channel_row(channel.key())? else {
                return Ok(Vec::new());
            };
            // Who spoke and has not left, and who joined without speaking.
            let mut members: Vec<(String, Member)> = self
                .history
                .speakers(channel.key())?
                .into_iter()
                .filter(|s| self.history.cursor(&s.key, row.id).is_none_or(|c| c.joined))
                .map(|s| {
                    let member = Member {
                        nick: s.nick,
                        kind: s.kind,
                    };
                    (s.key, member)
                })
                .collect();
            for key in self.history.joined(row.id) {
                if !members.iter().any(|(k, _)| *k == key) {
                    let member = Member {
                        nick: key.clone(),
                        kind: SenderKind::Unknown,
                    };
                    members.push((key, member));
                }
            }
            members.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(members.into_iter().map(|(_, m)| m).collect())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Durability, Location};

    #[tokio::test]
    async fn nobody_speaks_under_the_nick_of_switchboards_notices() {
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let hub = LocalHub::new(history.clone());
        let rules = hub.rules();
        let channel = rules.channel("#c").unwrap();
        for nick in ["switchboard", "SwitchBoard"] {
            let sender = rules.nick(nick).unwrap();
            let err = hub
                .send(
                    &channel,
                    &sender,
                    SenderKind::Human,
                    vec!["yes abcde".into()],
                )
                .await
                .unwrap_err();
            assert!(
                err.to_string().contains("switchboard's own notices"),
                "{err}"
            );
        }
        assert_eq!(history.newest_id().unwrap(), 0, "nothing stored");
        hub.announce(&channel, "a notice".into(), None)
            .await
            .unwrap();
        let ann = rules.nick("ann").unwrap();
        hub.send(&channel, &ann, SenderKind::Human, vec!["hi".into()])
            .await
            .unwrap();
        assert_eq!(history.newest_id().unwrap(), 2);
        history.close();
    }
}
