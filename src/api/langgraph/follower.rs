//! One run's job followed and told as LangGraph's stream: its stored
//! events, live tokens and progress (`follow`'s feed) through
//! `stream::Translator` (and its nested runs through `subgraphs`, when
//! asked), its steps read from its journal when an event tells one, its
//! end, its parks — where a run's stream ends, and a thread's goes on
//! (`through_parks`). The streamed routes (`stream_routes`), a thread's
//! stream (`thread_stream`) and its join (`thread_join`) each follow runs
//! with it.

use futures::StreamExt;
use tokio::sync::oneshot;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::error::ApiError;
use super::super::feed::{Feed, Item, Step as Batch, Stepper};
use super::super::job_actions::settled;
use super::ids;
use super::messages::{Step, Told, steps_of};
use super::runs::RunStatus;
use super::state;
use super::stream::{Ending, Frame, PER_EVENT, RunInfo, Translator};
use super::stream_modes::Modes;
use super::subgraphs::Subgraphs;
use crate::events::{Event, EventEnvelope, JobStatus};
use crate::journal::JournalEntry;
use crate::queue::{Job, JobId, JobState};

/// The frame of a run that runs again after its interrupt was answered
/// (only a follower that goes [`through parks`](Follower::through_parks)
/// makes it).
pub(super) const RESUMED: &str = "resumed";

/// Follows one run's job and tells it; cancels the run when dropped
/// before its end if the client asked so.
pub(super) struct Follower {
    state: AppState,
    pub(super) job: Job,
    feed: Feed,
    translator: Translator,
    /// The job's steps as last read from its journal.
    steps: Vec<Step>,
    opened: bool,
    last_seq: u64,
    cancel_on_drop: Option<JobId>,
    /// Held while this stream reads a job deleted once it has ended
    /// (`delete_when_ended` waits for its drop).
    pub(super) reading: Option<oneshot::Sender<()>>,
    /// Goes on past a park to the job's end (a thread's event stream),
    /// where a run's stream ends at its interrupt; and whether the job is
    /// parked as told.
    through_parks: bool,
    parked: bool,
    /// The job's nested runs, told when the client asked for subgraphs.
    subgraphs: Option<Subgraphs>,
}

impl Follower {
    /// Follows `job` for `caller`, after the thread's earlier messages.
    pub(super) async fn open(
        state: &AppState,
        caller: &Caller,
        job: Job,
        modes: Modes,
        after: Option<u64>,
        feed: Feed,
        cancel: bool,
    ) -> Result<Self, ApiError> {
        let prior = match &job.conversation_id {
            Some(thread) => state::messages_before(state, caller.name(), thread, &job.id).await?,
            None => Vec::new(),
        };
        Ok(Self::new(state, job, modes, after, feed, cancel, prior))
    }

    /// Follows `job`, whose thread's messages before it are `prior`.
    pub(super) fn new(
        state: &AppState,
        job: Job,
        modes: Modes,
        after: Option<u64>,
        feed: Feed,
        cancel: bool,
        prior: Vec<serde_json::Value>,
    ) -> Self {
        let run = RunInfo {
            job: job.id.to_string(),
            thread: job.conversation_id.clone(),
            graph: job.bundle.clone(),
            assistant: ids::assistant_id(&job.bundle),
            prior,
            namespace: Vec::new(),
        };
        Self {
            state: state.clone(),
            steps: steps_of(&job, &[]),
            cancel_on_drop: cancel.then(|| job.id.clone()),
            job,
            feed,
            translator: Translator::new(run, modes, after),
            opened: false,
            last_seq: 0,
            reading: None,
            through_parks: false,
            parked: false,
            subgraphs: None,
        }
    }

    /// This follower tells the job's nested runs too, when `on`, each in
    /// its subgraph's namespace (`subgraphs`).
    pub(super) fn with_subgraphs(mut self, on: bool) -> Self {
        self.subgraphs = on.then(|| {
            let (run, modes, after) = self.translator.settings();
            Subgraphs::new(run, modes.clone(), after)
        });
        self
    }

