//! The runtime API's client commands: `agents`, `query`, `group`, `direct`
//! and `interactive`, printing the multi-agent runtime's format — `you → `
//! for what was asked, `talking with the agent(s):` then
//! ` ↪ runtime to <agent> → <query>` and ` ↪ <agent> to runtime → <reply>`
//! around agent calls, `ƒ(x) calling <tool>...` and ` ↪ ` lines for every
//! tool call of the router (as `chat` prints them), `runtime → ` (or the
//! agent's name) before an answer;
//! in colour on a terminal (unless `NO_COLOR` is set), and with `DEBUG=True`
//! or `AGENT_RUNTIME_DEBUG=true` every raw stream chunk on stderr.

use std::io::Write;

use clap::Args;
use futures::StreamExt;
use serde_json::{Value, json};

use super::client::{Client, ServerArgs};

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// What to ask.
    pub text: String,
    /// Continue this conversation (default: a new one).
    #[arg(long)]
    pub conversation: Option<String>,
    /// Agent calls allowed for this query.
    #[arg(long)]
    pub max_agents: Option<u32>,
    /// Also trace the router's other tool calls and model turns.
    #[arg(long)]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct GroupArgs {
    /// What the agents discuss.
    pub text: String,
    /// Who speaks, in order, comma-separated (default: every agent).
    #[arg(long, value_delimiter = ',')]
    pub agents: Vec<String>,
    /// Rounds at most.
    #[arg(long, default_value_t = 5)]
    pub max_iterations: u32,
    /// End right after a reply containing this phrase.
    #[arg(long, conflicts_with = "selector")]
    pub stop_phrase: Option<String>,
    /// After each round, this agent (default: the group-chat bundle) decides whether to end.
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    pub selector: Option<String>,
    /// Continue this conversation (default: a new one).
    #[arg(long)]
    pub conversation: Option<String>,
}

/// `agents`: the runtime's agents, one block each.
pub async fn agents(server: &ServerArgs) -> anyhow::Result<i32> {
    let listing = Client::new(server)?.get("/api/agents").await?;
    for agent in cards(&listing) {
        println!(
            "{} — {} ({})",
            text(&agent["id"]),
            text(&agent["name"]),
            text(&agent["kind"])
        );
        if let Some(description) = agent["description"].as_str().filter(|d| !d.is_empty()) {
            println!("  {description}");
        }
        println!("  capabilities: {}", joined(&agent["capabilities"]));
        println!("  endpoint: {}", text(&agent["endpoint"]));
    }
    Ok(0)
}

/// `query`: one question to the router, streamed.
pub async fn query(server: &ServerArgs, args: QueryArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    println!("you → {}", args.text);
    let body = json!({
        "query": args.text,
        "conversation_id": args.conversation,
        "max_agents": args.max_agents,
        "verbose": args.verbose,
    });
    Ok(ask(&client, body).await?.map_or(1, |_| 0))
}

