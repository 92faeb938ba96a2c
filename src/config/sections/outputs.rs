//! `[log]` and `[notify]`: where vramd's own output goes, log lines to
//! stderr and alert state changes to Alertmanager or a webhook, and the
//! bounded queues in front of both.
//!
//! Schema entries only (see `sections`); depends on the config schema
//! machinery and nothing outside `config`.

use std::num::NonZeroUsize;
use std::time::Duration;

use crate::config::error::ConfigError;
use crate::config::field::{de, ser};
use crate::config::keys::Accepts::{Int, Time, Words};
use crate::config::keys::KeySpec;
use crate::config::schema::{hours, mins, ms, non_zero, secs, section, within};
use crate::config::walk::Values;

use super::URL;

section! {
    /// `[log]`.
    pub struct LogConfig "log" {
        /// log line format
        format "format": LogFormat = LogFormat::Text, Words("\"text\" or \"json\"");
        /// tracing filter directive, such as "info" or "info,vramd=debug"
        level "level": String = "info".to_owned(), Words("non-empty filter");
        // Lines beyond this wait for nobody: dropped and counted, so a
        // stalled or closed stderr never blocks sampling.
        /// formatted log lines that may wait for stderr before new ones are dropped
        queue_lines "queue_lines": NonZeroUsize = non_zero(4_096), Int(1, 1_000_000);
    }
}

/// `log.format`, named as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

section! {
    /// `[notify]`: where alert state changes are delivered.
    pub struct NotifyConfig "notify" {
        /// send alert state changes to this Alertmanager (API v2)
        alertmanager_url "alertmanager_url": Option<String> = None, Words(URL);
        /// POST alert state changes as JSON to this URL
        webhook_url "webhook_url": Option<String> = None, Words(URL);
        /// state changes waiting per notifier; beyond it the oldest are dropped
        queue_capacity "queue_capacity": NonZeroUsize = non_zero(1024), Int(1, 100_000);
        /// deadline of one delivery request
        timeout "timeout": Duration = secs(5), Time(ms(100), mins(1));
        /// how often firing alerts are sent again
        resend_interval "resend_interval": Duration = mins(1), Time(secs(1), hours(1));
        /// attempts after a failed delivery
        max_retries "max_retries": u32 = 5, Int(0, 100);
        /// longest wait between delivery attempts
        retry_backoff_max "retry_backoff_max": Duration = secs(30), Time(ms(100), mins(10));
        /// base of the generatorURL links in notifications (default http://<server.listen>)
        external_url "external_url": Option<String> = None, Words(URL);
    }
}
