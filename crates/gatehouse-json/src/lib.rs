//! Writing values as JSON text, byte for byte as `serde_json` writes them,
//! for the response writers that copy stored rows straight into a body (the
//! planned GraphQL executor, REST lists).
//!
//! Why not `serde_json::to_writer`: it escapes a string one byte at a time
//! with a table lookup and a branch per byte, the largest single item of a
//! REST list request (ten rows of ten fields are a hundred keys and as many
//! values).
//! Stored text rarely holds a character JSON must escape, so a string is
//! first checked in blocks the compiler turns into vector compares, and
//! copied as it is when clean; otherwise `serde_json` writes it.

#![warn(missing_docs)]

use serde_json::Value as Json;

/// Whether JSON requires `b` escaped in a string (RFC 8259 §7: the quote,
/// the backslash and the control characters; `serde_json` escapes exactly
/// these).
const fn needs_escape(b: u8) -> bool {
    // `|`, not `||`: no branch per byte, so the block check vectorizes.
    (b < 0x20) | (b == b'"') | (b == b'\\')
}

/// Whether `bytes` holds a byte JSON must escape. Fixed-size blocks with no
/// early exit inside, so the check vectorizes.
fn has_escape(bytes: &[u8]) -> bool {
    const BLOCK: usize = 16;
    let mut blocks = bytes.chunks_exact(BLOCK);
    for block in &mut blocks {
        if block.iter().fold(false, |acc, &b| acc | needs_escape(b)) {
            return true;
        }
    }
    blocks.remainder().iter().any(|&b| needs_escape(b))
}

/// Appends `s` as a JSON string, quotes included.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    if has_escape(s.as_bytes()) {
        // A `Vec` never fails a write, and a `str` always serializes.
        let _ = serde_json::to_writer(&mut *out, s);
        return;
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// Appends `v` as compact JSON text, exactly as `serde_json::to_writer`
/// would.
pub fn write_value(out: &mut Vec<u8>, v: &Json) {
    match v {
        Json::Null => out.extend_from_slice(b"null"),
        Json::Bool(true) => out.extend_from_slice(b"true"),
        Json::Bool(false) => out.extend_from_slice(b"false"),
        // Numbers never fail to serialize (a `Number` is always finite).
        Json::Number(n) => {
            let _ = serde_json::to_writer(&mut *out, n);
        }
        Json::String(s) => write_str(out, s),
        Json::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Json::Object(map) => {
            out.push(b'{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written(v: &Json) -> String {
        let mut out = Vec::new();
        write_value(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_match_serde_json_for_every_character_class() {
        // Every byte value below 0x80 alone, and at each position of a
        // 16-byte block and of the remainder after one.
        let mut cases: Vec<String> = vec![String::new(), "é€😀".into(), "\u{7f}".into()];
        for c in (0u8..0x80).map(char::from) {
            cases.push(c.to_string());
            for len in [15, 16, 17, 31, 32, 33, 40] {
                for at in [0, len / 2, len - 1] {
                    let mut s: Vec<char> = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"
                        .chars()
                        .take(len)
                        .collect();
                    s[at] = c;
                    cases.push(s.into_iter().collect());
                }
            }
        }
        for s in cases {
            let v = Json::String(s.clone());
            assert_eq!(written(&v), serde_json::to_string(&v).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn values_match_serde_json() {
        let values = [
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(-17),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(2.5),
            json!(1e300),
            json!(-0.0),
            json!(0.1),
            json!([]),
            json!({}),
            json!(["a\"b", 1, [null, {"k\n": "v\\"}]]),
            json!({"title": "The \"Garden\"\t#0", "tags": ["river", "letter"], "year": 1956}),
        ];
        for v in values {
            assert_eq!(written(&v), serde_json::to_string(&v).unwrap(), "{v}");
        }
    }
}
