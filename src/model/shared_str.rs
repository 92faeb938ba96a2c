//! `SharedStr`: an immutable string shared by reference count, for the
//! identity strings a process carries from sample to sample (name, command
//! line, container, pod).
//!
//! Why: a process's identity is read once (from /proc, the container
//! runtime, an allocator report) and then repeated in every slow sample for
//! the process's life; sharing it makes a sample's copy a count increment
//! instead of an allocation, and lets equal identities in consecutive
//! samples be one string in memory. On the wire it is a plain string (serde
//! and JSON read and write it as `String` does; OpenAPI fields name it
//! `String` through `value_type`).
//!
//! Depends on nothing else in the crate.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// An immutable, cheaply cloned string. Equality, order and hash are those
/// of the text, never of the pointer; serde reads and writes the text
/// (serde's `rc` feature).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SharedStr(Arc<str>);

#[cfg(test)]
impl SharedStr {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the two are the same allocation (not merely equal text):
    /// what tests use to show that a string was shared, not copied.
    pub fn ptr_eq(a: &SharedStr, b: &SharedStr) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Deref for SharedStr {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl From<&str> for SharedStr {
    fn from(text: &str) -> Self {
        Self(Arc::from(text))
    }
}

impl From<String> for SharedStr {
    fn from(text: String) -> Self {
        Self(Arc::from(text))
    }
}

#[cfg(test)]
impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

#[cfg(test)]
impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_as_a_plain_string() {
        let text: SharedStr = serde_json::from_str(r#""python3 \u00e9""#).unwrap();
        assert_eq!(text, "python3 é");
        assert_eq!(serde_json::to_string(&text).unwrap(), r#""python3 é""#);
        let absent: Option<SharedStr> = serde_json::from_str("null").unwrap();
        assert_eq!(absent, None);
        assert!(serde_json::from_str::<SharedStr>("7").is_err());
        assert_eq!(format!("{text:?}"), format!("{:?}", "python3 é"));
    }

    #[test]
    fn a_clone_shares_the_text_and_equality_is_by_text() {
        let name = SharedStr::from("trainer");
        let copy = name.clone();
        assert!(SharedStr::ptr_eq(&name, &copy));
        let equal = SharedStr::from(String::from("trainer"));
        assert!(!SharedStr::ptr_eq(&name, &equal));
        assert_eq!(name, equal);
    }
}
