//! Finds the line of a key path (`tools[2].timeout`) in YAML text, so every
//! bundle error can name file, line and key.

use std::collections::HashMap;

use granit_parser::{Event, Parser};

/// Key path → 1-based line, for every key and sequence item of a document.
#[derive(Debug, Default)]
pub struct LineIndex {
    lines: HashMap<String, usize>,
}

enum Frame {
    /// A mapping; `key` is the key whose value comes next, if any.
    Map {
        path: String,
        key: Option<String>,
    },
    Seq {
        path: String,
        index: usize,
    },
}

impl LineIndex {
    pub fn build(text: &str) -> Self {
        let mut lines = HashMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            let line = span.start.line();
            // The path of the node this event starts, if it is a value.
            let value_path = |stack: &mut Vec<Frame>| -> Option<String> {
                match stack.last_mut() {
                    Some(Frame::Map { path, key }) => key.take().map(|k| join(path, &k)),
                    Some(Frame::Seq { path, index }) => {
                        let p = format!("{path}[{index}]");
                        *index += 1;
                        Some(p)
                    }
                    None => Some(String::new()),
                }
            };
            match event {
                Event::Scalar(text, ..) => {
                    let is_key = matches!(stack.last(), Some(Frame::Map { key: None, .. }));
                    if is_key {
                        if let Some(Frame::Map { path, key }) = stack.last_mut() {
                            lines.entry(join(path, &text)).or_insert(line);
                            *key = Some(text.into_owned());
                        }
                    } else if let Some(p) = value_path(&mut stack) {
                        lines.entry(p).or_insert(line);
                    }
                }
                Event::MappingStart(..) => {
                    let p = value_path(&mut stack).unwrap_or_default();
                    lines.entry(p.clone()).or_insert(line);
                    stack.push(Frame::Map { path: p, key: None });
                }
                Event::SequenceStart(..) => {
                    let p = value_path(&mut stack).unwrap_or_default();
                    lines.entry(p.clone()).or_insert(line);
                    stack.push(Frame::Seq { path: p, index: 0 });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                Event::Alias(..) => {
                    value_path(&mut stack);
                }
                _ => {}
            }
        }
        Self { lines }
    }

    /// The line of `path`, or of its nearest ancestor that has one.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut path = path;
        loop {
            if let Some(line) = self.lines.get(path) {
                return Some(*line);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_items_and_ancestors() {
        let text = "name: x\nmodel:\n  name: m\ntools:\n  - name: a\n    kind: process\n  - name: b\n    timeout: 5 sec\n";
        let idx = LineIndex::build(text);
        assert_eq!(idx.line_of("name"), Some(1));
        assert_eq!(idx.line_of("model.name"), Some(3));
        assert_eq!(idx.line_of("tools[0].kind"), Some(6));
        assert_eq!(idx.line_of("tools[1]"), Some(7));
        assert_eq!(idx.line_of("tools[1].timeout"), Some(8));
        assert_eq!(idx.line_of("tools[1].missing"), Some(7));
    }
}