    /// The thread's messages after what this follower told: the next
    /// run's prior, once it told its run's end.
    pub(super) fn thread_messages(&self) -> Vec<serde_json::Value> {
        self.translator.thread_messages()
    }

    /// This follower goes on past a park: after its interrupt, a
    /// [`RESUMED`] frame when the job runs again, then the rest of the run.
    pub(super) fn through_parks(mut self) -> Self {
        self.through_parks = true;
        self
    }

    /// The run's first events: its metadata, and its input.
    fn opening(&mut self) -> Vec<Frame> {
        self.translator.at(0);
        let mut frames = vec![self.translator.opening(self.job.attempts)];
        if let Some(input) = self.steps.first() {
            frames.extend(self.translator.started(&input.message.clone()));
        }
        frames.extend(self.translator.steps(&self.steps, 1));
        frames
    }

    /// Reads the job's journal again: its steps as recorded so far.
    async fn read_steps(&mut self, job: Option<&Job>) {
        let job = job.unwrap_or(&self.job);
        if let Some(journal) = journal_of(&self.state, &job.id).await {
            self.steps = steps_of(job, &journal);
        }
    }

    /// Events of the steps up to the first `which` names, read again from
    /// the journal when it is not there yet.
    async fn steps_through(&mut self, which: impl Fn(&Step) -> bool) -> Vec<Frame> {
        let mut found = self.steps.iter().position(&which);
        if found.is_none() {
            self.read_steps(None).await;
            found = self.steps.iter().position(&which);
        }
        match found {
            Some(k) => self.translator.steps(&self.steps, k + 1),
            None => Vec::new(),
        }
    }

    /// A stored event of the job: what it tells, and whether the stream
    /// ends there (the run parked for a person).
    async fn stored(&mut self, seq: u64, json: &str) -> Batch<Frame> {
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(json) else {
            return Batch::More(Vec::new());
        };
        self.last_seq = seq;
        // The job's nested runs first: a nested run's end tells its own
        // rest before its parent's call's result (`Translator::at_event`).
        let mut frames = Vec::new();
        if let Some(subgraphs) = &mut self.subgraphs {
            let journal = match subgraphs.wants_journal(&envelope) {
                true => journal_of(&self.state, &self.job.id).await,
                false => None,
            };
            frames.extend(subgraphs.stored(seq, &envelope, journal.as_deref()));
            // Read once for this event: the job's own steps from it too.
            if let Some(journal) = journal {
                self.steps = steps_of(&self.job, &journal);
            }
        }
        self.translator.at_event(seq, &envelope);
        frames.extend(self.translator.stored(&envelope));
        // A reply is recorded with the events held before it (its
        // request's), a tool's result with its call's or, for an agent
        // call, with its nested run's end (`Told`): those events tell the
        // step; their answers' events, stored with the next durable write,
        // only if they did not.
        if let Some(told) = Told::of(&envelope, self.translator.run_id()) {
            frames.extend(self.steps_through(move |s| told.is(s)).await);
        }
        if envelope.parent.is_some() {
            return Batch::More(frames);
        }
        match &envelope.event {
            Event::JobState {
                state: JobStatus::AwaitingApproval | JobStatus::NeedsAttention,
                ..
            } => {
                if let Some(parked) = parked_now(&self.state, &self.job.id, seq).await {
                    self.read_steps(Some(&parked)).await;
                    let all = self.steps.len();
                    frames.extend(self.translator.steps(&self.steps, all));
                    frames.extend(self.translator.interrupted(parked.error.as_deref()));
                    if self.through_parks {
                        self.parked = true;
                        return Batch::More(frames);
                    }
                    frames.extend(self.translator.ended(Ending::Done));
                    return Batch::Last(frames);
                }
            }
            Event::JobState {
                state: JobStatus::Running,
                ..
            } if self.parked => {
                self.parked = false;
                // The last number this stored event has room for: the
                // translator numbers only a few events at one.
                frames.push(Frame::root(
                    RESUMED,
                    serde_json::Value::Null,
                    Some(seq.saturating_mul(PER_EVENT) + PER_EVENT - 1),
                ));
            }
            _ => {}
        }
        Batch::More(frames)
    }