/// Streams one query; prints it; the conversation id when it succeeded.
async fn ask(client: &Client, mut body: Value) -> anyhow::Result<Option<String>> {
    body["stream"] = json!(true);
    body["function_calls"] = json!(true);
    let mut frames = client.post_frames("/api/query", body).await?;
    let mut answering = false;
    let mut streamed = false;
    let mut talking = false;
    let mut conversation = None;
    let debug = debug_chunks();
    while let Some(frame) = frames.next().await {
        let frame = frame?;
        if debug {
            eprintln!("DEBUG chunk: {frame}");
        }
        if frame == "[DONE]" {
            break;
        }
        let frame: Value = serde_json::from_str(&frame).unwrap_or(Value::Null);
        if let Some(token) = frame["content"].as_str() {
            if !answering {
                print!("runtime → ");
                answering = true;
            }
            streamed = true;
            print!("{token}");
        } else if let Some(tool) = frame["function_call"].as_str() {
            // As `chat` prints a call: `ƒ(x) calling <tool>...`, its arguments.
            end_line(&mut answering);
            println!("ƒ(x) calling {tool}...");
            println!(" ↪ {}", frame["arguments"]);
        } else if frame.get("function_result").is_some() {
            end_line(&mut answering);
            let error = if frame["is_error"] == true {
                "error: "
            } else {
                ""
            };
            println!(" ↪ {error}{}", text(&frame["output_preview"]));
        } else if let Some(agent) = frame["agent_call"].as_str() {
            end_line(&mut answering);
            if !std::mem::replace(&mut talking, true) {
                println!("{}", paint(YELLOW, "talking with the agent(s):"));
            }
            let who = paint(CYAN, &format!("runtime to {agent}"));
            println!(" ↪ {who} → {}", text(&frame["agent_query"]));
        } else if frame.get("agent_response").is_some() {
            end_line(&mut answering);
            let who = paint(GREEN, &format!("{} to runtime", text(&frame["agent_id"])));
            println!(" ↪ {who} → {}", text(&frame["agent_response"]));
        } else if let Some(error) = frame.get("error") {
            end_line(&mut answering);
            println!("runtime → (error: {})", text(error));
        } else if frame["chunk"].is_null() && frame["complete"] == true {
            end_line(&mut answering);
            if !streamed {
                println!("runtime → {}", text(&frame["response"]));
            }
            println!(
                "(conversation {}, agents used: {}, {:.2}s)",
                text(&frame["conversation_id"]),
                or_none(joined(&frame["agents_used"])),
                frame["processing_time"].as_f64().unwrap_or_default()
            );
            conversation = frame["conversation_id"].as_str().map(str::to_string);
        }
        let _ = std::io::stdout().flush();
    }
    end_line(&mut answering);
    Ok(conversation)
}

/// `group`: a group chat, each reply as `<agent name> → <reply>`.
pub async fn group(server: &ServerArgs, args: GroupArgs) -> anyhow::Result<i32> {
    println!("you → {}", args.text);
    group_chat(&Client::new(server)?, args).await
}

async fn group_chat(client: &Client, args: GroupArgs) -> anyhow::Result<i32> {
    let termination = match (&args.stop_phrase, &args.selector) {
        (Some(phrase), _) => json!({"type": "stop_phrase", "phrase": phrase}),
        (None, Some(agent)) if agent.is_empty() => json!({"type": "selector"}),
        (None, Some(agent)) => json!({"type": "selector", "agent_id": agent}),
        (None, None) => json!({"type": "max_iterations"}),
    };
    let body = json!({
        "query": args.text,
        "conversation_id": args.conversation,
        "agent_ids": (!args.agents.is_empty()).then_some(&args.agents),
        "max_iterations": args.max_iterations,
        "termination": termination,
    });
    let reply = client.post("/api/group-chat", body).await?;
    for response in reply["agent_responses"].as_array().into_iter().flatten() {
        println!(
            "{} → {}",
            text(&response["agent_name"]),
            text(&response["response"])
        );
    }
    println!(
        "(conversation {}, rounds {}, ended by {})",
        text(&reply["conversationId"]),
        reply["rounds"],
        text(&reply["terminated_by"])
    );
    Ok(0)
}

/// `direct`: the message envelope straight to one agent's endpoint.
pub async fn direct(server: &ServerArgs, agent: &str, content: &str) -> anyhow::Result<i32> {
    println!("you → {content}");
    message(&Client::new(server)?, agent, content).await
}

async fn message(client: &Client, agent: &str, content: &str) -> anyhow::Result<i32> {
    let listing = client.get("/api/agents").await?;
    let Some(card) = cards(&listing).find(|a| a["id"] == agent) else {
        let known = agent_ids(&listing);
        anyhow::bail!(
            "no agent with id {agent:?} (known: {}; see `structured-agents agents`)",
            known.join(", ")
        );
    };
    let envelope = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "conversationId": format!("direct-{}", uuid::Uuid::new_v4()),
        "senderId": crate::tools::http_agent::DEFAULT_SENDER_ID,
        "recipientId": agent,
        "content": content,
        "timestamp": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        "type": "Text",
    });
    let reply = client.post_to(&text(&card["endpoint"]), envelope).await?;
    println!("{agent} → {}", text(&reply["content"]));
    Ok(0)
}

