//! LangGraph's server API, for `langgraph-sdk`, `@langchain/langgraph-sdk`,
//! `RemoteGraph` and the chat front ends built on them (docs/langgraph.md):
//! served at the root (`/assistants`, …), as the SDKs append their paths to
//! the URL they are given, and authenticated like every route (the SDKs
//! send the key in `X-Api-Key`). This module only translates LangGraph's
//! shapes to the daemon's bundles, conversations and jobs:
//!
//! - `assistants`: assistants are bundles (search, count, get, versions),
//!   the key's `custom` ones (a bundle with variables set, in versions),
//!   and `agents` the Agent Protocol's view of them;
//! - `graph`: an assistant's graph, schemas and subgraphs;
//! - `ids`: which bundle an assistant id names;
//! - `threads`: threads are conversations (make, read, change, delete,
//!   search, count; `prune` deletes several, `copy` copies one), their
//!   `messages` rebuilt by `messages`;
//! - `state`: a thread's checkpoints, one per durable step, which
//!   `history` serves (its state, one checkpoint, its history);
//! - `runs`: runs are jobs (a run request read into a job, a job's run
//!   view), served by `run_routes` (and `batch`: several at once;
//!   `runs_by_id`: the Agent Protocol's runs by their id alone), and
//!   streamed by `stream_routes`, each run followed by `follower`
//!   through `stream` (LangGraph's events of a job, in each of the
//!   `stream_modes` asked; its nested runs as `subgraphs`);
//! - `interrupts`: a call parked for a person as LangGraph's interrupt,
//!   which a run's `command.resume` answers (`resume`, through the one
//!   decision path);
//! - `thread_stream`: the Agent Protocol's thread streaming, every run of
//!   a thread told as the protocol's events (`thread_events`), also over a
//!   WebSocket (`thread_socket`), and `commands`, which start and resume
//!   its runs and read its state; `thread_join` LangGraph's join of a
//!   thread, its runs as LangGraph's events;
//! - `waiting`: a run's wait kept alive until its answer;
//! - `crons`: crons are the key's schedules, each fire the run request
//!   (searched by `cron_search`);
//! - `store`: LangGraph's store, a key's items under namespaces (what a
//!   search keeps and ranks: `store_search`);
//! - `listing`: how every search pages, sorts, filters and selects.

mod agents;
mod assistants;
mod batch;
mod commands;
mod copy;
mod cron_search;
mod crons;
mod custom;
mod follower;
mod graph;
mod history;
mod ids;
mod interrupts;
mod listing;
mod messages;
mod prune;
mod resume;
mod run_routes;
mod runs;
mod runs_by_id;
mod state;
mod store;
mod store_search;
mod stream;
mod stream_modes;
mod stream_routes;
mod subgraphs;
mod thread_events;
mod thread_join;
mod thread_socket;
mod thread_stream;
mod threads;
mod waiting;

use aide::axum::ApiRouter;
use aide::axum::routing::{delete_with, get_with, patch_with, post_with, put_with};

use super::AppState;
use super::with;

pub(super) fn routes() -> ApiRouter<AppState> {
    assistant_routes()
        .merge(thread_routes())
        .merge(run_routes())
        .merge(store_routes())
        .merge(cron_routes())
}

fn run_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{
        CancelJob, DeleteJob, ReadConversation, ReadJob, SubmitJob,
    };
    ApiRouter::new()
        .api_route(
            "/threads/{thread_id}/runs",
            with(
                SubmitJob,
                post_with(run_routes::create, run_routes::create_doc),
            )
            .merge(with(
                ReadConversation,
                get_with(run_routes::list, run_routes::list_doc),
            )),
        )
        .api_route(
            "/threads/{thread_id}/runs/wait",
            with(SubmitJob, post_with(run_routes::wait, run_routes::wait_doc)),
        )
        .api_route(
            "/threads/{thread_id}/runs/{run_id}",
            with(ReadJob, get_with(run_routes::get, run_routes::get_doc)).merge(with(
                DeleteJob,
                delete_with(run_routes::delete, run_routes::delete_doc),
            )),
        )
        .api_route(
            "/threads/{thread_id}/runs/{run_id}/join",
            with(ReadJob, get_with(run_routes::join, run_routes::join_doc)),
        )
        .api_route(
            "/threads/{thread_id}/runs/{run_id}/cancel",
            with(
                CancelJob,
                post_with(run_routes::cancel, run_routes::cancel_doc),
            ),
        )
        .api_route(
            "/runs",
            with(
                SubmitJob,
                post_with(run_routes::create_stateless, run_routes::create_doc),
            ),
        )
        .api_route(
            "/runs/wait",
            with(
                SubmitJob,
                post_with(run_routes::wait_stateless, run_routes::wait_doc),
            ),
        )
        .api_route(
            "/runs/batch",
            with(SubmitJob, post_with(batch::batch, batch::batch_doc)),
        )
        .merge(runs_by_id_routes())
        .merge(stream_routes())
}

/// The Agent Protocol's runs by their id alone.
fn runs_by_id_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{CancelJob, DeleteJob, ReadJob};
    ApiRouter::new()
        .api_route(
            "/runs/search",
            with(
                ReadJob,
                post_with(runs_by_id::search, runs_by_id::search_doc),
            ),
        )
        .api_route(
            "/runs/{run_id}",
            with(ReadJob, get_with(runs_by_id::get, runs_by_id::get_doc)).merge(with(
                DeleteJob,
                delete_with(runs_by_id::delete, runs_by_id::delete_doc),
            )),
        )
        .api_route(
            "/runs/{run_id}/wait",
            with(ReadJob, get_with(runs_by_id::wait, runs_by_id::wait_doc)),
        )
        .api_route(
            "/runs/{run_id}/cancel",
            with(
                CancelJob,
                post_with(runs_by_id::cancel, runs_by_id::cancel_doc),
            ),
        )
}