    /// The job's end: the steps not told yet, then `error` or `end`.
    async fn ended(&mut self, job: Job) -> Vec<Frame> {
        crate::failpoint::reached(crate::failpoint::Failpoint::StreamEndRead).await;
        self.translator.at(self.last_seq + 1);
        self.read_steps(Some(&job)).await;
        let all = self.steps.len();
        let mut frames = self.translator.steps(&self.steps, all);
        let message = job.error.clone().unwrap_or_default();
        let ending = match RunStatus::of(&job) {
            RunStatus::Error | RunStatus::Timeout => Ending::Failed("JobFailed", &message),
            _ if job.state == JobState::Cancelled => Ending::Cancelled(match message.is_empty() {
                true => "the run was cancelled",
                false => &message,
            }),
            _ => Ending::Done,
        };
        frames.extend(self.translator.ended(ending));
        frames
    }
}

/// Job `id`'s journal, or none (logged) when the store cannot be read.
async fn journal_of(state: &AppState, id: &JobId) -> Option<Vec<JournalEntry>> {
    match state.queue.journal(id).await {
        Ok(journal) => Some(journal),
        Err(e) => {
            tracing::warn!(job_id = %id, error = %e, "a run's stream could not read its journal");
            None
        }
    }
}

/// Job `id`, when it is parked now at the park stored as `seq` (not at an
/// earlier one it has since left).
async fn parked_now(state: &AppState, id: &JobId, seq: u64) -> Option<Job> {
    let job = state.queue.get(id).await.ok().flatten()?;
    if !job.state.is_parked() {
        return None;
    }
    let later = state.queue.events_after(id, seq, 1).await.ok()?;
    later.is_empty().then_some(job)
}

impl Stepper for Follower {
    type Sent = Frame;

    async fn step(&mut self) -> Batch<Frame> {
        if !self.opened {
            self.opened = true;
            return Batch::More(self.opening());
        }
        loop {
            let Some(item) = self.feed.next().await else {
                // The store could not be read, or the key was revoked: not
                // the client's going; it may join again.
                self.cancel_on_drop = None;
                return Batch::Last(Vec::new());
            };
            let frames = match item {
                Item::Token(token) => match &mut self.subgraphs {
                    Some(subgraphs) if token.run_id != self.translator.run_id() => {
                        subgraphs.token(&token)
                    }
                    _ => self.translator.token(&token),
                },
                Item::Progress(progress) => match &mut self.subgraphs {
                    Some(subgraphs) if progress.run_id != self.translator.run_id() => {
                        subgraphs.progress(&progress)
                    }
                    _ => self.translator.progress(&progress),
                },
                Item::Event { seq, json } => match self.stored(seq, &json).await {
                    Batch::More(frames) => frames,
                    Batch::Last(frames) => {
                        self.cancel_on_drop = None;
                        return Batch::Last(frames);
                    }
                },
                Item::End(job) => {
                    self.cancel_on_drop = None;
                    return Batch::Last(self.ended(*job).await);
                }
            };
            if !frames.is_empty() {
                return Batch::More(frames);
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let Some(id) = self.cancel_on_drop.take() else {
            return;
        };
        let state = self.state.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                match state.queue.cancel(&id).await {
                    Ok(Some(changed)) => {
                        settled(&state, changed);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(job_id = %id, error = %e, "a run whose client went was not cancelled"),
                }
            });
        }
    }
}
