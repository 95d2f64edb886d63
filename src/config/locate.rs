//! Turns figment errors into messages with file, line and key path.

use std::path::Path;

use super::ConfigError;

pub(super) fn describe(error: figment::Error, file: Option<&Path>) -> ConfigError {
    let key = error.path.join(".");
    let from_env = error
        .metadata
        .as_ref()
        .is_some_and(|m| m.name.contains("environment"));
    let message = match &error.kind {
        figment::error::Kind::UnknownField(field, expected) => {
            format!(
                "unknown key `{field}` (expected one of: {})",
                expected.join(", ")
            )
        }
        other => other.to_string(),
    };
    let key = match &error.kind {
        figment::error::Kind::UnknownField(field, _) if key.is_empty() => field.clone(),
        figment::error::Kind::UnknownField(field, _) => format!("{key}.{field}"),
        _ => key,
    };
    if from_env {
        let var = format!(
            "STRUCTURED_AGENTS_{}",
            key.to_uppercase().replace('.', "__")
        );
        return ConfigError::Invalid {
            location: format!("environment variable {var}: "),
            key,
            message,
        };
    }
    invalid(file, &key, message)
}

pub(super) fn invalid(file: Option<&Path>, key: &str, message: String) -> ConfigError {
    // The environment overrides the file: a bad value set there must be
    // pointed at there, not at a file line that says something else.
    let var = format!(
        "STRUCTURED_AGENTS_{}",
        key.to_uppercase().replace('.', "__")
    );
    if std::env::var_os(&var).is_some() {
        return ConfigError::Invalid {
            location: format!("environment variable {var}: "),
            key: key.to_string(),
            message,
        };
    }
    let location = match file {
        Some(f) => {
            let line = std::fs::read_to_string(f)
                .ok()
                .and_then(|text| line_of(&text, key));
            match line {
                Some(l) => format!("{}:{l}: ", f.display()),
                None => format!("{}: ", f.display()),
            }
        }
        None => "built-in defaults: ".to_string(),
    };
    ConfigError::Invalid {
        location,
        key: key.to_string(),
        message,
    }
}

/// The line defining `a.b.c` in TOML text: a `[a.b]` table then `c = `, or a
/// dotted key; falls back to the table header.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let (table, leaf) = match key.rsplit_once('.') {
        Some((t, l)) => (t, l),
        None => ("", key),
    };
    let mut current = String::new();
    let mut header_line = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            current = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            if current == key || current == table {
                header_line.get_or_insert(i + 1);
            }
            continue;
        }
        let Some((lhs, _)) = line.split_once('=') else {
            continue;
        };
        let lhs = lhs.trim().trim_matches('"');
        let full = if current.is_empty() {
            lhs.to_string()
        } else {
            format!("{current}.{lhs}")
        };
        if full == key || (current == table && lhs == leaf) {
            return Some(i + 1);
        }
    }
    header_line
}

#[cfg(test)]
mod tests {
    use super::line_of;

    #[test]
    fn finds_keys_in_tables() {
        let text = "[server]\nlisten = \"x\"\n\n[endpoints.local]\nbase_url = \"u\"\n";
        assert_eq!(line_of(text, "server.listen"), Some(2));
        assert_eq!(line_of(text, "endpoints.local.base_url"), Some(5));
        assert_eq!(line_of(text, "endpoints.local.missing"), Some(4));
    }
}
