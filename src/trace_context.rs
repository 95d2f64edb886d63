//! W3C Trace Context as a job carries it: the caller's `traceparent` and,
//! beside it, its `tracestate` (the vendors' list of `key=value` members).
//! The one place that decides what is kept: a traceparent that is not W3C
//! trace context is dropped with its tracestate, and a tracestate that
//! breaks the rules is dropped alone (the W3C's advice: a receiver that
//! cannot parse it does not propagate it). Neither is ever an error.

/// The most list-members a tracestate holds (W3C Trace Context, §3.3.1).
const MAX_MEMBERS: usize = 32;
/// The longest tracestate kept, in characters (the length every vendor
/// must propagate; a longer one is dropped rather than cut).
const MAX_TRACESTATE: usize = 512;
/// The longest list-member key and value.
const MAX_KEY: usize = 256;
const MAX_VALUE: usize = 256;
/// The longest tenant id and system id of a multi-tenant key (`tenant@system`).
const MAX_TENANT: usize = 241;
const MAX_SYSTEM: usize = 14;

/// A caller's trace context, checked: a W3C `traceparent`, and the
/// `tracestate` that came with it when it was valid (in canonical form:
/// its members joined by `,`, without blanks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// The context of `traceparent` and the `tracestate` sent with it:
    /// `None` when the traceparent is not W3C trace context (its tracestate
    /// goes with it); a tracestate that breaks the rules is left out.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        if !valid_traceparent(traceparent) {
            tracing::debug!(%traceparent, "ignoring a traceparent that is not W3C trace context");
            return None;
        }
        let tracestate = tracestate.and_then(|state| {
            let canonical = canonical_tracestate(state);
            if canonical.is_none() {
                tracing::debug!(tracestate = %state, "ignoring a tracestate that is not W3C trace context");
            }
            canonical.filter(|members| !members.is_empty())
        });
        Some(Self {
            traceparent: traceparent.to_string(),
            tracestate,
        })
    }

    /// The context a stored job carries (its two columns), checked again
    /// so a row written by hand cannot reach the spans.
    pub fn stored(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        Self::parse(traceparent?, tracestate)
    }

    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// Whether `tp` is a W3C `traceparent` (version, a non-zero trace id and
/// span id, flags).
pub fn valid_traceparent(tp: &str) -> bool {
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1] != "0".repeat(32)
        && parts[2] != "0".repeat(16)
}

/// [`valid_traceparent`] as a regex (for the API document): two hex digits,
/// a trace id of 32 and a span id of 16 that are not all zeros, two more.
pub fn traceparent_pattern() -> String {
    // "Not all zeros" without a lookahead, which not every dialect has:
    // some zeros, then a non-zero digit, then any.
    let non_zero = |len: usize| {
        (0..len)
            .map(|zeros| {
                let rest = len - zeros - 1;
                format!("0{{{zeros}}}[1-9a-fA-F][0-9a-fA-F]{{{rest}}}")
            })
            .collect::<Vec<_>>()
            .join("|")
    };
    format!(
        "^[0-9a-fA-F]{{2}}-({})-({})-[0-9a-fA-F]{{2}}$",
        non_zero(32),
        non_zero(16)
    )
}

/// `state` as a W3C `tracestate` in canonical form (its members trimmed
/// and joined by `,`; empty when it has none), or `None` when it breaks a
/// rule: a member that is not `key=value`, a key used twice, more than 32
/// members, or more than 512 characters.
fn canonical_tracestate(state: &str) -> Option<String> {
    let members: Vec<&str> = state
        .split(',')
        .map(|member| member.trim_matches([' ', '\t']))
        .filter(|member| !member.is_empty())
        .collect();
    if members.len() > MAX_MEMBERS {
        return None;
    }
    let mut keys = Vec::with_capacity(members.len());
    for member in &members {
        let (key, value) = member.split_once('=')?;
        if !valid_key(key) || !valid_value(value) || keys.contains(&key) {
            return None;
        }
        keys.push(key);
    }
    let canonical = members.join(",");
    (canonical.len() <= MAX_TRACESTATE).then_some(canonical)
}

