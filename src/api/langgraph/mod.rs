//! LangGraph's server API, for `langgraph-sdk`, `@langchain/langgraph-sdk`,
//! `RemoteGraph` and the chat front ends built on them (docs/langgraph.md):
//! served at the root (`/assistants`, …), as the SDKs append their paths to
//! the URL they are given, and authenticated like every route (the SDKs
//! send the key in `X-Api-Key`). This module only translates LangGraph's
//! shapes to the daemon's bundles, conversations and jobs:
//!
//! - `assistants`: assistants are bundles (search, count, get, versions);
//! - `graph`: an assistant's graph, schemas and subgraphs;
//! - `ids`: which bundle an assistant id names;
//! - `threads`: threads are conversations (make, read, change, delete,
//!   search, count), their `messages` rebuilt by `messages`;
//! - `state`: a thread's checkpoints, one per durable step, which
//!   `history` serves (its state, one checkpoint, its history);
//! - `listing`: how every search pages, sorts, filters and selects.

mod assistants;
mod graph;
mod history;
mod ids;
mod listing;
mod messages;
mod state;
mod threads;

use aide::axum::ApiRouter;
use aide::axum::routing::{delete_with, get_with, patch_with, post_with};

use super::AppState;
use super::with;

pub(super) fn routes() -> ApiRouter<AppState> {
    assistant_routes().merge(thread_routes())
}

fn thread_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{DeleteConversation, ReadConversation, WriteConversation};
    ApiRouter::new()
        .api_route(
            "/threads",
            with(
                WriteConversation,
                post_with(threads::create, threads::create_doc),
            ),
        )
        .api_route(
            "/threads/search",
            with(
                ReadConversation,
                post_with(threads::search, threads::search_doc),
            ),
        )
        .api_route(
            "/threads/count",
            with(
                ReadConversation,
                post_with(threads::count, threads::count_doc),
            ),
        )
        .api_route(
            "/threads/{thread_id}",
            with(ReadConversation, get_with(threads::get, threads::get_doc))
                .merge(with(
                    WriteConversation,
                    patch_with(threads::patch, threads::patch_doc),
                ))
                .merge(with(
                    DeleteConversation,
                    delete_with(threads::delete, threads::delete_doc),
                )),
        )
        .api_route(
            "/threads/{thread_id}/state",
            with(ReadConversation, get_with(history::get, history::get_doc))
                .merge(with(
                    WriteConversation,
                    post_with(history::write, history::write_doc),
                ))
                .merge(with(
                    WriteConversation,
                    patch_with(history::write, history::write_doc),
                )),
        )
        .api_route(
            "/threads/{thread_id}/state/checkpoint",
            with(
                ReadConversation,
                post_with(history::at_checkpoint, history::at_doc),
            ),
        )
        .api_route(
            "/threads/{thread_id}/state/{checkpoint_id}",
            with(ReadConversation, get_with(history::at, history::at_doc)),
        )
        .api_route(
            "/threads/{thread_id}/history",
            with(
                ReadConversation,
                post_with(history::history, history::history_doc),
            ),
        )
}

fn assistant_routes() -> ApiRouter<AppState> {
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
