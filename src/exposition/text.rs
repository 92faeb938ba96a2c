//! A small writer for the Prometheus text exposition format (0.0.4).
//!
//! The per-device and per-process series are rebuilt from the live state on
//! every scrape, so series of exited processes and lost devices vanish at
//! once. Writing them straight to text is several times faster than
//! building `prometheus` protobuf families for thousands of series; the
//! daemon's own counters still go through the `prometheus` crate.

use std::io::Write;

/// Declares a [`Family`] constant: `family!(NAME, "metric_name", Gauge, "Help.")`,
/// with an optional visibility first.
macro_rules! family {
    ($vis:vis $ident:ident, $name:literal, $kind:ident, $help:literal) => {
        $vis const $ident: $crate::exposition::text::Family = $crate::exposition::text::Family {
            name: $name,
            help: $help,
            kind: $crate::exposition::text::Kind::$kind,
        };
    };
}
pub(crate) use family;

/// The metadata of one metric family.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

#[derive(Clone, Copy)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
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
        if magnitude < 9_007_199_254_740_992.0 && (magnitude as u64) as f64 == magnitude {
            self.start(labels);
            if value < 0.0 {
                self.out.push(b'-');
            }
            write_uint(self.out, magnitude as u64);
        } else {
            self.start(labels);
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

    /// HELP/TYPE before the first sample, then `name{labels} `.
    fn start(&mut self, labels: &str) {
        if !self.started {
            self.started = true;
            let _ = writeln!(
                self.out,
                "# HELP {name} {help}\n# TYPE {name} {kind}",
                name = self.family.name,
                help = self.family.help,
                kind = self.family.kind.as_str()
            );
        }
        self.out.extend_from_slice(self.family.name.as_bytes());
        if !labels.is_empty() {
            self.out.push(b'{');
            self.out.extend_from_slice(labels.as_bytes());
            self.out.push(b'}');
        }
        self.out.push(b' ');
    }
}

/// Appends the decimal digits of `value`.
fn write_uint(out: &mut Vec<u8>, value: u64) {
    let mut buffer = [0u8; 20];
    let mut at = buffer.len();
    let mut rest = value;
    loop {
        at -= 1;
        buffer[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&buffer[at..]);
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
        if !value.bytes().any(|byte| matches!(byte, b'\\' | b'"' | b'\n')) {
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

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAMILY: Family = Family { name: "vramd_test_bytes", help: "Test.", kind: Kind::Gauge };

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
