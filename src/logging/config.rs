//! `[log]`: the log line format, filter and queue. Depends only on
//! `setting`.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use crate::setting::{Form, Keys, non_zero};

/// `[log]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// log line format
    #[schemars(with = "String")]
    pub format: LogFormat,
    /// tracing filter directive, such as "info" or "info,vramd=debug"
    pub level: String,
    // Lines beyond this wait for nobody: dropped and counted, so a stalled
    // or closed stderr never blocks sampling.
    /// formatted log lines that may wait for stderr before new ones are dropped
    pub queue_lines: NonZeroUsize,
}

/// `log.format`, named as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: LogFormat::Text, level: "info".to_owned(), queue_lines: non_zero(4_096) }
    }
}

impl LogConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.words("format", Form::Choice(vec!["text", "json"]), "\"text\" or \"json\"");
        keys.words("level", Form::Text, "non-empty filter");
        let level = &self.level;
        if level.is_empty() {
            keys.refuse(
                "level",
                "\"\"".into(),
                "expected a filter such as \"info\" or \"info,vramd=debug\"",
            );
        } else if let Err(error) = super::filter(level) {
            keys.refuse(
                "level",
                format!("{level:?}"),
                format!("not a tracing filter directive: {}", error.reason),
            );
        }
        keys.count("queue_lines", self.queue_lines.get() as u64, 1, 1_000_000);
    }
}
