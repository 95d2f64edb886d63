//! A bundle's suite, read from its `evals/` directory: `*.jsonl` files of
//! cases, an optional `suite.yaml` (graders for every case, the pass
//! threshold, the judge bundle) and an optional `promptfooconfig.yaml`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::case::{EvalCase, SuiteFile, parse_cases};
use super::error::EvalError;
use super::promptfoo;

/// The largest eval file read (a suite is an operator's file; this keeps a
/// mistaken drop of a data dump from filling memory).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// A bundle's cases.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    pub cases: Vec<EvalCase>,
}

impl Suite {
    /// Reads a bundle's `evals/` directory; `None` when there is none.
    pub fn load(dir: &Path) -> Result<Option<Suite>, EvalError> {
        if !dir.is_dir() {
            return Ok(None);
        }
        let suite_path = dir.join("suite.yaml");
        let file: SuiteFile = match suite_path.is_file() {
            true => serde_saphyr::from_str(&read(&suite_path)?).map_err(|e| EvalError::Suite {
                path: suite_path.clone(),
                message: e.to_string(),
            })?,
            false => SuiteFile::default(),
        };
        let mut cases = Vec::new();
        for path in jsonl_files(dir)? {
            cases.extend(parse_cases(&path, &read(&path)?, &file)?);
        }
        let promptfoo_path = dir.join("promptfooconfig.yaml");
        if promptfoo_path.is_file() {
            let text = read(&promptfoo_path)?;
            cases.extend(promptfoo::cases(&promptfoo_path, &text, &file)?);
        }
        Suite::new(dir, cases).map(Some)
    }

    /// The cases, refusing a suite without any and ids given twice.
    pub fn new(dir: &Path, cases: Vec<EvalCase>) -> Result<Suite, EvalError> {
        let problem = |message: String| EvalError::Suite {
            path: dir.to_path_buf(),
            message,
        };
        if cases.is_empty() {
            return Err(problem(
                "holds no case: add a `*.jsonl` file of cases or a `promptfooconfig.yaml`".into(),
            ));
        }
        let mut seen = BTreeSet::new();
        if let Some(twice) = cases.iter().find(|c| !seen.insert(c.id.as_str())) {
            return Err(problem(format!(
                "the case id `{}` is used twice: give each case its own `id`",
                twice.id
            )));
        }
        Ok(Suite { cases })
    }

    /// The cases an eval of the bundle whose suite is under `dir` runs:
    /// those with one of `tags` (every case when empty). Blocking. No
    /// suite, or no case with those tags, is an error saying what to do.
    pub fn cases_to_run(dir: &Path, tags: &[String]) -> Result<Vec<EvalCase>, EvalError> {
        let suite = Suite::load(dir)?.ok_or_else(|| EvalError::NoSuite {
            path: dir.to_path_buf(),
        })?;
        let cases = suite.tagged(tags).cases;
        match cases.is_empty() {
            true => Err(EvalError::NoneTagged {
                path: dir.to_path_buf(),
                tags: tags.to_vec(),
            }),
            false => Ok(cases),
        }
    }

    /// Only the cases with at least one of `tags` (every case when empty).
    pub fn tagged(mut self, tags: &[String]) -> Suite {
        if !tags.is_empty() {
            self.cases
                .retain(|case| case.tags.iter().any(|t| tags.contains(t)));
        }
        self
    }
}

fn jsonl_files(dir: &Path) -> Result<Vec<PathBuf>, EvalError> {
    let entries = std::fs::read_dir(dir).map_err(|source| EvalError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl") && path.is_file())
        .collect();
    files.sort();
    Ok(files)
}

fn read(path: &Path) -> Result<String, EvalError> {
    let failed = |source| EvalError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(failed)?.len();
    if size > MAX_FILE_BYTES {
        return Err(EvalError::Suite {
            path: path.to_path_buf(),
            message: format!(
                "is {size} bytes, over the {MAX_FILE_BYTES} an eval file may hold: split it"
            ),
        });
    }
    std::fs::read_to_string(path).map_err(failed)
}
