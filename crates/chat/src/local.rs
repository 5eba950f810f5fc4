//! The local hub: chat between the agents of one switchboard, no network.
//!
//! Channels and messages live in the history; a message is delivered the
//! moment it is committed, and everyone waiting on the channel wakes then.
//! A channel's members are the nicks that have spoken in it. This is the
//! reference behaviour the IRC backend matches.

use futures::{FutureExt, future::BoxFuture};

use crate::{
    backend::{ChatBackend, ChatError, Delivery},
    history::{History, NewMessage},
    names::{Channel, NameRules, Nick},
};

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
        lines: Vec<String>,
    ) -> BoxFuture<'a, Result<Delivery, ChatError>> {
        async move {
            let count = lines.len();
            let messages = lines
                .into_iter()
                .map(|text| NewMessage {
                    channel: channel.clone(),
                    nick: sender.name().to_owned(),
                    nick_key: sender.key().to_owned(),
                    text,
                    time: None,
                    msgid: None,
                    replayed: false,
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
    ) -> BoxFuture<'a, Result<Vec<String>, ChatError>> {
        async move { Ok(self.history.speakers(channel.key())?) }.boxed()
    }
}
