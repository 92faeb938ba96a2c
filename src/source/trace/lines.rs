//! Reading a trace file line by line with a bound on the line length.
//!
//! Owns: [`BoundedLines`]. Depends on nothing in the crate.
//!
//! The bound is enforced while reading: at most `max + 1` bytes of a line are
//! ever held, so a file that is one enormous line cannot exhaust memory.

use std::io::{BufRead, Read};

/// One line as read: its bytes without the newline, and whether a newline
/// ended it (only the last line of a file may lack one).
pub(super) struct RawLine<'a> {
    pub bytes: &'a mut [u8],
    pub terminated: bool,
}

/// Why a line could not be read.
pub(super) enum LineReadError {
    TooLong,
    Io(std::io::Error),
}

pub(super) struct BoundedLines<R> {
    reader: R,
    max: usize,
    buffer: Vec<u8>,
}

impl<R: BufRead> BoundedLines<R> {
    pub fn new(reader: R, max: usize) -> Self {
        Self { reader, max, buffer: Vec::new() }
    }

    /// The reader, to seek it before the first line is read (see
    /// `TraceLines::open_at`).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.reader
    }

    /// The next line, `Ok(None)` at the end of the file. A line is at most
    /// `max` bytes, not counting its newline.
    pub fn next_line(&mut self) -> Result<Option<RawLine<'_>>, LineReadError> {
        self.buffer.clear();
        // max bytes of content plus the newline; one byte more than a
        // well-formed line needs tells "too long" from "exactly max".
        let limit = u64::try_from(self.max).unwrap_or(u64::MAX).saturating_add(1);
        let read = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buffer)
            .map_err(LineReadError::Io)?;
        if read == 0 {
            return Ok(None);
        }
        if self.buffer.last() == Some(&b'\n') {
            self.buffer.pop();
            return Ok(Some(RawLine { bytes: &mut self.buffer, terminated: true }));
        }
        // No newline within max + 1 bytes: more than max bytes of content
        // (the file may even end right there; still too long).
        if self.buffer.len() > self.max {
            return Err(LineReadError::TooLong);
        }
        // Fewer bytes than the limit and no newline: the end of the file.
        Ok(Some(RawLine { bytes: &mut self.buffer, terminated: false }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str, max: usize) -> Vec<Result<(String, bool), &'static str>> {
        let mut reader = BoundedLines::new(text.as_bytes(), max);
        let mut out = Vec::new();
        loop {
            match reader.next_line() {
                Ok(Some(line)) => out
                    .push(Ok((String::from_utf8_lossy(line.bytes).into_owned(), line.terminated))),
                Ok(None) => return out,
                Err(LineReadError::TooLong) => {
                    out.push(Err("too long"));
                    return out;
                }
                Err(LineReadError::Io(_)) => {
                    out.push(Err("io"));
                    return out;
                }
            }
        }
    }

    #[test]
    fn lines_of_exactly_max_pass_and_one_more_byte_fails() {
        assert_eq!(lines("abc\nde\n", 3), vec![Ok(("abc".into(), true)), Ok(("de".into(), true))]);
        assert_eq!(lines("abc", 3), vec![Ok(("abc".into(), false))]);
        assert_eq!(lines("abcd\n", 3), vec![Err("too long")]);
        assert_eq!(lines("ab\nabcd", 3), vec![Ok(("ab".into(), true)), Err("too long")]);
        assert_eq!(lines("", 3), vec![]);
        assert_eq!(lines("\n\n", 0), vec![Ok((String::new(), true)), Ok((String::new(), true))]);
    }
}
