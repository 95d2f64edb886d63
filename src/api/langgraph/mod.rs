//! LangGraph's server API, for `langgraph-sdk`, `@langchain/langgraph-sdk`,
//! `RemoteGraph` and the chat front ends built on them (docs/langgraph.md):
//! served at the root (`/assistants`, …), as the SDKs append their paths to
//! the URL they are given, and authenticated like every route (the SDKs
//! send the key in `X-Api-Key`). This module only translates LangGraph's
//! shapes to the daemon's bundles, conversations and jobs:
//!
//! - `assistants`: assistants are bundles (search, count, get, versions);
//! - `graph`: an assistant's graph, schemas and subgraphs;
//! - `ids`: which bundle an assistant id names.

mod assistants;
mod graph;
mod ids;

use aide::axum::ApiRouter;
use aide::axum::routing::{get_with, post_with};

use super::AppState;
use super::with;

pub(super) fn routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::ReadBundle;
    ApiRouter::new()
        .api_route(
            "/assistants/search",
            with(
                ReadBundle,
                post_with(assistants::search, assistants::search_doc),
            ),
        )
        .api_route(
            "/assistants/count",
            with(
                ReadBundle,
                post_with(assistants::count, assistants::count_doc),
            ),
        )
        .api_route(
            "/assistants/{assistant_id}",
            with(ReadBundle, get_with(assistants::get, assistants::get_doc)),
        )
        .api_route(
            "/assistants/{assistant_id}/versions",
            with(
                ReadBundle,
                post_with(assistants::list_versions, assistants::versions_doc),
            ),
        )
        .api_route(
            "/assistants/{assistant_id}/graph",
            with(ReadBundle, get_with(graph::graph, graph::graph_doc)),
        )
        .api_route(
            "/assistants/{assistant_id}/schemas",
            with(ReadBundle, get_with(graph::schemas, graph::schemas_doc)),
        )
        .api_route(
            "/assistants/{assistant_id}/subgraphs",
            with(ReadBundle, get_with(graph::subgraphs, graph::subgraphs_doc)),
        )
}