/// A list-member key: `simple-key` or `tenant-id@system-id`.
fn valid_key(key: &str) -> bool {
    let rest = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(&b))
    };
    let starts = |s: &str, digit_too: bool| {
        s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || (digit_too && b.is_ascii_digit()))
    };
    match key.split_once('@') {
        None => key.len() <= MAX_KEY && starts(key, false) && rest(key),
        Some((tenant, system)) => {
            tenant.len() <= MAX_TENANT
                && system.len() <= MAX_SYSTEM
                && starts(tenant, true)
                && starts(system, false)
                && rest(tenant)
                && rest(system)
        }
    }
}

/// A list-member value: 1 to 256 printable ASCII characters but `,` and
/// `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    value.len() <= MAX_VALUE
        && !value.is_empty()
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_traceparent_pattern_says_what_valid_traceparent_takes() {
        let pattern = regex::Regex::new(&traceparent_pattern()).unwrap();
        let zeros = format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32));
        let zero_span = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01", "0".repeat(16));
        let last_only = format!("00-{}1-{}1-01", "0".repeat(31), "0".repeat(15));
        for tp in [
            TP,
            &zeros,
            &zero_span,
            &last_only,
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
            "garbage",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(pattern.is_match(tp), valid_traceparent(tp), "{tp:?}");
        }
    }

    #[test]
    fn traceparents() {
        assert!(valid_traceparent(TP));
        assert!(!valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"
        ));
        assert!(!valid_traceparent(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ));
        assert!(!valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"
        ));
    }

    fn state(tracestate: &str) -> Option<String> {
        TraceContext::parse(TP, Some(tracestate)).and_then(|c| c.tracestate.clone())
    }

    #[test]
    fn a_valid_tracestate_is_kept_in_canonical_form() {
        assert_eq!(
            state("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE").as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        // Blanks around members and empty members are not part of it.
        assert_eq!(
            state(" rojo=1 ,\t, congo=2 ").as_deref(),
            Some("rojo=1,congo=2")
        );
        assert_eq!(
            state("tenant@vendor=a b,0tenant@v=x").as_deref(),
            Some("tenant@vendor=a b,0tenant@v=x")
        );
        let most: Vec<String> = (0..MAX_MEMBERS).map(|n| format!("k{n}=v")).collect();
        assert_eq!(state(&most.join(",")), Some(most.join(",")));
        assert_eq!(state(" , "), None, "nothing to keep");
    }

    #[test]
    fn a_tracestate_that_breaks_a_rule_is_dropped_alone() {
        for bad in [
            "novalue",
            "=v",
            "Upper=v",
            "0key=v",
            "k=",
            "k=a,b",
            "k=v=w",
            "k=tab\tin",
            "k=é",
            "a=1,a=2",
            "tenant@Vendor=v",
            "tenant@vendorvendorvend=v",
            "t@v@w=v",
        ] {
            let context = TraceContext::parse(TP, Some(bad));
            assert_eq!(
                context.as_ref().map(TraceContext::traceparent),
                Some(TP),
                "{bad:?} costs the traceparent nothing"
            );
            assert_eq!(context.and_then(|c| c.tracestate), None, "{bad:?}");
        }
        let too_many: Vec<String> = (0..=MAX_MEMBERS).map(|n| format!("k{n}=v")).collect();
        assert_eq!(state(&too_many.join(",")), None, "33 members");
        let long = format!("a={},b={}", "x".repeat(255), "y".repeat(255));
        assert!(long.len() > MAX_TRACESTATE);
        assert_eq!(state(&long), None, "more than 512 characters");
        assert_eq!(state(&format!("k={}", "v".repeat(257))), None);
    }

    #[test]
    fn a_tracestate_without_a_valid_traceparent_is_dropped() {
        assert_eq!(TraceContext::parse("garbage", Some("rojo=1")), None);
        assert_eq!(TraceContext::stored(None, Some("rojo=1")), None);
        let stored = TraceContext::stored(Some(TP), Some("rojo=1")).expect("a stored context");
        assert_eq!(
            (stored.traceparent(), stored.tracestate()),
            (TP, Some("rojo=1"))
        );
    }
}
