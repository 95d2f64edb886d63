//! `structured-agents chat BUNDLE_DIR`: an interactive conversation in the
//! terminal with a bundle, run in-process. Each line you type continues the
//! same conversation; the answer streams as it is generated and each tool
//! call is shown with its arguments and result.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::events::{
    Event, EventEnvelope, EventSink, Observer, ObserverError, RunContext, TokenDelta,
};
use crate::kernel::Kernel;
use crate::types::Message;

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The bundle directory.
    pub bundle_dir: PathBuf,
    /// A template variable, NAME=VALUE (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Send model requests to this OpenAI-compatible base URL (…/v1).
    #[arg(long, env = "SA_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Model-plugin configs (`<name>.toml`) the bundle may name.
    #[arg(long, env = "SA_MODELS_DIR", default_value = "config/models")]
    pub models_dir: PathBuf,
}

/// Prints the conversation: streamed answer after `runtime → `, tool calls
/// as `ƒ(x) calling <tool>...` with ` ↪ ` lines.
struct ChatView {
    answering: std::sync::atomic::AtomicBool,
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

pub async fn chat(args: ChatArgs) -> anyhow::Result<i32> {
    let loaded =
        super::run::load_for_run(&args.bundle_dir, &args.models_dir, args.endpoint.as_deref())
            .await?;
    let variables = super::parse_vars(&args.vars)?;
    let kernel = Kernel::new(
        loaded.bundle.kernel_config(),
        loaded.bundle.model.plugin.clone(),
        loaded.backend,
        loaded.tools,
    );
    let view = Arc::new(ChatView {
        answering: false.into(),
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
    let (lines_tx, mut lines) = tokio::sync::mpsc::channel::<String>(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    loop {
        print!("you → ");
        let _ = std::io::stdout().flush();
        let Some(line) = lines.recv().await else {
            break;
        };
        let line = line.trim().to_string();
        if line.is_empty() {
            break;
        }
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
