//! Device UUIDs as text: the 16 bytes `cuDeviceGetUuid` returns, written and
//! read the way NVML prints them (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`),
//! so the probe's devices can be matched with NVML's.

use std::fmt::Write as _;

/// Byte positions before which the text has a dash (8-4-4-4-12 hex digits).
const DASH_BEFORE: [usize; 5] = [0, 4, 6, 8, 10];
/// Hex digits per dash-separated group.
const GROUP_LENGTHS: [usize; 5] = [8, 4, 4, 4, 12];

/// Formats 16 UUID bytes as NVML prints them, `<prefix>-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`
/// (lowercase hex), with the given prefix (`"GPU"` or `"MIG"`).
pub fn format_uuid(prefix: &str, bytes: &[u8; 16]) -> String {
    let mut text = String::with_capacity(prefix.len() + 37);
    text.push_str(prefix);
    for (index, byte) in bytes.iter().enumerate() {
        if DASH_BEFORE.contains(&index) {
            text.push('-');
        }
        // Writing into a String cannot fail.
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// Parses `GPU-<8-4-4-4-12 hex>` or `MIG-<8-4-4-4-12 hex>` (hex digits in
/// either case) into 16 bytes; `None` for any other form.
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let rest = text.strip_prefix("GPU-").or_else(|| text.strip_prefix("MIG-"))?;
    let mut groups = rest.split('-');
    let mut digits = Vec::with_capacity(32);
    for length in GROUP_LENGTHS {
        let group = groups.next()?;
        if group.len() != length || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        digits.extend(group.bytes());
    }
    if groups.next().is_some() {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
    }
    Some(bytes)
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit).to_digit(16).and_then(|value| u8::try_from(value).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 16] = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd,
        0xef,
    ];

    #[test]
    fn formats_like_nvml() {
        assert_eq!(format_uuid("GPU", &BYTES), "GPU-01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(format_uuid("MIG", &[0; 16]), "MIG-00000000-0000-0000-0000-000000000000");
    }

    #[test]
    fn parse_round_trips_and_ignores_hex_case() {
        for prefix in ["GPU", "MIG"] {
            let text = format_uuid(prefix, &BYTES);
            assert_eq!(parse_uuid(&text), Some(BYTES));
            assert_eq!(parse_uuid(&text.replace("ab", "AB")), Some(BYTES));
        }
        let all = std::array::from_fn(|i| u8::try_from(i * 17).unwrap());
        assert_eq!(parse_uuid(&format_uuid("GPU", &all)), Some(all));
    }

    #[test]
    fn parse_rejects_other_forms() {
        for text in [
            "",
            "GPU-",
            "01234567-89ab-cdef-0123-456789abcdef",
            "gpu-01234567-89ab-cdef-0123-456789abcdef",
            "GPU01234567-89ab-cdef-0123-456789abcdef",
            "GPU-0123456789abcdef0123456789abcdef",
            "GPU-01234567-89ab-cdef-0123-456789abcde",
            "GPU-01234567-89ab-cdef-0123-456789abcdef0",
            "GPU-01234567-89ab-cdef-0123-456789abcdeg",
            "GPU-01234567-89ab-cdef-0123-456789abcdef-",
            "GPU-0123456+-89ab-cdef-0123-456789abcdef",
            "GPU-01234567-89ab-cdef-0123-45678-abcdef",
            "MIG-GPU-01234567-89ab-cdef-0123-456789abcdef/1/0",
            " GPU-01234567-89ab-cdef-0123-456789abcdef",
            "GPU-01234567-89ab-cdef-0123-456789abcdéf",
        ] {
            assert_eq!(parse_uuid(text), None, "{text:?}");
        }
    }
}
