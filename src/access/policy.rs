//! Who may do what, decided once: [`authorize`]`(principal, action,
//! resource)`. Every operation on every wire names one [`Action`] (a closed
//! list: a new operation cannot be added without saying what it is) and the
//! [`Resource`] it acts on — its kind, its owner and its bundle — and asks
//! here; so does every *indirect* reach of a running job (a router's
//! directory, a nested `agent` tool, a group-chat member, a workflow stage),
//! as the key that owns the job ([`Reach`]).
//!
//! The rules, in the order they are applied:
//!
//! 1. The key needs the action's scope ([`Action::scope`]); without it the
//!    answer is a 403 naming the scope ([`Refusal::Scope`]).
//! 2. A resource that belongs to a key (a job, a conversation, a schedule,
//!    a delivery, a push config) is the key's own, or another key's. Another
//!    key's needs the action's *all* scope ([`Action::scope_for_others`]):
//!    without it the object is [`Refusal::Unknown`] — the very answer an
//!    unknown id gets — unless the key may read it, in which case changing
//!    it is a 403 ([`Refusal::Foreign`]). An object without an owner (from
//!    before keys, or the daemon's own, such as a bundle's schedule) is
//!    nobody's own.
//! 3. A resource of a bundle outside the key's `bundles` globs does not
//!    exist for the key: an object of it is [`Refusal::Unknown`], a request
//!    that names the bundle is [`Refusal::Bundle`] (the 422 an unknown
//!    bundle gets).
//!
//! docs/security.md has the table of every action; `tests/policy.rs` drives
//! it through the HTTP API. This module knows nothing of HTTP: the API
//! turns a refusal into its answer.

use std::sync::Arc;

use super::{Principal, Scope};

/// Everything a key can ask of the daemon, and every way a running job
/// reaches further. Closed: a route or feature declares one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Start a job on a bundle, on any wire (submit, batch, chat
    /// completions, Responses, AG-UI, A2A, MCP, the runtime API).
    SubmitJob,
    /// Run a job again as a new job of the caller.
    RerunJob,
    /// Start a new job from another's journal.
    ForkJob,
    /// Run one of a bundle's tools directly, outside a job.
    RunTool,
    /// Read a job: its state, journal, events, artifacts, approvals, its
    /// A2A push configs.
    ReadJob,
    /// List jobs or count them.
    ListJobs,
    /// Follow a job on the wire that started it (an MCP task's status and
    /// answer): part of submitting it.
    FollowJob,
    /// Cancel a job.
    CancelJob,
    /// Delete a job that has ended, with its events and journal.
    DeleteJob,
    /// Resolve a job that needs attention.
    ResolveJob,
    /// Approve, edit or deny a parked tool call.
    DecideApproval,
    /// Create, replace or delete a job's A2A push notification config.
    WritePushConfig,
    /// Read a conversation's turns.
    ReadConversation,
    /// Make a conversation (a LangGraph thread) before its first turn, or
    /// change its metadata.
    WriteConversation,
    /// Delete a conversation's turns.
    DeleteConversation,
    /// Read the key's items of LangGraph's store: get, search, list
    /// namespaces.
    ReadStore,
    /// Put or delete the key's items of LangGraph's store.
    WriteStore,
    /// List bundles, read one, its card, its prompts, the agent directory.
    ReadBundle,
    /// Make, change or delete the key's own custom assistants (LangGraph's
    /// assistants over a bundle, with variables set).
    WriteAssistant,
    /// Move a bundle's waiting jobs to its current version.
    MigrateJobs,
    /// Run a bundle's crash matrix.
    VerifyBundle,
    /// Promote or reject a version the release gate holds.
    ReleaseBundle,
    /// Create a schedule.
    CreateSchedule,
    /// Read or list schedules.
    ReadSchedule,
    /// Pause, resume or delete a schedule.
    ManageSchedule,
    /// Fire a schedule now.
    RunSchedule,
    /// List webhook deliveries.
    ReadDeliveries,
    /// Send a dead delivery again.
    RedriveDelivery,
    /// Reload the daemon's inputs.
    Reload,
    /// List, make and revoke API keys (the keys file).
    ManageKeys,
    /// A running job reaches a bundle indirectly (a router's directory, a
    /// nested `agent` tool, a group-chat member, a workflow stage), as the
    /// key that owns the job.
    ReachBundle,
}

