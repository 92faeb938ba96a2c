//! A small writer for the Prometheus text exposition format (0.0.4).
//!
//! The per-device and per-process series are rebuilt from the live state on
//! every scrape, so series of exited processes and lost devices vanish at
//! once. Writing them straight to text is several times faster than
//! building `prometheus` protobuf families for thousands of series; the
//! daemon's own counters still go through the `prometheus` crate.

use std::io::Write;

use strum::IntoStaticStr;

/// Declares a [`Family`] constant: `family!(NAME, "metric_name", Gauge, "Help.")`,
/// with an optional visibility first.
macro_rules! family {
    ($vis:vis $ident:ident, $name:literal, $kind:ident, $help:literal) => {
        $vis const $ident: $crate::exposition::text::Family = $crate::exposition::text::Family {
            name: $name,
            open: concat!($name, "{"),
            help: $help,
            kind: $crate::exposition::text::Kind::$kind,
        };
    };
}
pub(crate) use family;

/// The metadata of one metric family.
pub struct Family {
    pub name: &'static str,
    /// `name{`: written whole before a sample's labels.
    pub open: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

#[derive(Clone, Copy, IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Kind {
    Gauge,
    Counter,
}

/// Writes the samples of one family, emitting its HELP and TYPE lines
/// before the first sample (a family with no samples writes nothing).
pub struct FamilyWriter<'a> {
    out: &'a mut Vec<u8>,
    family: &'a Family,
    started: bool,
}

impl<'a> FamilyWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>, family: &'a Family) -> Self {
        Self { out, family, started: false }
    }

    /// Writes one sample; `labels` is a pre-rendered `a="x",b="y"` list.
    /// Non-finite floats are skipped: an unknown value is left out.
    pub fn float(&mut self, labels: &str, value: f64) {
        if !value.is_finite() {
            return;
        }
        // Byte counts and counters reach here as f64 but are whole numbers:
        // write them as integers (the same text as f64 `Display`, which
        // never uses an exponent) and skip shortest-float formatting.
        let magnitude = value.abs();
        self.start(labels);
        if magnitude < 9_007_199_254_740_992.0 && (magnitude as u64) as f64 == magnitude {
            if value < 0.0 {
                self.out.push(b'-');
            }
            write_uint(self.out, magnitude as u64);
        } else {
            // Shortest text that parses back to the same f64; it may use an
            // exponent (`1e-7`), which the text format allows.
            let mut buffer = ryu::Buffer::new();
            self.out.extend_from_slice(buffer.format_finite(value).as_bytes());
        }
        self.out.push(b'\n');
    }

    pub fn int(&mut self, labels: &str, value: u64) {
        self.start(labels);
        write_uint(self.out, value);
        self.out.push(b'\n');
    }

    /// [`FamilyWriter::int`] with the labels `labels` then `more` (either
    /// may be empty), without joining them in a new string first.
    pub fn int_joined(&mut self, labels: &str, more: &str, value: u64) {
        if labels.is_empty() || more.is_empty() {
            let only = if more.is_empty() { labels } else { more };
            return self.int(only, value);
        }
        self.header();
        self.out.extend_from_slice(self.family.open.as_bytes());
        self.out.extend_from_slice(labels.as_bytes());
        self.out.push(b',');
        self.out.extend_from_slice(more.as_bytes());
        self.out.extend_from_slice(b"} ");
        write_uint(self.out, value);
        self.out.push(b'\n');
    }

    /// HELP/TYPE before the first sample, then `name{labels} `.
    fn start(&mut self, labels: &str) {
        self.header();
        if labels.is_empty() {
            self.out.extend_from_slice(self.family.name.as_bytes());
            self.out.push(b' ');
        } else {
            self.out.extend_from_slice(self.family.open.as_bytes());
            self.out.extend_from_slice(labels.as_bytes());
            self.out.extend_from_slice(b"} ");
        }
    }

    /// HELP and TYPE, once, before the family's first sample.
    fn header(&mut self) {
        if !self.started {
            self.started = true;
            let _ = writeln!(
                self.out,
                "# HELP {name} {help}\n# TYPE {name} {kind}",
                name = self.family.name,
                help = self.family.help,
                kind = <&str>::from(self.family.kind)
            );
        }
    }
}

