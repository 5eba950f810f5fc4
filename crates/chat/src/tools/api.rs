//! The chat operations as data, for programs that are not MCP clients (the
//! web view): the same backend, history and inbox as the tools, without
//! the tools' text formats. The tools format what these return.

use std::{collections::HashMap, sync::Arc};

use serde::Serialize;
use switchboard_toolset::ToolError;
use tokio::sync::broadcast;

use super::{ChatTools, fail};
use crate::{
    access::Access,
    approvals::Pending,
    backend::{ChatError, Delivery, Member},
    history::{Message, SenderKind},
    names::{Channel, NameRules, Nick},
    text::message_lines,
};

/// A channel as a viewer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChannelSummary {
    pub channel: String,
    pub members: usize,
    /// The viewer is in it.
    pub joined: bool,
    /// Messages the viewer has not read, once it has read or joined it.
    pub unread: i64,
    /// Unread messages that mention the viewer.
    pub mentions: i64,
}

impl ChatTools {
    /// The network's naming rules.
    pub fn rules(&self) -> NameRules {
        self.backend.rules()
    }

    /// Every channel, with members and, for `viewer`, unread and mention
    /// counts.
    pub async fn summaries(&self, viewer: Option<&Nick>) -> Result<Vec<ChannelSummary>, ToolError> {
        let rules = self.backend.rules();
        let names = self.backend.channels().await.map_err(fail)?;
        let ids: HashMap<String, i64> = self
            .history
            .channel_rows()
            .map_err(fail)?
            .into_iter()
            .map(|row| (row.key, row.id))
            .collect();
        let counts = match viewer {
            Some(me) => self.inbox.counts(me, rules.casemapping).map_err(fail)?,
            None => HashMap::new(),
        };
        let mut summaries = Vec::with_capacity(names.len());
        for name in names {
            let Ok(channel) = rules.channel(&name) else {
                continue;
            };
            let members = self
                .backend
                .members(&channel)
                .await
                .map(|m| m.len())
                .unwrap_or(0);
            let count = ids
                .get(channel.key())
                .and_then(|id| counts.get(id))
                .copied()
                .unwrap_or_default();
            summaries.push(ChannelSummary {
                channel: name,
                members,
                joined: count.joined,
                unread: count.unread,
                mentions: count.mentions,
            });
        }
        Ok(summaries)
    }

    /// Who is in `channel`, agents and people told apart.
    pub async fn members(&self, channel: &Channel) -> Result<Vec<Member>, ToolError> {
        self.backend.members(channel).await.map_err(fail)
    }

    /// The stored channel's id, or a clear error when it is unknown.
    fn known(&self, channel: &Channel) -> Result<i64, ToolError> {
        self.channel_id(channel)?
            .ok_or_else(|| ToolError::new(format!("there is no channel {channel}")))
    }

