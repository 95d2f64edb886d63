//! `structured-agents chat BUNDLE`: an interactive conversation in the
//! terminal with a bundle of the daemon — every line a job of one
//! conversation (`conversation_id`), so it is durable, visible in `jobs` and
//! resumable with `--conversation` — or, with `--local`, with a bundle
//! directory run in-process. Either way each line you type continues the
//! same conversation; the answer streams as it is generated and each tool
//! call is shown with its arguments and result.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::client::{Client, ServerArgs, Spinner};
use crate::events::{
    Event, EventEnvelope, EventSink, Observer, ObserverError, RunContext, TokenDelta,
};
use crate::runner::{RunOptions, Runner};
use crate::types::Message;
use serde_json::{Value, json};

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The daemon's bundle (its name), or with `--local` a bundle directory.
    pub bundle: String,
    /// Run the bundle directory in this process instead of asking the daemon.
    #[arg(long)]
    pub local: bool,
    /// Continue this conversation of the daemon (default: a new one).
    #[arg(long, conflicts_with = "local")]
    pub conversation: Option<String>,
    /// A template variable, NAME=VALUE (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// With `--local`: send model requests to this OpenAI-compatible base URL (…/v1).
    #[arg(long, env = "SA_ENDPOINT")]
    pub endpoint: Option<String>,
    /// With `--local`: model-plugin configs (`<name>.toml`) the bundle may name.
    #[arg(long, env = "SA_MODELS_DIR", default_value = "config/models")]
    pub models_dir: PathBuf,
    #[command(flatten)]
    pub egress: super::run::EgressArgs,
}

/// Prints the conversation: streamed answer after `runtime → `, tool calls
/// as `ƒ(x) calling <tool>...` with ` ↪ ` lines.
struct ChatView {
    answering: std::sync::atomic::AtomicBool,
    /// Calls awaiting approval, for the prompt loop to ask about.
    approvals: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
}

impl ChatView {
    fn start_answer(&self) {
        if !self
            .answering
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            print!("runtime → ");
        }
    }

    fn end_answer(&self) {
        if self
            .answering
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            println!();
        }
    }
}

#[async_trait]
impl Observer for ChatView {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        match &event.event {
            Event::ModelResponse { .. } => self.end_answer(),
            Event::ToolCall {
                tool_name,
                arguments,
                ..
            } => {
                println!("ƒ(x) calling {tool_name}...");
                println!(" ↪ {arguments}");
            }
            Event::ToolResult {
                output_preview,
                is_error,
                ..
            } => {
                println!(
                    " ↪ {}{output_preview}",
                    if *is_error { "error: " } else { "" }
                );
            }
            Event::ApprovalRequested {
                tool_name,
                call_id,
                arguments,
                digest,
                ..
            } => {
                if let Some(approvals) = &self.approvals {
                    let _ = approvals.send(json!({
                        "call_id": call_id, "tool": tool_name, "arguments": arguments, "digest": digest,
                    }));
                }
            }
            // Parked for a person: the prompt asks; not an error.
            Event::KernelEnd {
                error_type: Some(kind),
                ..
            } if kind == "awaiting_approval" => {}
            Event::KernelEnd { error: Some(e), .. } => println!("runtime → (error: {e})"),
            _ => {}
        }
        let _ = std::io::stdout().flush();
        Ok(())
    }

    fn wants_tokens(&self) -> bool {
        true
    }

    fn on_token(&self, delta: TokenDelta<'_>) {
        self.start_answer();
        print!("{}", delta.text);
        let _ = std::io::stdout().flush();
    }
}

