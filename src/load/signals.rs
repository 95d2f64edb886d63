//! Reading a model server's load from its Prometheus text page.

use crate::config::LoadKind;

/// The load a server reports. A value not on its page is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    /// Requests queued but not started (vLLM waiting, llama.cpp deferred),
    /// summed over the page's series (one per model served).
    pub waiting: Option<f64>,
    /// KV-cache usage, 0 to 1, the highest of the page's series.
    pub kv_cache: Option<f64>,
}

const VLLM_WAITING: &str = "vllm:num_requests_waiting";
/// vLLM's name since 0.10, then the older one.
const VLLM_KV_CACHE: [&str; 2] = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"];
const LLAMACPP_DEFERRED: &str = "llamacpp:requests_deferred";

/// Why a load page could not be read, or said nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(
        "the page has no `{wanted}` sample (is it the server's Prometheus /metrics page, and of a {kind:?} server?)"
    )]
    NoSample {
        wanted: &'static str,
        kind: LoadKind,
    },
    #[error("{0}")]
    Request(String),
    #[error("HTTP {0}")]
    Status(reqwest::StatusCode),
    #[error("the page is larger than {0} bytes (raise load.max_page_bytes)")]
    TooLarge(usize),
    #[error("the page is not UTF-8 text")]
    NotText,
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
}

/// The signals of a `kind` page, or why the page says nothing usable.
pub fn parse(kind: LoadKind, page: &str) -> Result<Signals, PageError> {
    let mut signals = Signals::default();
    for line in page.lines() {
        let Some((name, value)) = sample(line) else {
            continue;
        };
        match kind {
            LoadKind::Vllm if name == VLLM_WAITING => add(&mut signals.waiting, value),
            LoadKind::Vllm if VLLM_KV_CACHE.contains(&name) => {
                signals.kv_cache = Some(signals.kv_cache.map_or(value, |v: f64| v.max(value)));
            }
            LoadKind::Llamacpp if name == LLAMACPP_DEFERRED => add(&mut signals.waiting, value),
            _ => {}
        }
    }
    if signals.waiting.is_none() && signals.kv_cache.is_none() {
        let wanted = match kind {
            LoadKind::Vllm => VLLM_WAITING,
            LoadKind::Llamacpp => LLAMACPP_DEFERRED,
            LoadKind::Fixed => "nothing",
        };
        return Err(PageError::NoSample { wanted, kind });
    }
    Ok(signals)
}

fn add(total: &mut Option<f64>, value: f64) {
    *total = Some(total.unwrap_or(0.0) + value);
}

/// A sample line's metric name and value (`name{labels} value [timestamp]`);
/// comments, blank lines and values that are not finite numbers are skipped.
fn sample(line: &str) -> Option<(&str, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find('{') {
        Some(open) => {
            let close = line[open..].find('}')? + open;
            (&line[..open], &line[close + 1..])
        }
        None => line.split_once(char::is_whitespace)?,
    };
    let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
    value.is_finite().then_some((name.trim(), value))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn vllm_pages_sum_waiting_and_keep_the_highest_kv_cache() {
        let page = "# HELP vllm:num_requests_waiting Number of requests waiting.\n\
            # TYPE vllm:num_requests_waiting gauge\n\
            vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} 3.0\n\
            vllm:num_requests_waiting{engine=\"0\",model_name=\"b\"} 2.0\n\
            vllm:num_requests_running{model_name=\"a\"} 8.0\n\
            vllm:kv_cache_usage_perc{model_name=\"a\"} 0.5\n\
            vllm:kv_cache_usage_perc{model_name=\"b\"} 0.75 1712345678\n";
        assert_eq!(
            parse(LoadKind::Vllm, page).unwrap(),
            Signals {
                waiting: Some(5.0),
                kv_cache: Some(0.75)
            }
        );
    }

    #[test]
    fn llamacpp_pages_read_deferred_requests() {
        let page = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 7\n";
        assert_eq!(parse(LoadKind::Llamacpp, page).unwrap().waiting, Some(7.0));
    }

    #[test]
    fn pages_without_the_signals_or_with_garbage_are_errors_not_zero() {
        for page in [
            "",
            "<html>not found</html>",
            "vllm:num_requests_waiting NaN\n",
            "vllm:num_requests_waiting{broken 3\n",
        ] {
            let err = parse(LoadKind::Vllm, page).unwrap_err().to_string();
            assert!(err.contains("vllm:num_requests_waiting"), "{page:?}: {err}");
        }
        assert!(parse(LoadKind::Llamacpp, "vllm:num_requests_waiting 1\n").is_err());
    }
}
