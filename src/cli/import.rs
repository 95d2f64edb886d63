//! `structured-agents import`: converts a bundle written for the Python
//! agent kernel into this daemon's format, prints what changed and what
//! could not be carried over (each with its original key and line), then
//! checks the result with the same loader `validate` and the daemon use.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::bundle::{self, LoadContext};
use crate::import::{self, ImportOptions, Imported, ReportItem, Written};
use crate::model::ModelCatalog;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The original bundle's directory (with its `bundle.yaml`).
    pub bundle_dir: PathBuf,
    /// Write the converted bundle into this new (or empty) directory, with
    /// the original's other files; without it the bundle is converted in
    /// place and the original file kept as `bundle.original.yaml`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the report and the converted bundle.yaml; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The converted bundle's `model.endpoint` (the original set its server
    /// in code): a named endpoint, a URL or `scripted:<file>`.
    #[arg(long, default_value = import::DEFAULT_ENDPOINT)]
    pub endpoint: String,
    /// The converted bundle's `model.name` (default: the original's
    /// `model.adapter`; required when it has none).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
}

/// Exit code 0 when everything was converted and the result loads, 1 when
/// something was left out or the result does not load yet.
pub async fn import(args: ImportArgs) -> anyhow::Result<i32> {
    tokio::task::spawn_blocking(move || run(args)).await?
}

fn run(args: ImportArgs) -> anyhow::Result<i32> {
    let options = ImportOptions {
        endpoint: args.endpoint,
        model: args.model,
    };
    let dir = &args.bundle_dir;
    let Imported {
        source,
        conversion,
        written,
    } = import::import_dir(dir, args.out.as_deref(), args.dry_run, &options)?;
    let result_dir = match &written {
        Written::Copy { dir: out } => out.clone(),
        Written::Nothing | Written::InPlace { .. } => dir.clone(),
    };
    println!(
        "{}: the Python agent kernel's format, converted",
        source.display()
    );
    print_items("changed", &source, &conversion.changed);
    print_items(
        "not converted (left out)",
        &source,
        &conversion.not_converted,
    );
    match &written {
        Written::Nothing => {
            println!("dry run: nothing written; the converted bundle.yaml:\n");
            print!("{}", conversion.yaml);
        }
        Written::InPlace { file, original } => println!(
            "wrote {} (the original is kept as {})",
            file.display(),
            original.display()
        ),
        Written::Copy { dir } => println!("wrote {}", dir.join("bundle.yaml").display()),
    }

    let catalog = ModelCatalog::builtin();
    let ctx = LoadContext {
        endpoints: None,
        models: &catalog,
        histories: &crate::bundle::HistoryPlugins::default(),
    };
    let loaded = match written {
        Written::Nothing => {
            let file = result_dir.join("bundle.yaml");
            bundle::load_str(&conversion.yaml, &result_dir, &file, &ctx).map(|_| ())
        }
        _ => bundle::load_dir(&result_dir, &ctx).map(|_| ()),
    };
    let loads = match loaded {
        Ok(()) => {
            println!("check: the converted bundle loads");
            true
        }
        Err(errors) => {
            eprintln!(
                "check: the converted bundle does not load yet; fix these, then run `structured-agents validate {}`:",
                result_dir.display()
            );
            for e in &errors.0 {
                eprintln!("  {e}");
            }
            false
        }
    };
    Ok(if loads && conversion.not_converted.is_empty() {
        0
    } else {
        1
    })
}

fn print_items(title: &str, file: &Path, items: &[ReportItem]) {
    if items.is_empty() {
        return;
    }
    println!("{title}:");
    for item in items {
        let line = item.line.map(|l| format!(":{l}")).unwrap_or_default();
        println!("  {}{line}: {}: {}", file.display(), item.key, item.note);
    }
}
