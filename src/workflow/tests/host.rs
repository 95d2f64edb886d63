//! A fake `WorkflowHost`: scripted agent replies (which may create or
//! delete files, to steer gates), and a record of checkpoints, artifacts,
//! stage reports and the order of calls.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::Value;

use crate::kernel::RunFailure;
use crate::workflow::{AgentOutput, Checkpoint, HostError, StageReport, WorkflowHost};

/// A scripted reply: the answer, and files to create (`Some`) or delete (`None`).
pub(super) struct Reply {
    pub result: Result<String, String>,
    pub files: Vec<(&'static str, Option<&'static str>)>,
}

pub(super) fn ok(text: &str) -> Reply {
    Reply {
        result: Ok(text.into()),
        files: vec![],
    }
}

#[derive(Default)]
pub(super) struct FakeHost {
    pub dir: PathBuf,
    pub script: Mutex<HashMap<String, VecDeque<Reply>>>,
    /// `checkpoint:<stage>:<step>`, `agent:<key>`, `artifact:<name>` in order.
    pub log: Mutex<Vec<String>>,
    pub prompts: Mutex<Vec<(String, String)>>,
    pub checkpoints: Mutex<Vec<Checkpoint>>,
    pub artifacts: Mutex<Vec<(String, Value)>>,
    pub reports: Mutex<Vec<StageReport>>,
}

impl FakeHost {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            ..Default::default()
        }
    }

    pub fn script(self, stage: &str, replies: Vec<Reply>) -> Self {
        self.script
            .lock()
            .unwrap()
            .entry(stage.into())
            .or_default()
            .extend(replies);
        self
    }

    pub fn artifact(&self, name: &str) -> Option<Value> {
        self.artifacts
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn last_checkpoint(&self) -> Checkpoint {
        self.checkpoints.lock().unwrap().last().cloned().unwrap()
    }

    pub fn events(&self) -> Vec<String> {
        self.reports
            .lock()
            .unwrap()
            .iter()
            .map(|r| format!("{}:{}", r.stage, r.event))
            .collect()
    }
}

#[async_trait]
impl WorkflowHost for FakeHost {
    async fn run_agent(
        &self,
        key: &str,
        _bundle: Option<&str>,
        prompt: String,
    ) -> Result<AgentOutput, RunFailure> {
        self.log.lock().unwrap().push(format!("agent:{key}"));
        let stage = key.split_once('-').map(|(_, s)| s.to_string()).unwrap();
        self.prompts.lock().unwrap().push((stage.clone(), prompt));
        let reply = self
            .script
            .lock()
            .unwrap()
            .get_mut(&stage)
            .and_then(VecDeque::pop_front);
        let Some(reply) = reply else {
            return Err(RunFailure::Bundle(format!("no scripted reply for {stage}")));
        };
        for (file, content) in reply.files {
            match content {
                Some(c) => std::fs::write(self.dir.join(file), c).unwrap(),
                None => drop(std::fs::remove_file(self.dir.join(file))),
            }
        }
        reply
            .result
            .map(|text| AgentOutput {
                text,
                final_output: None,
            })
            .map_err(RunFailure::Bundle)
    }

    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), HostError> {
        self.log.lock().unwrap().push(format!(
            "checkpoint:{}:{}",
            checkpoint.stage, checkpoint.step
        ));
        self.checkpoints.lock().unwrap().push(checkpoint.clone());
        Ok(())
    }

    async fn artifact(&self, name: &str, body: &Value) -> Result<(), HostError> {
        self.log.lock().unwrap().push(format!("artifact:{name}"));
        self.artifacts
            .lock()
            .unwrap()
            .push((name.into(), body.clone()));
        Ok(())
    }

    async fn stage_finished(&self, report: &StageReport) {
        self.reports.lock().unwrap().push(report.clone());
    }
}