    /// A page of `channel` in insertion order: up to `limit` messages before
    /// position `before` (the newest page without it).
    pub fn page(
        &self,
        channel: &Channel,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Message>, ToolError> {
        let id = self.known(channel)?;
        if let Some(before) = before.filter(|&b| b < 1) {
            return Err(ToolError::new(format!(
                "before must be a position of {channel}, 1 or more (got {before})"
            )));
        }
        self.history.page(id, before, limit).map_err(fail)
    }

    /// The page of `channel` that follows position `after`, in insertion
    /// order: up to `limit` messages, and whether more follow them.
    pub fn page_after(
        &self,
        channel: &Channel,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Message>, bool), ToolError> {
        self.known(channel)?;
        if after < 0 {
            return Err(ToolError::new(format!(
                "after must be a position of {channel}, 0 or more (got {after})"
            )));
        }
        let mut messages = self
            .history
            .read(
                channel.key(),
                Some(crate::history::Since::Seq(after)),
                limit,
            )
            .map_err(fail)?;
        // A read gives the newest first.
        messages.reverse();
        let shown = messages.last().map_or(after, |m| m.seq);
        let newest = self.history.last_seq(channel.key()).map_err(fail)?;
        Ok((messages, shown < newest))
    }

    /// The messages around position `seq` of `channel`: up to `context`
    /// before it, it, and up to `context` after it.
    pub fn around(
        &self,
        channel: &Channel,
        seq: i64,
        context: usize,
    ) -> Result<Vec<Message>, ToolError> {
        let id = self.known(channel)?;
        let newest = self.history.last_seq(channel.key()).map_err(fail)?;
        if newest == 0 {
            return Err(ToolError::new(format!("{channel} has no messages yet")));
        }
        if !(1..=newest).contains(&seq) {
            return Err(ToolError::new(format!(
                "seq must be a position of {channel}, 1 to {newest} (got {seq})"
            )));
        }
        let end = seq.saturating_add(context as i64 + 1);
        let mut messages = self
            .history
            .page(id, Some(end), 2 * context + 1)
            .map_err(fail)?;
        messages.retain(|m| m.seq >= seq - context as i64);
        Ok(messages)
    }

    /// Up to `limit` messages of every channel after message id `after`.
    pub fn after(&self, after: i64, limit: usize) -> Result<Vec<Message>, ToolError> {
        self.history.after(after, limit).map_err(fail)
    }

    /// The id of the newest message of any channel (0 when there is none).
    pub fn newest_id(&self) -> Result<i64, ToolError> {
        self.history.newest_id().map_err(fail)
    }

    /// Completes when the server begins to stop (followers should end).
    pub async fn stopping(&self) {
        self.history.closing().await;
    }

    /// Every message from now on, as committed (see [`History::feed`](crate::History::feed)).
    pub fn feed(&self) -> broadcast::Receiver<Arc<[Message]>> {
        self.history.feed()
    }

    /// The full-text search of `search_messages`.
    pub async fn search(
        &self,
        query: &str,
        channel: Option<&Channel>,
        limit: usize,
    ) -> Result<Vec<Message>, ToolError> {
        let fts = super::format::fts_query(query).ok_or_else(|| {
            ToolError::new("query has no words to search for; give one or more words")
        })?;
        if let Some(channel) = channel {
            self.known(channel)?;
        }
        self.history
            .search(fts, channel.map(|c| c.key().to_owned()), limit)
            .await
            .map_err(fail)
    }

    /// Posts `text` to `channel` as the person `nick` (multi-line texts as
    /// `send_message` sends them); speaking joins the channel.
    pub async fn say(
        &self,
        channel: &Channel,
        nick: &Nick,
        text: &str,
        access: &Access,
    ) -> Result<Delivery, ToolError> {
        // An agent's token is an agent's on the page too: it cannot pass
        // for a person (to answer an approval, say).
        let kind = if access.agent() {
            SenderKind::Agent
        } else {
            SenderKind::Human
        };
        self.deliver(channel, nick, kind, text, access).await
    }

    /// Sends `text` within `access`'s budget (a message a line), then puts
    /// the sender in the channel.
    pub(super) async fn deliver(
        &self,
        channel: &Channel,
        sender: &Nick,
        kind: SenderKind,
        text: &str,
        access: &Access,
    ) -> Result<Delivery, ToolError> {
        let lines = message_lines(text, self.settings.max_text_bytes)
            .map_err(|e| ToolError::invalid_argument("text", e.to_string()))?;
        access.send(lines.len())?;
        let delivery = self
            .backend
            .send(channel, sender, kind, lines)
            .await
            .map_err(|e| match e {
                ChatError::Sender(refused) => ToolError::invalid_argument("sender", refused),
                other => fail(other),
            })?;
        let channel_id = match delivery.stored.first() {
            Some(m) => Some(m.channel_id),
            None => self.channel_id(channel)?,
        };
        if let Some(id) = channel_id
            && !self
                .history
                .cursor(sender.key(), id)
                .is_some_and(|c| c.joined)
        {
            let map = self.backend.rules().casemapping;
            self.inbox.join(sender, map, id).map_err(fail)?;
        }
        Ok(delivery)
    }

    /// `viewer` has seen `channel` up to position `seq`. Looking is not
    /// joining: a person browsing channels does not become their member.
    pub fn mark_read(&self, viewer: &Nick, channel: &Channel, seq: i64) -> Result<(), ToolError> {
        let id = self.known(channel)?;
        // A cursor never moves back, so one past the newest message would
        // hide every message up to it.
        let newest = self.history.last_seq(channel.key()).map_err(fail)?;
        if !(0..=newest).contains(&seq) {
            return Err(ToolError::new(format!(
                "seq must be a position of {channel}, 0 to its newest {newest} (got {seq})"
            )));
        }
        self.history
            .mark(viewer.key(), id, Some(seq), None)
            .map(|_| ())
            .map_err(fail)
    }

    /// Permission requests that can still be answered, oldest first.
    pub fn pending_approvals(&self) -> Vec<Pending> {
        self.approvals
            .as_ref()
            .map_or_else(Vec::new, |a| a.pending())
    }

    /// The approvals channel, when approvals are configured.
    pub fn approvals_channel(&self) -> Option<String> {
        self.settings.approvals.as_ref().map(|a| a.channel.clone())
    }
}