/// Whether an action reads, starts or changes what it acts on: decides
/// which "all" scope extends it to other keys' objects, and whether a
/// readable object of another key is a 403 rather than a 404.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Start,
    Change,
}

impl Action {
    /// Every action, in the order docs/security.md lists them.
    pub const ALL: [Action; 31] = [
        Action::SubmitJob,
        Action::RerunJob,
        Action::ForkJob,
        Action::RunTool,
        Action::ReadJob,
        Action::ListJobs,
        Action::FollowJob,
        Action::CancelJob,
        Action::DeleteJob,
        Action::ResolveJob,
        Action::DecideApproval,
        Action::WritePushConfig,
        Action::ReadConversation,
        Action::WriteConversation,
        Action::DeleteConversation,
        Action::ReadStore,
        Action::WriteStore,
        Action::ReadBundle,
        Action::WriteAssistant,
        Action::MigrateJobs,
        Action::VerifyBundle,
        Action::ReleaseBundle,
        Action::CreateSchedule,
        Action::ReadSchedule,
        Action::ManageSchedule,
        Action::RunSchedule,
        Action::ReadDeliveries,
        Action::RedriveDelivery,
        Action::Reload,
        Action::ManageKeys,
        Action::ReachBundle,
    ];

    /// The name docs, logs and refusals use.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::SubmitJob => "submit_job",
            Action::RerunJob => "rerun_job",
            Action::ForkJob => "fork_job",
            Action::RunTool => "run_tool",
            Action::ReadJob => "read_job",
            Action::ListJobs => "list_jobs",
            Action::FollowJob => "follow_job",
            Action::CancelJob => "cancel_job",
            Action::DeleteJob => "delete_job",
            Action::ResolveJob => "resolve_job",
            Action::DecideApproval => "decide_approval",
            Action::WritePushConfig => "write_push_config",
            Action::ReadConversation => "read_conversation",
            Action::WriteConversation => "write_conversation",
            Action::DeleteConversation => "delete_conversation",
            Action::ReadStore => "read_store",
            Action::WriteStore => "write_store",
            Action::ReadBundle => "read_bundle",
            Action::WriteAssistant => "write_assistant",
            Action::MigrateJobs => "migrate_jobs",
            Action::VerifyBundle => "verify_bundle",
            Action::ReleaseBundle => "release_bundle",
            Action::CreateSchedule => "create_schedule",
            Action::ReadSchedule => "read_schedule",
            Action::ManageSchedule => "manage_schedule",
            Action::RunSchedule => "run_schedule",
            Action::ReadDeliveries => "read_deliveries",
            Action::RedriveDelivery => "redrive_delivery",
            Action::Reload => "reload",
            Action::ManageKeys => "manage_keys",
            Action::ReachBundle => "reach_bundle",
        }
    }

    /// The scope a key needs to ask for this at all.
    pub fn scope(self) -> Scope {
        match self {
            Action::SubmitJob
            | Action::RerunJob
            | Action::ForkJob
            | Action::RunTool
            | Action::CreateSchedule
            | Action::RunSchedule
            | Action::FollowJob
            | Action::ReachBundle
            // Making one's own conversation, forgetting it, or one's own
            // job once it has ended, is part of having it.
            | Action::WriteConversation
            | Action::DeleteConversation
            // A key's memory is written by the agents it runs: part of
            // running them.
            | Action::WriteStore
            // A custom assistant is a run's settings kept under a name.
            | Action::WriteAssistant
            | Action::DeleteJob => Scope::Submit,
            Action::ReadJob
            | Action::ListJobs
            | Action::ReadConversation
            | Action::ReadStore
            | Action::ReadBundle
            | Action::ReadSchedule
            // A client that follows its own task sets where it is pushed.
            | Action::WritePushConfig => Scope::Read,
            Action::CancelJob
            | Action::ResolveJob
            | Action::MigrateJobs
            | Action::VerifyBundle
            | Action::ReleaseBundle
            | Action::ManageSchedule
            | Action::ReadDeliveries
            | Action::RedriveDelivery
            | Action::Reload => Scope::Operate,
            Action::DecideApproval => Scope::Approve,
            // A key that makes keys could make itself any: only `admin`.
            Action::ManageKeys => Scope::Admin,
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Action::ReadJob
            | Action::ListJobs
            | Action::ReadConversation
            | Action::ReadStore
            | Action::ReadBundle
            | Action::ReadSchedule => Kind::Read,
            // A rerun or fork reads its source; the new job is a submit.
            Action::RerunJob | Action::ForkJob | Action::FollowJob => Kind::Read,
            Action::SubmitJob
            | Action::RunTool
            | Action::CreateSchedule
            | Action::ReachBundle
            | Action::VerifyBundle => Kind::Start,
            Action::CancelJob
            | Action::ResolveJob
            | Action::DecideApproval
            | Action::WritePushConfig
            | Action::WriteConversation
            | Action::DeleteConversation
            | Action::WriteStore
            | Action::WriteAssistant
            | Action::DeleteJob
            | Action::MigrateJobs
            | Action::ReleaseBundle
            | Action::ManageSchedule
            | Action::RunSchedule
            // Deliveries carry the receivers' answers: another key's are
            // an operator's (`operate_all`) to see.
            | Action::ReadDeliveries
            | Action::RedriveDelivery
            | Action::Reload
            | Action::ManageKeys => Kind::Change,
        }
    }

    /// The scope that extends the action to other keys' objects:
    /// `read_all` to read them, `operate_all` to change them.
    pub fn scope_for_others(self) -> Scope {
        match self.kind() {
            Kind::Read => Scope::ReadAll,
            Kind::Start | Kind::Change => Scope::OperateAll,
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who an object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    /// Not an object of a key: the daemon, a bundle, a route.
    Nobody,
    /// Owned, by this key (`None`: from before keys, or the daemon's own,
    /// which no key has as its own).
    Key(Option<&'a str>),
}

/// What an action acts on: its kind (for the refusal's words), its owner
/// and its bundle.
#[derive(Debug, Clone, Copy)]
pub struct Resource<'a> {
    /// "job", "conversation", "schedule", "bundle", …
    pub kind: &'static str,
    pub owner: Owner<'a>,
    pub bundle: Option<&'a str>,
}

impl<'a> Resource<'a> {
    /// The daemon itself (a reload, a listing): only the scope counts.
    pub fn daemon() -> Self {
        Self {
            kind: "daemon",
            owner: Owner::Nobody,
            bundle: None,
        }
    }

    /// A request that names a bundle (a submit, a verify, a migration).
    pub fn bundle(name: &'a str) -> Self {
        Self {
            kind: "bundle",
            owner: Owner::Nobody,
            bundle: Some(name),
        }
    }

    /// An object of a key (a job, a conversation, a schedule, …), of
    /// `bundle` when it has one.
    pub fn owned(kind: &'static str, owner: Option<&'a str>, bundle: Option<&'a str>) -> Self {
        Self {
            kind,
            owner: Owner::Key(owner),
            bundle,
        }
    }
}

/// Why a key may not do something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "API key {key:?} lacks the `{needs}` scope this request needs (it has: {has}); ask the operator for a key with it"
    )]
    Scope {
        key: String,
        needs: Scope,
        has: String,
    },
    /// The object does not exist for this key: answered exactly as an
    /// unknown id is, so a key learns nothing of other keys' objects.
    #[error("no such {kind}")]
    Unknown { kind: &'static str },
    #[error(
        "this {kind} belongs to another API key; only its own key or one with `{needs}` may change it"
    )]
    Foreign { kind: &'static str, needs: Scope },
    #[error(
        "API key {key:?} may not use bundle {bundle:?} (its bundles: {patterns}); ask the operator to add it to the key's `bundles`"
    )]
    Bundle {
        key: String,
        bundle: String,
        patterns: String,
    },
}