/// A sample's value: byte counts and counters are written as integers
/// directly, everything else as a float.
pub trait SampleValue: Copy {
    fn write(self, writer: &mut FamilyWriter<'_>, labels: &str);
}

impl SampleValue for u64 {
    fn write(self, writer: &mut FamilyWriter<'_>, labels: &str) {
        writer.int(labels, self);
    }
}

impl SampleValue for f64 {
    fn write(self, writer: &mut FamilyWriter<'_>, labels: &str) {
        writer.float(labels, self);
    }
}

/// Appends the decimal digits of `value`.
fn write_uint(out: &mut Vec<u8>, value: u64) {
    let mut buffer = itoa::Buffer::new();
    out.extend_from_slice(buffer.format(value).as_bytes());
}

/// Builds a label list, escaping values as the text format requires.
#[derive(Default, Clone)]
pub struct Labels(String);

impl Labels {
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.push(name, value);
        self
    }

    pub fn push(&mut self, name: &str, value: &str) {
        // Labels are cloned with exact capacity and then extended: one
        // amortised growth here instead of one per `push_str`.
        self.0.reserve(name.len() + value.len() + 4);
        if !self.0.is_empty() {
            self.0.push(',');
        }
        self.0.push_str(name);
        self.0.push_str("=\"");
        if memchr::memchr3(b'\\', b'"', b'\n', value.as_bytes()).is_none() {
            self.0.push_str(value);
            self.0.push('"');
            return;
        }
        for character in value.chars() {
            match character {
                '\\' => self.0.push_str("\\\\"),
                '"' => self.0.push_str("\\\""),
                '\n' => self.0.push_str("\\n"),
                other => self.0.push(other),
            }
        }
        self.0.push('"');
    }

    /// Empties the list, keeping its buffer for reuse.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// A copy with room for `extra` more bytes, so the pushes that follow
    /// write into it without reallocating.
    pub fn clone_with_room(&self, extra: usize) -> Self {
        let mut labels = String::with_capacity(self.0.len() + extra);
        labels.push_str(&self.0);
        Self(labels)
    }

    /// Adds a label whose value is a number.
    pub fn with_uint(self, name: &str, value: u64) -> Self {
        self.with(name, itoa::Buffer::new().format(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    family!(FAMILY, "vramd_test_bytes", Gauge, "Test.");

    #[test]
    fn numeric_labels_and_roomy_clones_render_like_any_other() {
        let base = Labels::default().with("gpu", "0");
        let labels = base.clone_with_room(64).with_uint("pid", 4242).with("process", "py");
        assert_eq!(labels.as_str(), r#"gpu="0",pid="4242",process="py""#);
        assert_eq!(Labels::default().with_uint("pid", 0).as_str(), r#"pid="0""#);
    }

    #[test]
    fn joined_labels_write_like_one_list() {
        let mut out = Vec::new();
        {
            let mut writer = FamilyWriter::new(&mut out, &FAMILY);
            writer.int_joined("gpu=\"0\"", "kind=\"compute\"", 1);
            writer.int_joined("gpu=\"1\"", "", 2);
            writer.int_joined("", "kind=\"x\"", 3);
            writer.int_joined("", "", 4);
        }
        let text = String::from_utf8(out).unwrap();
        let samples: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "vramd_test_bytes{gpu=\"0\",kind=\"compute\"} 1",
                "vramd_test_bytes{gpu=\"1\"} 2",
                "vramd_test_bytes{kind=\"x\"} 3",
                "vramd_test_bytes 4",
            ]
        );
        assert_eq!(text.matches("# HELP").count(), 1);
    }

    #[test]
    fn label_values_are_escaped() {
        let labels = Labels::default().with("process", "a\"b\\c\nd");
        assert_eq!(labels.as_str(), r#"process="a\"b\\c\nd""#);
    }

    #[test]
    fn header_once_and_only_with_samples() {
        let mut out = Vec::new();
        {
            let mut writer = FamilyWriter::new(&mut out, &FAMILY);
            writer.float("", f64::NAN);
        }
        assert!(out.is_empty(), "no samples, no metadata");
        {
            let mut writer = FamilyWriter::new(&mut out, &FAMILY);
            writer.int("gpu=\"0\"", 5);
            writer.float("gpu=\"1\"", 0.5);
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "# HELP vramd_test_bytes Test.\n# TYPE vramd_test_bytes gauge\nvramd_test_bytes{gpu=\"0\"} 5\nvramd_test_bytes{gpu=\"1\"} 0.5\n"
        );
    }
}