/// The Agent Protocol's thread streaming: a thread's event stream (at the
/// protocol's path and the SDKs'), as Server-Sent Events or over a
/// WebSocket, and its commands; and LangGraph's join of a thread (a `GET`
/// of `/threads/{thread_id}/stream` without an upgrade).
fn thread_streaming_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::ReadConversation;
    ApiRouter::new()
        .api_route(
            "/threads/{thread_id}/stream",
            with(
                ReadConversation,
                post_with(thread_stream::open, thread_stream::open_doc),
            )
            .merge(with(
                ReadConversation,
                get_with(thread_join::join, thread_join::join_doc),
            )),
        )
        .api_route(
            "/threads/{thread_id}/stream/events",
            with(
                ReadConversation,
                post_with(thread_stream::open, thread_stream::open_doc),
            )
            .merge(with(
                ReadConversation,
                get_with(thread_socket::open, thread_socket::open_doc),
            )),
        )
        .api_route(
            "/threads/{thread_id}/commands",
            with(
                ReadConversation,
                post_with(commands::command, commands::command_doc),
            ),
        )
}

fn stream_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{ReadJob, SubmitJob};
    ApiRouter::new()
        .api_route(
            "/threads/{thread_id}/runs/stream",
            with(
                SubmitJob,
                post_with(stream_routes::stream, stream_routes::stream_doc),
            ),
        )
        .api_route(
            "/threads/{thread_id}/runs/{run_id}/stream",
            with(
                ReadJob,
                get_with(stream_routes::join, stream_routes::join_doc),
            ),
        )
        .api_route(
            "/runs/stream",
            with(
                SubmitJob,
                post_with(stream_routes::stream_stateless, stream_routes::stream_doc),
            ),
        )
        .api_route(
            "/runs/{run_id}/stream",
            with(
                ReadJob,
                get_with(stream_routes::join_by_id, stream_routes::join_doc),
            ),
        )
}

fn thread_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{DeleteConversation, ReadConversation, WriteConversation};
    ApiRouter::new()
        .merge(thread_streaming_routes())
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
            "/threads/prune",
            with(
                DeleteConversation,
                post_with(prune::prune, prune::prune_doc),
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
            "/threads/{thread_id}/copy",
            with(WriteConversation, post_with(copy::copy, copy::copy_doc)),
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
            )
            .merge(with(
                ReadConversation,
                get_with(history::history_get, history::history_get_doc),
            )),
        )
}

fn cron_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{CreateSchedule, ManageSchedule, ReadSchedule};
    ApiRouter::new()
        .api_route(
            "/runs/crons",
            with(CreateSchedule, post_with(crons::create, crons::create_doc)),
        )
        .api_route(
            "/threads/{thread_id}/runs/crons",
            with(
                CreateSchedule,
                post_with(crons::create_for_thread, crons::create_doc),
            ),
        )
        .api_route(
            "/runs/crons/search",
            with(
                ReadSchedule,
                post_with(cron_search::search, cron_search::search_doc),
            ),
        )
        .api_route(
            "/runs/crons/count",
            with(
                ReadSchedule,
                post_with(cron_search::count, cron_search::count_doc),
            ),
        )
        .api_route(
            "/runs/crons/{cron_id}",
            with(ManageSchedule, patch_with(crons::update, crons::update_doc)).merge(with(
                ManageSchedule,
                delete_with(crons::delete, crons::delete_doc),
            )),
        )
}

fn store_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{ReadStore, WriteStore};
    ApiRouter::new()
        .api_route(
            "/store/items",
            with(WriteStore, put_with(store::put, store::put_doc))
                .merge(with(ReadStore, get_with(store::get, store::get_doc)))
                .merge(with(
                    WriteStore,
                    delete_with(store::delete, store::delete_doc),
                )),
        )
        .api_route(
            "/store/items/search",
            with(ReadStore, post_with(store::search, store::search_doc)),
        )
        .api_route(
            "/store/namespaces",
            with(
                ReadStore,
                post_with(store::list_namespaces, store::namespaces_doc),
            ),
        )
}

fn assistant_routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{ReadBundle, WriteAssistant};
    ApiRouter::new()
        .api_route(
            "/assistants",
            with(
                WriteAssistant,
                post_with(custom::create, custom::create_doc),
            ),
        )
        .api_route(
            "/assistants/{assistant_id}/latest",
            with(
                WriteAssistant,
                post_with(custom::set_latest, custom::latest_doc),
            ),
        )
        .api_route(
            "/agents/search",
            with(ReadBundle, post_with(agents::search, agents::search_doc)),
        )
        .api_route(
            "/agents/{agent_id}",
            with(ReadBundle, get_with(agents::get, agents::get_doc)),
        )
        .api_route(
            "/agents/{agent_id}/schemas",
            with(ReadBundle, get_with(agents::schemas, agents::schemas_doc)),
        )
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
            with(ReadBundle, get_with(assistants::get, assistants::get_doc))
                .merge(with(
                    WriteAssistant,
                    patch_with(custom::update, custom::update_doc),
                ))
                .merge(with(
                    WriteAssistant,
                    delete_with(custom::delete, custom::delete_doc),
                )),
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
