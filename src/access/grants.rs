//! What a key may do, action by action, as the one authorization policy
//! decides it: [`grants`] asks [`policy::authorize`] about every action of
//! the policy's list, on the key's own objects and on another key's, and
//! for what it may not do, which scopes added to the key's would let it —
//! asked of the policy too, with those scopes. A client (the console) can
//! so tell which of its buttons the key may press, and why not, without a
//! copy of the scope rules.

use super::policy::{self, Action, Resource};
use super::{Principal, Scope};

/// One action as the policy answers it for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub action: Action,
    /// The scope the action needs at all.
    pub scope: Scope,
    /// May the key do it on its own objects (and on the daemon's, a
    /// bundle's: objects of no key need only the scope)?
    pub own: bool,
    /// The fewest scopes that, added to the key's, would let it (empty when
    /// it may).
    pub own_needs: Vec<Scope>,
    /// The scope that extends it to other keys' objects.
    pub others_scope: Scope,
    /// May the key do it on another key's objects?
    pub others: bool,
    pub others_needs: Vec<Scope>,
}

/// Every action of the policy, in its order, with what `who` may do.
/// Bundle globs are not asked here: a key sees only its bundles' objects.
pub fn grants(who: &Principal) -> Vec<Grant> {
    let own = Resource::owned("object", Some(who.name.as_str()), None);
    // An object no key has as its own answers as another key's does.
    let others = Resource::owned("object", None, None);
    Action::ALL
        .into_iter()
        .map(|action| {
            let own_needs = needs(who, action, &own);
            let others_needs = needs(who, action, &others);
            Grant {
                action,
                scope: action.scope(),
                own: own_needs.is_empty(),
                own_needs,
                others_scope: action.scope_for_others(),
                others: others_needs.is_empty(),
                others_needs,
            }
        })
        .collect()
}

/// The fewest scopes `who` lacks for `action` on `resource`: none when the
/// policy allows it; else the first single scope, then pair of scopes,
/// with which it would (in `Scope::ALL`'s order), else `admin`.
fn needs(who: &Principal, action: Action, resource: &Resource) -> Vec<Scope> {
    if policy::authorize(who, action, resource).is_ok() {
        return Vec::new();
    }
    let candidates: Vec<Scope> = Scope::ALL
        .into_iter()
        .filter(|s| *s != Scope::Admin && !who.scopes.contains(s))
        .collect();
    let allows = |added: &[Scope]| {
        let mut with = Principal::unrestricted(&who.name);
        with.scopes = who.scopes.iter().chain(added).copied().collect();
        policy::authorize(&with, action, resource).is_ok()
    };
    if let Some(one) = candidates.iter().find(|s| allows(&[**s])) {
        return vec![*one];
    }
    for (i, first) in candidates.iter().enumerate() {
        if let Some(second) = candidates[i + 1..].iter().find(|s| allows(&[*first, **s])) {
            return vec![*first, *second];
        }
    }
    vec![Scope::Admin]
}

#[cfg(test)]
mod tests {
    use super::super::file::test_key as key;
    use super::*;

    fn grant(who: &Principal, action: Action) -> Grant {
        grants(who)
            .into_iter()
            .find(|g| g.action == action)
            .expect("every action is granted or not")
    }

    #[test]
    fn a_reader_of_all_may_read_every_job_and_is_told_what_changing_one_needs() {
        let auditor = key("auditor", &[Scope::ReadAll], None);
        let read = grant(&auditor, Action::ReadJob);
        assert!(read.own && read.others && read.others_needs.is_empty());
        let cancel = grant(&auditor, Action::CancelJob);
        assert!(!cancel.own && !cancel.others);
        assert_eq!(cancel.own_needs, [Scope::Operate]);
        // `operate_all` alone would do: it includes `operate`.
        assert_eq!(cancel.others_needs, [Scope::OperateAll]);
        let decide = grant(&auditor, Action::DecideApproval);
        assert_eq!(decide.own_needs, [Scope::Approve]);
        assert_eq!(decide.others_needs, [Scope::OperateAll, Scope::Approve]);
        assert_eq!(grant(&auditor, Action::Reload).own_needs, [Scope::Operate]);
        assert_eq!(grants(&auditor).len(), Action::ALL.len());
    }

    #[test]
    fn an_operator_of_its_own_jobs_needs_operate_all_for_others() {
        let team = key("team", &[Scope::Operate, Scope::Approve], None);
        let cancel = grant(&team, Action::CancelJob);
        assert!(cancel.own && !cancel.others);
        assert_eq!(cancel.others_scope, Scope::OperateAll);
        assert_eq!(cancel.others_needs, [Scope::OperateAll]);
        assert!(grant(&team, Action::Reload).own);
        let admin = key("root", &[Scope::Admin], None);
        assert!(grants(&admin).iter().all(|g| g.own && g.others));
    }
}