/// Lines typed at the terminal, read on a thread of their own.
pub(super) fn input_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (lines_tx, lines) = tokio::sync::mpsc::channel::<String>(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The next line, after the `you → ` prompt; `None` at the end.
async fn next_line(lines: &mut tokio::sync::mpsc::Receiver<String>) -> Option<String> {
    print!("you → ");
    let _ = std::io::stdout().flush();
    let line = lines.recv().await?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

pub async fn chat(server: &ServerArgs, args: ChatArgs) -> anyhow::Result<i32> {
    if args.local {
        local(args).await
    } else {
        remote(server, args).await
    }
}

/// Each line a job of the daemon, in one conversation.
async fn remote(server: &ServerArgs, args: ChatArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let variables = super::parse_vars(&args.vars)?;
    let conversation = args
        .conversation
        .unwrap_or_else(|| format!("chat-{}", uuid::Uuid::now_v7()));
    println!(
        "chatting with {} (conversation {conversation}) — an empty line or Ctrl-D ends",
        args.bundle
    );
    let (approvals, mut asked) = tokio::sync::mpsc::unbounded_channel();
    let view = ChatView {
        answering: false.into(),
        approvals: Some(approvals),
    };
    let spinner = Spinner::new(false);
    let mut lines = input_lines();
    while let Some(line) = next_line(&mut lines).await {
        let job = client
            .post(
                "/v1/jobs",
                json!({"bundle": args.bundle, "input": line, "variables": variables, "conversation_id": conversation}),
            )
            .await?;
        let id = job["id"].as_str().unwrap_or_default().to_string();
        let streamed = std::cell::Cell::new(false);
        let on_token = |token: &Value| {
            streamed.set(true);
            view.on_token(TokenDelta {
                run_id: token["run_id"].as_str().unwrap_or_default(),
                turn: token["turn"].as_u64().unwrap_or_default() as u32,
                text: token["text"].as_str().unwrap_or_default(),
            });
        };
        let follow = client.follow_with(&id, &view, &on_token, &spinner, false);
        tokio::pin!(follow);
        // A call that waits for approval is asked about here, inline; the
        // stream goes on once the decision is taken.
        let end = loop {
            tokio::select! {
                end = &mut follow => break end?,
                Some(request) = asked.recv() => {
                    view.end_answer();
                    ask_approval(&client, &id, &request, &mut lines).await;
                }
            }
        };
        view.end_answer();
        match (
            end["state"].as_str(),
            end.pointer("/result/output").and_then(Value::as_str),
        ) {
            // A model call that began before the stream listened arrives whole.
            (Some("succeeded"), Some(output)) if !streamed.get() => println!("runtime → {output}"),
            (Some("succeeded"), _) => {}
            (state, _) => println!(
                "runtime → (job {id} {}: {})",
                state.unwrap_or("unknown"),
                end["error"].as_str().unwrap_or("no error recorded")
            ),
        }
    }
    Ok(0)
}

/// Asks `approve? [y/N]` about a call awaiting approval and sends the
/// answer, bound to the digest shown; anything but `y` denies it.
async fn ask_approval(
    client: &Client,
    job: &str,
    request: &Value,
    lines: &mut tokio::sync::mpsc::Receiver<String>,
) {
    print!(
        "⚠ {} wants to run with {} — approve? [y/N] ",
        request["tool"].as_str().unwrap_or("?"),
        request["arguments"]
    );
    let _ = std::io::stdout().flush();
    let answer = lines.recv().await.unwrap_or_default();
    let approve = matches!(answer.trim(), "y" | "Y" | "yes");
    let decision = if approve {
        json!({"decision": "approve", "digest": request["digest"]})
    } else {
        json!({"decision": "deny", "reason": "denied in chat", "digest": request["digest"]})
    };
    let call = request["call_id"].as_str().unwrap_or_default();
    match client
        .post(&format!("/v1/jobs/{job}/approvals/{call}"), decision)
        .await
    {
        Ok(_) => println!(" ↪ {}", if approve { "approved" } else { "denied" }),
        Err(e) => println!(" ↪ the decision was not taken: {e}"),
    }
}

/// The bundle directory in this process; the conversation lives in memory.
async fn local(args: ChatArgs) -> anyhow::Result<i32> {
    let loaded = super::run::load_for_run(
        &PathBuf::from(&args.bundle),
        &args.models_dir,
        args.endpoint.as_deref(),
        &args.egress,
    )
    .await?;
    let variables = super::parse_vars(&args.vars)?;
    let options = RunOptions {
        tools: crate::bundle::requested_tools(&variables)?,
        ..Default::default()
    };
    let kernel = Runner::local().kernel(&loaded, &options)?;
    let view = Arc::new(ChatView {
        answering: false.into(),
        approvals: None,
    });
    let context = RunContext {
        run_id: uuid::Uuid::now_v7().to_string(),
        bundle: loaded.bundle.name().to_string(),
        bundle_version: loaded.bundle.version().to_string(),
        parent: None,
    };
    let sink = EventSink::new(context, 1, view.clone());
    println!(
        "chatting with {} {} — an empty line or Ctrl-D ends",
        loaded.bundle.name(),
        loaded.bundle.version()
    );
    let mut history: Vec<Message> = Vec::new();
    let mut lines = input_lines();
    while let Some(line) = next_line(&mut lines).await {
        let messages = if history.is_empty() {
            loaded.bundle.prompts.render(&line, &variables)?
        } else {
            let mut h = history.clone();
            h.push(Message::user(line));
            h
        };
        let result = kernel.run(messages, &sink, CancellationToken::new()).await;
        view.end_answer();
        match result {
            Ok(run) => {
                if let Some(out) = &run.final_output {
                    println!("runtime → {out}");
                }
                history = run.history;
            }
            Err(e) => eprintln!("error: {e}"),
        }
    }
    Ok(0)
}
