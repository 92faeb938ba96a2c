//! [`Keys`]: how a component's `check()` declares its keys and holds its
//! values to their bounds, in one pass that serves two readers. Run over
//! the defaults, the declarations are the key catalogue (the unknown-key
//! walk, how a variable's text is read, the range text of `check-config`
//! and the documentation tests); run over a loaded configuration, the
//! first value out of bounds is the refusal the loader reports with the
//! value as written and its origin.

use std::time::Duration;

use super::{format_duration, format_size};

/// What values a key accepts, as its bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepts {
    /// A duration from `.0` to `.1`, inclusive.
    Time(Duration, Duration),
    /// A byte size from `.0` to `.1`, inclusive.
    Size(u64, u64),
    /// A whole number from `.0` to `.1`, inclusive.
    Int(u64, u64),
    /// Something without numeric bounds, described in words.
    Words(&'static str),
}

impl Accepts {
    /// The bounds alone: `1ms to 10m`, `size, 1KiB to 64MiB`, `1 to 64`.
    pub fn bounds(&self) -> String {
        match *self {
            Accepts::Time(min, max) => {
                format!("{} to {}", format_duration(min), format_duration(max))
            }
            Accepts::Size(min, max) => {
                format!("size, {} to {}", format_size(min), format_size(max))
            }
            Accepts::Int(min, max) => format!("{min} to {max}"),
            Accepts::Words(words) => words.to_owned(),
        }
    }
}

/// How a key is written: what the loader accepts from a file, a variable
/// or a flag (whose values are always text) before serde reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Form {
    /// A string with a unit, `"250ms"`.
    Duration,
    /// Bytes, or a string with a unit, `"64KiB"`.
    Size,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Flag,
    /// A number; with `sizes`, also a size such as `"4GiB"`.
    Number { sizes: bool },
    /// Free text, trimmed.
    Text,
    /// `IP:port`.
    Address,
    /// A non-empty file path.
    Path,
    /// One of these names.
    Choice(Vec<&'static str>),
}

/// One declared key.
#[derive(Clone, Debug, PartialEq)]
pub struct Declared {
    /// Full dotted key: `sampler.fast_interval`, `alerts.memory_high.for`.
    pub key: String,
    pub form: Form,
    pub accepts: Accepts,
    /// A constraint involving other keys, appended to the range text
    /// (`", at least sampler.fast_interval"`); checked by `app::Config`.
    pub note: &'static str,
    /// What it does, one line. Empty when declared: the loader's
    /// catalogue fills in the field's doc comment unless the declaration
    /// gave its own (a rule's `threshold` says what that rule measures).
    pub summary: String,
}

impl Declared {
    /// Unit and accepted range, one short phrase, then the note.
    pub fn range(&self) -> String {
        format!("{}{}", self.accepts.bounds(), self.note)
    }

    /// The TOML table the key is written in: `server`, `alerts.memory_high`.
    pub fn table(&self) -> &str {
        self.key.rsplit_once('.').map_or(self.key.as_str(), |(table, _)| table)
    }

    /// The key's name within its table: `listen`, `threshold`.
    pub fn name(&self) -> &str {
        self.key.rsplit_once('.').map_or(self.key.as_str(), |(_, name)| name)
    }
}

/// The first value found outside its bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub key: String,
    /// The value in file syntax, for when no layer wrote it (a default).
    pub shown: String,
    pub reason: String,
}

/// The declarations and the first refusal of one pass over the sections.
#[derive(Debug, Default)]
pub struct Keys {
    table: String,
    declared: Vec<Declared>,
    refused: Option<Refused>,
}

impl Keys {
    /// What the pass declared, in declaration (rendering) order.
    pub fn declared(self) -> Vec<Declared> {
        self.declared
    }

    /// The first value outside its bounds, if any.
    pub fn refused(self) -> Option<Refused> {
        self.refused
    }

    /// Declares the keys `check` declares inside the table `name`.
    pub fn table(&mut self, name: &str, check: impl FnOnce(&mut Keys)) -> &mut Self {
        let outer = self.table.len();
        if !self.table.is_empty() {
            self.table.push('.');
        }
        self.table.push_str(name);
        check(self);
        self.table.truncate(outer);
        self
    }

    fn key(&self, name: &str) -> String {
        if self.table.is_empty() { name.to_owned() } else { format!("{}.{name}", self.table) }
    }