/// Whether `who` may do `action` on `resource` (the rules in the module's
/// header).
pub fn authorize(who: &Principal, action: Action, resource: &Resource) -> Result<(), Refusal> {
    let needs = action.scope();
    if !who.can(needs) {
        return Err(Refusal::Scope {
            key: who.name.clone(),
            needs,
            has: who
                .scopes()
                .map(Scope::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let bundle_hidden = resource.bundle.is_some_and(|b| !who.may_use(b));
    match resource.owner {
        Owner::Nobody if bundle_hidden => Err(Refusal::Bundle {
            key: who.name.clone(),
            bundle: resource.bundle.unwrap_or_default().to_string(),
            patterns: who
                .bundle_patterns
                .as_deref()
                .unwrap_or_default()
                .join(", "),
        }),
        Owner::Nobody => Ok(()),
        Owner::Key(_) if bundle_hidden => Err(Refusal::Unknown {
            kind: resource.kind,
        }),
        Owner::Key(owner) => {
            let own = owner == Some(who.name.as_str());
            let others = action.scope_for_others();
            if own || who.can(others) {
                return Ok(());
            }
            // A key that may read the object is told why it may not
            // change it; any other key is told nothing.
            if action.kind() != Kind::Read && who.can(Scope::ReadAll) {
                return Err(Refusal::Foreign {
                    kind: resource.kind,
                    needs: others,
                });
            }
            Err(Refusal::Unknown {
                kind: resource.kind,
            })
        }
    }
}

/// The bundles a running job may reach indirectly: those the key that owns
/// it may use, as the key ring has it when the job runs (a key revoked
/// since reaches nothing). Carried by the job's runs into every nested run.
#[derive(Debug, Clone)]
pub enum Reach {
    /// Jobs of the daemon itself (a bundle's schedule, `run`, tests) and of
    /// an open key ring.
    Everything,
    /// Jobs of a key.
    Key(Arc<Principal>),
    /// Jobs of a key no longer in the ring.
    Revoked(String),
}

impl Reach {
    /// May the job reach `bundle`? A refusal names the rule, for the tool
    /// error the model and the operator read.
    pub fn check(&self, bundle: &str) -> Result<(), ReachRefused> {
        let key = match self {
            Reach::Everything => return Ok(()),
            Reach::Revoked(name) => {
                return Err(ReachRefused {
                    bundle: bundle.to_string(),
                    why: format!(
                        "the API key {name:?} that owns this job is no longer in the keys file"
                    ),
                });
            }
            Reach::Key(key) => key,
        };
        authorize(key, Action::ReachBundle, &Resource::bundle(bundle)).map_err(|refusal| {
            ReachRefused {
                bundle: bundle.to_string(),
                why: refusal.to_string(),
            }
        })
    }

    /// Whether `bundle` is reachable (for listings such as the router's
    /// directory, which show only what the job may reach).
    pub fn reaches(&self, bundle: &str) -> bool {
        self.check(bundle).is_ok()
    }

    /// What the reach is keyed by in caches of per-key views.
    pub fn key_name(&self) -> Option<&str> {
        match self {
            Reach::Everything => None,
            Reach::Key(key) => Some(&key.name),
            Reach::Revoked(name) => Some(name),
        }
    }
}

/// A job's indirect reach refused by the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bundle {bundle:?} may not be reached from this job: {why} (the authorization policy's `reach_bundle` rule: a job reaches only the bundles the key that submitted it may use)"
)]
pub struct ReachRefused {
    pub bundle: String,
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::super::file::test_key as key;
    use super::*;

    #[test]
    fn every_action_is_listed_once_with_a_distinct_name() {
        let names: std::collections::BTreeSet<_> = Action::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(names.len(), Action::ALL.len());
    }

    #[test]
    fn a_missing_scope_is_refused_by_name_before_anything_else() {
        let submitter = key("s", &[Scope::Submit], None);
        for action in Action::ALL {
            let verdict = authorize(&submitter, action, &Resource::daemon());
            match action.scope() {
                Scope::Submit => assert!(verdict.is_ok(), "{action}"),
                needs => assert_eq!(
                    verdict.unwrap_err(),
                    Refusal::Scope {
                        key: "s".into(),
                        needs,
                        has: "submit".into()
                    },
                    "{action}"
                ),
            }
        }
    }

    #[test]
    fn another_keys_object_is_unknown_unless_an_all_scope_extends_the_action() {
        let alice = key("alice", &[Scope::Submit, Scope::Read, Scope::Operate], None);
        let bobs = Resource::owned("job", Some("bob"), Some("refunds"));
        let own = Resource::owned("job", Some("alice"), Some("refunds"));
        let legacy = Resource::owned("job", None, Some("refunds"));
        for action in [Action::ReadJob, Action::CancelJob, Action::MigrateJobs] {
            assert!(authorize(&alice, action, &own).is_ok(), "{action}");
            for other in [&bobs, &legacy] {
                assert_eq!(
                    authorize(&alice, action, other).unwrap_err(),
                    Refusal::Unknown { kind: "job" },
                    "{action}"
                );
            }
        }
        let reader = key("r", &[Scope::ReadAll, Scope::Operate], None);
        assert!(authorize(&reader, Action::ReadJob, &bobs).is_ok());
        assert_eq!(
            authorize(&reader, Action::WritePushConfig, &bobs).unwrap_err(),
            Refusal::Foreign {
                kind: "job",
                needs: Scope::OperateAll
            },
            "read_all reads another key's job but never rewrites its push config"
        );
        let operator = key("o", &[Scope::Read, Scope::OperateAll], None);
        assert!(authorize(&operator, Action::MigrateJobs, &bobs).is_ok());
        assert_eq!(
            authorize(&operator, Action::ReadJob, &bobs).unwrap_err(),
            Refusal::Unknown { kind: "job" }
        );
    }

    #[test]
    fn a_bundle_outside_the_globs_does_not_exist_for_the_key() {
        let alice = key(
            "alice",
            &[Scope::Submit, Scope::ReadAll],
            Some(&["pub-*", "router"]),
        );
        assert!(authorize(&alice, Action::SubmitJob, &Resource::bundle("pub-a")).is_ok());
        let refused = authorize(&alice, Action::SubmitJob, &Resource::bundle("secret"));
        assert!(
            matches!(&refused, Err(Refusal::Bundle { bundle, patterns, .. }) if bundle == "secret" && patterns == "pub-*, router"),
            "{refused:?}"
        );
        let bobs_secret = Resource::owned("job", Some("bob"), Some("secret"));
        assert_eq!(
            authorize(&alice, Action::ReadJob, &bobs_secret).unwrap_err(),
            Refusal::Unknown { kind: "job" }
        );
    }

    #[test]
    fn a_jobs_reach_is_its_owners_bundles() {
        let alice = Arc::new(key("alice", &[Scope::Submit], Some(&["pub-*", "router"])));
        let reach = Reach::Key(alice);
        assert!(reach.check("pub-x").is_ok());
        let refused = reach.check("secret").unwrap_err().to_string();
        assert!(
            refused.contains("\"secret\"")
                && refused.contains("reach_bundle")
                && refused.contains("pub-*, router"),
            "{refused}"
        );
        assert!(Reach::Everything.reaches("secret"));
        let gone = Reach::Revoked("bob".into()).check("pub-x").unwrap_err();
        assert!(
            gone.to_string().contains("no longer in the keys file"),
            "{gone}"
        );
        let no_submit = Reach::Key(Arc::new(key("r", &[Scope::Read], None)));
        assert!(!no_submit.reaches("pub-x"));
    }
}
