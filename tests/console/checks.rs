//! What every console view must pass, in every size and theme: no axe-core
//! violation of serious or critical impact (contrast included), no
//! sideways scrolling, tap targets of at least 44 px, and a screenshot
//! kept as an artifact. axe-core comes from npm into a cache outside the
//! clone (`./scripts/test` installs it; `SA_TEST_AXE` names the file); a
//! missing one is a failure that says so.

use std::path::PathBuf;

use serde_json::Value;

use super::browser::Browser;

/// The smallest tap target, in CSS pixels.
const TAP: f64 = 44.0;

fn axe_source() -> String {
    let path = std::env::var_os("SA_TEST_AXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/structured-agents/axe/node_modules/axe-core/axe.min.js")
        });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core is needed at {} ({e}); ./scripts/test installs it (npm install --prefix ~/.cache/structured-agents/axe axe-core@4)",
            path.display()
        )
    })
}

/// Runs every check on the view shown now and saves its screenshot as `name`.
pub async fn audit(browser: &Browser, name: &str) {
    browser.screenshot(name).await;
    let violations = axe(browser).await;
    assert_eq!(
        violations,
        Value::Array(vec![]),
        "{name}: axe-core found serious or critical violations:\n{violations:#}"
    );
    let wide = browser
        .client
        .execute(
            "const w = document.documentElement.clientWidth;
             if (document.documentElement.scrollWidth <= w) return [];
             return [...document.querySelectorAll('main *')]
               .filter((e) => e.getBoundingClientRect().right > w + 1)
               .slice(-5).map((e) => e.tagName + '.' + e.className + ': ' + Math.round(e.getBoundingClientRect().right) + ' > ' + w);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        wide,
        Value::Array(vec![]),
        "{name}: the page scrolls sideways"
    );
    let small = browser
        .client
        .execute(
            &format!(
                "return [...document.querySelectorAll('button, select, textarea, input:not([type=checkbox]), nav a, .chip, summary, td a, .crumbs a, .title-row > a')]
                   .filter((e) => e.offsetParent !== null && !e.closest('.visually-hidden'))
                   .map((e) => [e, e.getBoundingClientRect()])
                   .filter(([, r]) => r.width > 0 && (r.height < {TAP} - 0.5 || r.width < {TAP} - 0.5))
                   .map(([e, r]) => e.tagName + ' ' + (e.id || e.className) + ' ' + JSON.stringify(e.textContent.slice(0, 30)) + ': ' + Math.round(r.width) + 'x' + Math.round(r.height));"
            ),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        small,
        Value::Array(vec![]),
        "{name}: tap targets under {TAP} px"
    );
}

/// The serious and critical violations axe-core finds on the page.
async fn axe(browser: &Browser) -> Value {
    let loaded = browser
        .client
        .execute("return typeof window.axe === 'object'", vec![])
        .await
        .unwrap();
    if loaded != Value::Bool(true) {
        // WebDriver's scripts run outside the page's CSP.
        browser
            .client
            .execute(&format!("{}\nreturn true;", axe_source()), vec![])
            .await
            .unwrap();
    }
    browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             axe.run(document, { resultTypes: ['violations'] }).then((r) => done(
               r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => ({
                 id: v.id, impact: v.impact, help: v.help,
                 nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ') + ' — ' + n.failureSummary),
               }))
             )).catch((e) => done([{ id: 'axe-failed', help: String(e) }]));",
            vec![],
        )
        .await
        .unwrap()
}

/// Whether the page sees the dark colour scheme.
pub async fn is_dark(browser: &Browser) -> bool {
    browser
        .client
        .execute(
            "return matchMedia('(prefers-color-scheme: dark)').matches",
            vec![],
        )
        .await
        .unwrap()
        == Value::Bool(true)
}

/// How often `text` occurs in the text of `css`.
pub async fn occurrences(browser: &Browser, css: &str, text: &str) -> usize {
    browser.text_of(css).await.matches(text).count()
}