    fn declare(&mut self, name: &str, form: Form, accepts: Accepts) -> &mut Self {
        let key = self.key(name);
        self.declared.push(Declared { key, form, accepts, note: "", summary: String::new() });
        self
    }

    /// Records a refusal of `name`'s value (the first one wins).
    pub fn refuse(&mut self, name: &str, shown: String, reason: impl Into<String>) -> &mut Self {
        if self.refused.is_none() {
            let key = self.key(name);
            self.refused = Some(Refused { key, shown, reason: reason.into() });
        }
        self
    }

    /// Refuses `value` outside `min..=max`, with the bounds as the last
    /// declaration writes them and the value as `shown` writes it.
    fn between<T: PartialOrd>(
        &mut self,
        name: &str,
        value: T,
        (min, max): (T, T),
        shown: impl FnOnce() -> String,
    ) -> &mut Self {
        if value < min || value > max {
            let bounds = self.declared.last().map(|d| d.accepts.bounds()).unwrap_or_default();
            let bounds = bounds.trim_start_matches("size, ").replacen(" to ", " and ", 1);
            self.refuse(name, shown(), format!("must be between {bounds}"));
        }
        self
    }

    /// A duration from `min` to `max`.
    pub fn duration(
        &mut self,
        name: &str,
        value: Duration,
        min: Duration,
        max: Duration,
    ) -> &mut Self {
        self.declare(name, Form::Duration, Accepts::Time(min, max));
        self.between(name, value, (min, max), || format_duration(value))
    }

    /// A size from `min` to `max` bytes.
    pub fn size(&mut self, name: &str, value: super::ByteSize, min: u64, max: u64) -> &mut Self {
        self.declare(name, Form::Size, Accepts::Size(min, max));
        self.between(name, value.0, (min, max), || format_size(value.0))
    }

    /// A whole number from `min` to `max`.
    pub fn count(&mut self, name: &str, value: impl Into<u64>, min: u64, max: u64) -> &mut Self {
        let value = value.into();
        self.declare(name, Form::Integer, Accepts::Int(min, max));
        self.between(name, value, (min, max), || value.to_string())
    }

    /// `true` or `false`.
    pub fn flag(&mut self, name: &str) -> &mut Self {
        self.declare(name, Form::Flag, Accepts::Words("true or false"))
    }

    /// A value of `form` without numeric bounds, its range in `words`.
    pub fn words(&mut self, name: &str, form: Form, words: &'static str) -> &mut Self {
        self.declare(name, form, Accepts::Words(words))
    }

    /// A number, valid when `valid` says so (else its reason).
    pub fn number(
        &mut self,
        name: &str,
        sizes: bool,
        value: f64,
        words: &'static str,
        valid: Result<(), String>,
    ) -> &mut Self {
        self.declare(name, Form::Number { sizes }, Accepts::Words(words));
        if let Err(reason) = valid {
            self.refuse(name, format!("{value:?}"), reason);
        }
        self
    }

    /// Appends a constraint involving other keys to the last key's range.
    pub fn note(&mut self, note: &'static str) -> &mut Self {
        if let Some(last) = self.declared.last_mut() {
            last.note = note;
        }
        self
    }

    /// The last key's summary, in place of its field's doc comment.
    pub fn summary(&mut self, summary: String) -> &mut Self {
        if let Some(last) = self.declared.last_mut() {
            last.summary = summary;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_declares_every_key_with_its_table_and_refuses_the_first_out_of_bounds() {
        let mut keys = Keys::default();
        keys.table("sampler", |keys| {
            keys.duration("fast_interval", Duration::from_millis(5), ms(10), ms(100));
            keys.count("max_devices", 0u32, 1, 64).note(", at least one");
        });
        keys.table("alerts", |keys| {
            keys.table("memory_high", |keys| {
                keys.flag("enabled");
            });
        });
        let names: Vec<String> =
            Keys::declared(std::mem::take(&mut keys)).into_iter().map(|d| d.key).collect();
        assert_eq!(
            names,
            ["sampler.fast_interval", "sampler.max_devices", "alerts.memory_high.enabled"]
        );

        let mut keys = Keys::default();
        keys.table("sampler", |keys| {
            keys.duration("fast_interval", Duration::from_millis(5), ms(10), ms(100));
            keys.count("max_devices", 0u32, 1, 64);
        });
        let refused = keys.refused().unwrap();
        assert_eq!(refused.key, "sampler.fast_interval");
        assert_eq!(refused.shown, "5ms");
        assert_eq!(refused.reason, "must be between 10ms and 100ms");
    }

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
}