/// `interactive`: queries in one conversation, plus the other commands.
pub async fn interactive(server: &ServerArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    println!(
        "the runtime at {} — `agents`, `group TEXT`, `direct AGENT [TEXT]`, `exit`; anything else is a query",
        server.server
    );
    let mut lines = super::chat::input_lines();
    let mut conversation: Option<String> = None;
    loop {
        print!("you → ");
        let _ = std::io::stdout().flush();
        let Some(line) = lines.recv().await else {
            break;
        };
        let line = line.trim();
        let (command, rest) = line.split_once(' ').unwrap_or((line, ""));
        let outcome = match command {
            "" => continue,
            "exit" | "quit" => break,
            "agents" => agents(server).await.map(drop),
            "group" => {
                let (agents, text) = group_agents(&client, rest).await;
                let args = GroupArgs {
                    text,
                    agents,
                    max_iterations: 5,
                    stop_phrase: None,
                    selector: None,
                    conversation: conversation.clone(),
                };
                group_chat(&client, args).await.map(drop)
            }
            "direct" => {
                let (agent, content) = rest.split_once(' ').unwrap_or((rest, "Hello"));
                message(&client, agent, content).await.map(drop)
            }
            _ => {
                let body = json!({"query": line, "conversation_id": conversation});
                ask(&client, body).await.map(|id| {
                    if id.is_some() {
                        conversation = id;
                    }
                })
            }
        };
        if let Err(e) = outcome {
            println!("error: {e:#}");
        }
    }
    Ok(0)
}

/// `group a,b TEXT` in interactive mode: the agents to include, when the
/// first word lists only known agent ids (else all agents, on all of `rest`).
async fn group_agents(client: &Client, rest: &str) -> (Vec<String>, String) {
    let all = || (Vec::new(), rest.to_string());
    let Some((first, question)) = rest.split_once(' ') else {
        return all();
    };
    let Ok(listing) = client.get("/api/agents").await else {
        return all();
    };
    let known = agent_ids(&listing);
    let asked: Vec<String> = first.split(',').map(str::to_string).collect();
    if asked.iter().all(|id| known.contains(id)) {
        (asked, question.trim().to_string())
    } else {
        all()
    }
}

/// The agent cards of a `GET /api/agents` answer.
fn cards(listing: &Value) -> impl Iterator<Item = &Value> {
    listing["agents"].as_array().into_iter().flatten()
}

/// The ids of the agents of a `GET /api/agents` answer.
fn agent_ids(listing: &Value) -> Vec<String> {
    cards(listing).map(|a| text(&a["id"])).collect()
}

/// Whether raw stream chunks go to stderr (the runtime's `DEBUG=True` or
/// `AGENT_RUNTIME_DEBUG=true`).
fn debug_chunks() -> bool {
    ["DEBUG", "AGENT_RUNTIME_DEBUG"].iter().any(|name| {
        std::env::var(name)
            .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
    })
}

const YELLOW: &str = "33";
const CYAN: &str = "36";
const GREEN: &str = "32";

/// `text` in an ANSI colour when stdout is a terminal and `NO_COLOR` is unset.
fn paint(colour: &str, text: &str) -> String {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
        format!("\x1b[{colour}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn joined(values: &Value) -> String {
    values
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect::<Vec<_>>()
        .join(", ")
}

fn or_none(text: String) -> String {
    if text.is_empty() { "none".into() } else { text }
}

fn end_line(answering: &mut bool) {
    if std::mem::take(answering) {
        println!();
    }
}
