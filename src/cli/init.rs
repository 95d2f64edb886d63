//! `structured-agents init DIR`: a new bundle to start from — bundle.yaml
//! with every key (the optional ones commented), a process tool and a
//! scripted endpoint, so `validate` accepts it and `run` answers before any
//! model server is involved. The templates are the files of `init/`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The new bundle's directory (created; it must not exist or be empty).
    pub dir: PathBuf,
    /// The bundle's name (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
}

const BUNDLE: &str = include_str!("init/bundle.yaml");
const SCRIPT: &str = include_str!("init/script.yaml");
const TOOL: &str = include_str!("init/count_words.py");

/// The files of a new bundle: path in the bundle, contents, mode.
fn files(name: &str, dir: &Path) -> [(&'static str, String, u32); 3] {
    let shown = dir.display().to_string();
    [
        (
            "bundle.yaml",
            BUNDLE.replace("__NAME__", name).replace("__DIR__", &shown),
            0o644,
        ),
        ("script.yaml", SCRIPT.to_string(), 0o644),
        ("tools/count_words.py", TOOL.to_string(), 0o755),
    ]
}

pub fn init(args: InitArgs) -> anyhow::Result<i32> {
    let dir = &args.dir;
    let name = match &args.name {
        Some(name) => name.clone(),
        None => dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .with_context(|| format!("{} has no directory name: give --name", dir.display()))?,
    };
    if !crate::bundle::is_valid_name(&name) {
        bail!(
            "{name:?} cannot name a bundle (use letters, digits, `-` and `_`): give --name NAME or another directory"
        );
    }
    if let Ok(mut entries) = std::fs::read_dir(dir)
        && entries.next().is_some()
    {
        bail!(
            "{} exists and is not empty: init writes into a new or empty directory only",
            dir.display()
        );
    }
    for (path, contents, mode) in files(&name, dir) {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&target, contents)
            .with_context(|| format!("cannot write {}", target.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set the mode of {}", target.display()))?;
    }
    println!("created bundle {name} in {}", dir.display());
    let (me, shown) = (this_command(), shell_word(&dir.display().to_string()));
    println!("  {me} validate {shown}");
    println!("  {me} run {shown} --input \"How many words are in: the quick brown fox?\"");
    Ok(0)
}

/// How to run this binary again from here: `structured-agents` when that
/// name on `PATH` is this binary; else its own path, relative when it lies
/// under the current directory (`./target/debug/structured-agents` in a
/// clone), absolute otherwise. A clone's build is on no `PATH`, and a
/// suggestion that fails is worse than a long one.
fn this_command() -> String {
    const NAME: &str = "structured-agents";
    let Ok(exe) = std::env::current_exe().and_then(|e| e.canonicalize()) else {
        return NAME.into();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            dir.join(NAME)
                .canonicalize()
                .is_ok_and(|found| found == exe)
        })
    });
    if on_path {
        return NAME.into();
    }
    let here = std::env::current_dir().and_then(|d| d.canonicalize());
    let shown = match here
        .ok()
        .and_then(|here| exe.strip_prefix(here).ok().map(Path::to_path_buf))
    {
        Some(relative) => format!("./{}", relative.display()),
        None => exe.display().to_string(),
    };
    shell_word(&shown)
}

/// `word` as one shell word: as it is when nothing in it is special to a
/// shell, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_name_the_bundle_and_its_directory() {
        let [(_, bundle, _), ..] = files("counter", Path::new("bundles/counter"));
        assert!(bundle.contains("\nname: counter "), "{bundle}");
        assert!(bundle.contains("structured-agents run bundles/counter --input"));
        assert!(!bundle.contains("__"), "every placeholder replaced");
    }

    #[test]
    fn a_path_with_shell_specials_is_quoted() {
        assert_eq!(
            shell_word("./target/debug/structured-agents"),
            "./target/debug/structured-agents"
        );
        assert_eq!(shell_word("/home/me/my agents/x"), "'/home/me/my agents/x'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }
}
