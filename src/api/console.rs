//! The console: an operator's page served by the daemon at `/ui`. Every
//! view is a URL (`/ui/jobs/{id}`, `/ui/bundles`, …) answered with the same
//! app shell; the shell's scripts (plain ES modules, no build step) and
//! stylesheet are embedded in the binary and served under `/ui/assets/`.
//!
//! The page reads and drives the daemon only through the public API, with
//! the bearer token in `Authorization` like any client, so it adds no
//! authority of its own: the shell and assets reveal nothing and need no
//! token, and the front door (`guard`) applies to them as to every route.
//! A strict Content-Security-Policy (only `'self'`, no inline script or
//! style, no framing) keeps injected text from ever running.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::body::Path;
use super::error::{ApiError, ErrorCode};

/// One embedded file of the console.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file under `/ui/assets/`, by its path there.
const ASSETS: &[Asset] = &[
    Asset {
        path: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("console/app.css"),
    },
    Asset {
        path: "app.js",
        content_type: JS,
        body: include_str!("console/app.js"),
    },
    Asset {
        path: "api.js",
        content_type: JS,
        body: include_str!("console/api.js"),
    },
    Asset {
        path: "dom.js",
        content_type: JS,
        body: include_str!("console/dom.js"),
    },
    Asset {
        path: "session.js",
        content_type: JS,
        body: include_str!("console/session.js"),
    },
    Asset {
        path: "views/jobs.js",
        content_type: JS,
        body: include_str!("console/views/jobs.js"),
    },
    Asset {
        path: "views/jobfeed.js",
        content_type: JS,
        body: include_str!("console/views/jobfeed.js"),
    },
    Asset {
        path: "views/bulk.js",
        content_type: JS,
        body: include_str!("console/views/bulk.js"),
    },
    Asset {
        path: "views/job.js",
        content_type: JS,
        body: include_str!("console/views/job.js"),
    },
    Asset {
        path: "views/timeline.js",
        content_type: JS,
        body: include_str!("console/views/timeline.js"),
    },
    Asset {
        path: "views/waterfall.js",
        content_type: JS,
        body: include_str!("console/views/waterfall.js"),
    },
    Asset {
        path: "views/actions.js",
        content_type: JS,
        body: include_str!("console/views/actions.js"),
    },
    Asset {
        path: "views/submit.js",
        content_type: JS,
        body: include_str!("console/views/submit.js"),
    },
    Asset {
        path: "views/bundles.js",
        content_type: JS,
        body: include_str!("console/views/bundles.js"),
    },
    Asset {
        path: "views/migrate.js",
        content_type: JS,
        body: include_str!("console/views/migrate.js"),
    },
    Asset {
        path: "views/verify.js",
        content_type: JS,
        body: include_str!("console/views/verify.js"),
    },
    Asset {
        path: "views/evals.js",
        content_type: JS,
        body: include_str!("console/views/evals.js"),
    },
    Asset {
        path: "views/evalreport.js",
        content_type: JS,
        body: include_str!("console/views/evalreport.js"),
    },
    Asset {
        path: "views/release.js",
        content_type: JS,
        body: include_str!("console/views/release.js"),
    },
    Asset {
        path: "views/token.js",
        content_type: JS,
        body: include_str!("console/views/token.js"),
    },
    Asset {
        path: "views/approval.js",
        content_type: JS,
        body: include_str!("console/views/approval.js"),
    },
    Asset {
        path: "views/approvals.js",
        content_type: JS,
        body: include_str!("console/views/approvals.js"),
    },
    Asset {
        path: "views/keys.js",
        content_type: JS,
        body: include_str!("console/views/keys.js"),
    },
    Asset {
        path: "views/scheduleform.js",
        content_type: JS,
        body: include_str!("console/views/scheduleform.js"),
    },
    Asset {
        path: "views/schedules.js",
        content_type: JS,
        body: include_str!("console/views/schedules.js"),
    },
    Asset {
        path: "views/deliveries.js",
        content_type: JS,
        body: include_str!("console/views/deliveries.js"),
    },
    Asset {
        path: "views/attempts.js",
        content_type: JS,
        body: include_str!("console/views/attempts.js"),
    },
    Asset {
        path: "views/header.js",
        content_type: JS,
        body: include_str!("console/views/header.js"),
    },
    Asset {
        path: "views/journal.js",
        content_type: JS,
        body: include_str!("console/views/journal.js"),
    },
    Asset {
        path: "views/prompt.js",
        content_type: JS,
        body: include_str!("console/views/prompt.js"),
    },
    Asset {
        path: "views/live.js",
        content_type: JS,
        body: include_str!("console/views/live.js"),
    },
    Asset {
        path: "views/pending.js",
        content_type: JS,
        body: include_str!("console/views/pending.js"),
    },
    Asset {
        path: "views/schemaform.js",
        content_type: JS,
        body: include_str!("console/views/schemaform.js"),
    },
    Asset {
        path: "views/transcript.js",
        content_type: JS,
        body: include_str!("console/views/transcript.js"),
    },
    Asset {
        path: "views/workflow.js",
        content_type: JS,
        body: include_str!("console/views/workflow.js"),
    },
    Asset {
        path: "icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("console/icon.svg"),
    },
];

/// Only the daemon's own scripts, styles and API; never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `/ui`, `/ui/` and every path below it.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(shell))
        .route("/ui/", get(shell))
        .route("/ui/{*path}", get(file))
}

/// The app shell: the views are drawn by its script from the URL.
async fn shell() -> Response {
    respond(
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    )
}

/// An asset under `/ui/assets/`, or the shell for a view's URL.
async fn file(Path(path): Path<String>) -> Response {
    let Some(name) = path.strip_prefix("assets/") else {
        return shell().await;
    };
    match ASSETS.iter().find(|a| a.path == name) {
        Some(asset) => respond(asset.content_type, asset.body),
        None => ApiError::new(
            ErrorCode::NotFound,
            format!("the console has no asset {name:?}"),
        )
        .into_response(),
    }
}

fn respond(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        // The assets change with the binary: always ask again.
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_import_names_an_embedded_asset() {
        // A typo in an import would only show in a browser: check here.
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            let dir = asset.path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in asset.body.lines().filter(|l| l.starts_with("import ")) {
                let Some(target) = line.split('"').nth(1) else {
                    panic!("{}: an import without a quoted path: {line}", asset.path);
                };
                let resolved = resolve(dir, target);
                assert!(
                    ASSETS.iter().any(|a| a.path == resolved),
                    "{} imports {target:?} ({resolved}), which is not embedded",
                    asset.path
                );
            }
        }
    }

    /// `target` (`./x.js`, `../x.js`) relative to `dir`.
    fn resolve(dir: &str, target: &str) -> String {
        let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
        for part in target.split('/') {
            match part {
                "." => {}
                ".." => {
                    parts.pop();
                }
                name => parts.push(name),
            }
        }
        parts.join("/")
    }

    #[test]
    fn the_shell_loads_only_embedded_files_and_no_inline_script() {
        let shell = include_str!("console/index.html");
        assert!(!shell.contains("<script>"), "inline scripts break the CSP");
        assert!(!shell.contains("style="), "inline styles break the CSP");
        for reference in shell.split("/ui/assets/").skip(1) {
            let path = reference.split('"').next().unwrap_or_default();
            assert!(
                ASSETS.iter().any(|a| a.path == path),
                "the shell loads {path:?}, which is not embedded"
            );
        }
    }
}
