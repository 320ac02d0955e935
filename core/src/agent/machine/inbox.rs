//! Inbox plumbing: hook-queued actions, sends and splices (IB-4, IB-6).

use super::{Agent, message_text};
use crate::agent::inbox::{InboxTarget, Splice};
use crate::agent::io::{InputError, Notification, Output};
use crate::agent::prompt::{RetainedContext, is_runtime_context_source};
use crate::message::Message;
use crate::session::{EventData, InboxSpliced};
use crate::time::Time;

use alloc::string::String;
use alloc::sync::Arc;

impl Agent {
    pub(super) fn send_queued(
        &mut self,
        now: Time,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), InputError> {
        self.check_user_message(&message)?;
        let target = if wakeup && self.activity_aborted() {
            InboxTarget::NextTurn
        } else {
            target
        };
        let len = self.inbox.list(target).len() as i64;
        if let Some(splice) = self
            .inbox
            .plan(target, len, 0, alloc::vec![message], false)?
        {
            self.commit_splice(now, splice);
        }
        if wakeup {
            self.wake(now);
        }
        Ok(())
    }

    /// IB-4: append the event, update the lists, then notify.
    pub(super) fn commit_splice(&mut self, now: Time, splice: Splice) {
        let data = InboxSpliced {
            target: match splice.target {
                InboxTarget::NextTurn => crate::session::InboxTarget::NextTurn,
                InboxTarget::NextStep => crate::session::InboxTarget::NextStep,
            },
            start: splice.start as u64,
            removed_count: (!splice.removed.is_empty()).then_some(splice.removed.len() as u64),
            inserted: splice.inserted.iter().cloned().map(Arc::new).collect(),
            outcome: (!splice.claim && !splice.removed.is_empty())
                .then(|| String::from("canceled")),
        };
        self.append(now, data, None);
        self.inbox.apply(&splice);
        if !splice.claim {
            for message in splice.removed {
                self.emit(Output::Notify(Notification::Discarded { message }));
            }
        }
        for message in splice.inserted {
            self.emit(Output::Notify(Notification::Inserted { message }));
        }
    }

    /// The retained runtime-context snapshot (LC-12): the newest such
    /// message, unless a surface replacement shadowed it. New events are
    /// scanned once; the surface is checked once per proposed step.
    pub(super) fn retained_context(&mut self) -> RetainedContext {
        for e in self.session.events_from(self.scanned) {
            if let EventData::UserMessage(m) = e.data()
                && is_runtime_context_source(&m.source)
            {
                self.newest_context = Some((e.seq(), message_text(m)));
            }
        }
        self.scanned = self.session.len();
        match &self.newest_context {
            None => RetainedContext::Never,
            Some((seq, text)) if self.session.surface().nodes.contains(seq) => {
                RetainedContext::Retained {
                    seq: *seq,
                    text: text.clone(),
                }
            }
            Some(_) => RetainedContext::Shadowed,
        }
    }
}
