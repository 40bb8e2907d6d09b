//! Bounds on how deeply a request nests, checked before anything recurses
//! over it.
//!
//! The GraphQL parser (a pest grammar), validation, the complexity walk,
//! filter building and SQL generation all recurse over the values and
//! selection sets a request writes. Unbounded, a 9 KB literal of nested
//! `NOT`s is enough to overflow a worker's stack, which aborts the whole
//! process. So the query text is scanned first, iteratively, for how deeply
//! its brackets nest, and the variables (already JSON, which serde_json
//! reads at most 128 levels deep) are walked iteratively too. Past the
//! limits the request is refused with `BAD_USER_INPUT` (values) or
//! `QUERY_TOO_DEEP` (selection sets) before it is parsed; within them every
//! recursive walk downstream is bounded by [`MAX_INPUT_DEPTH`] (a value
//! written as a literal, plus a variable's value inside it) or
//! [`MAX_SELECTION_NESTING`].
//!
//! Every parse of request text in this crate goes through [`parse`], so no
//! text reaches the parser unchecked.

use async_graphql::parser::types::ExecutableDocument;
use async_graphql::{Pos, ServerError, Value, Variables};

use crate::error::{Code, coded};

/// Deepest nesting of lists and input objects in one input value (an
/// argument literal, a variable's default or a variable's value): a `where`
/// of `{NOT: {NOT: {title: "x"}}}` is 3 levels, `{OR: [{title: "x"}]}` 3.
pub const MAX_INPUT_DEPTH: usize = 32;

/// Deepest nesting of selection sets (fragments included) the text may
/// have: the most the parser itself reads, far above any depth limit.
pub const MAX_SELECTION_NESTING: usize = 64;

/// Why a request nests too deeply, as the error it is answered with.
fn refusal(code: Code, message: String, pos: Option<Pos>) -> ServerError {
    let e = coded(code, message);
    ServerError {
        extensions: e.extensions,
        ..ServerError::new(e.message, pos)
    }
}

/// The line and column of byte `at` of `text`, as the parser counts them.
fn position(text: &str, at: usize) -> Pos {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(before.chars().count(), |nl| {
        before.get(nl + 1..).map_or(0, |l| l.chars().count())
    }) + 1;
    Pos { line, column }
}

/// Refuses query text whose values or selection sets nest beyond the
/// limits. One pass over the bytes, no recursion: strings, block strings
/// and comments are skipped, and each `{`, `[` or `(` is classified by what
/// encloses it. Values only occur inside parentheses (arguments, directive
/// arguments, variable definitions and their defaults), so a bracket inside
/// an argument list opens a value level; any other `{` opens a selection
/// set. A text that does not parse passes if it nests within the limits:
/// the parser then refuses it.
pub(crate) fn check_text(text: &str) -> Result<(), ServerError> {
    let b = text.as_bytes();
    // What each open bracket opened: `None` a selection set (or a stray
    // bracket), `Some(d)` a value level `d` deep (`(` is level 0). Its
    // length is bounded by the limits, which are checked on every push.
    let mut open: Vec<Option<usize>> = Vec::new();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'#' => {
                while b.get(i).is_some_and(|&c| c != b'\n' && c != b'\r') {
                    i += 1;
                }
                continue;
            }
            b'"' if b.get(i..i + 3) == Some(b"\"\"\"") => {
                i += 3;
                while i < b.len() {
                    if b.get(i..i + 4) == Some(b"\\\"\"\"") {
                        i += 4;
                    } else if b.get(i..i + 3) == Some(b"\"\"\"") {
                        i += 3;
                        break;
                    } else {
                        i += 1;
                    }
                }
                continue;
            }
            b'"' => {
                i += 1;
                while let Some(&c) = b.get(i) {
                    match c {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        // An unterminated string: the parser refuses it.
                        b'\n' | b'\r' => break,
                        _ => i += 1,
                    }
                }
                continue;
            }
            b'(' => open.push(Some(0)),
            b'{' | b'[' => {
                let level = match open.last() {
                    Some(Some(d)) => Some(d + 1),
                    _ => None,
                };
                match level {
                    Some(d) if d > MAX_INPUT_DEPTH => {
                        return Err(refusal(
                            Code::BadUserInput,
                            format!(
                                "an input value is nested more than {MAX_INPUT_DEPTH} levels deep \
                                 (each list and input object is a level); the limit is {MAX_INPUT_DEPTH}"
                            ),
                            Some(position(text, i)),
                        ));
                    }
                    None if open.len() >= MAX_SELECTION_NESTING => {
                        return Err(refusal(
                            Code::QueryTooDeep,
                            format!(
                                "the selection sets are nested more than {MAX_SELECTION_NESTING} \
                                 levels deep; the limit is {MAX_SELECTION_NESTING}"
                            ),
                            Some(position(text, i)),
                        ));
                    }
                    _ => open.push(level),
                }
            }
            b')' | b'}' | b']' => {
                open.pop();
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Refuses variables whose values nest more than [`MAX_INPUT_DEPTH`]
/// levels, walking them without recursion.
pub(crate) fn check_variables(variables: &Variables) -> Result<(), ServerError> {
    for (name, value) in variables.iter() {
        let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
        while let Some((v, depth)) = stack.pop() {
            let children: Box<dyn Iterator<Item = &Value>> = match v {
                Value::List(items) => Box::new(items.iter()),
                Value::Object(fields) => Box::new(fields.values()),
                _ => continue,
            };
            let depth = depth + 1;
            if depth > MAX_INPUT_DEPTH {
                return Err(refusal(
                    Code::BadUserInput,
                    format!(
                        "the value of variable `${name}` is nested more than {MAX_INPUT_DEPTH} \
                         levels deep (each list and object is a level); the limit is {MAX_INPUT_DEPTH}"
                    ),
                    None,
                ));
            }
            stack.extend(children.map(|c| (c, depth)));
        }
    }
    Ok(())
}

/// [`check_text`] and [`check_variables`] for one request.
pub(crate) fn check(query: &str, variables: &Variables) -> Result<(), ServerError> {
    check_text(query)?;
    check_variables(variables)
}

/// Parses request text, once [`check_text`] has found it within the
/// limits: the one way request text reaches the parser. A document that
/// nests too deeply or does not parse is `None` (the request's execution
/// reports why).
pub fn parse(query: &str) -> Option<ExecutableDocument> {
    check_text(query).ok()?;
    async_graphql::parser::parse_query(query).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(open: &str, close: &str, n: usize) -> String {
        format!("{}{{ id: \"1\" }}{}", open.repeat(n), close.repeat(n))
    }

    fn code(e: &ServerError) -> Option<Code> {
        crate::error::code_of(e)
    }

    #[test]
    fn values_within_the_limit_pass_and_beyond_it_are_refused() {
        // `(` level 0, then each `{NOT: ` one level, then the innermost object.
        let ok = format!(
            "{{ memos(where: {}) {{ id }} }}",
            nested("{NOT: ", "}", MAX_INPUT_DEPTH - 1)
        );
        assert!(check_text(&ok).is_ok());
        let deep = format!(
            "{{ memos(where: {}) {{ id }} }}",
            nested("{NOT: ", "}", MAX_INPUT_DEPTH)
        );
        let e = check_text(&deep).unwrap_err();
        assert_eq!(code(&e), Some(Code::BadUserInput));
        assert_eq!(e.locations[0].line, 1);
        // Lists count too, and variable defaults are values.
        let lists = format!(
            "query($w: [[Int]] = {}) {{ a }}",
            nested("[", "]", MAX_INPUT_DEPTH)
        );
        assert!(check_text(&lists).is_err());
    }

    #[test]
    fn a_huge_nesting_is_refused_without_recursing() {
        let deep = format!(
            "{{ memos(where: {}) {{ id }} }}",
            nested("{NOT: ", "}", 500_000)
        );
        assert!(check_text(&deep).is_err());
        let selections = format!("{}{}", "{ a ".repeat(500_000), "}".repeat(500_000));
        let e = check_text(&selections).unwrap_err();
        assert_eq!(code(&e), Some(Code::QueryTooDeep));
        assert!(parse(&selections).is_none());
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let text = format!(
            "{{ memos(where: {{title: \"{}\\\"{}\"}}) {{ id }} # {}\n a(b: \"\"\"{} \\\"\"\" {}\"\"\") }}",
            "{".repeat(100),
            "[".repeat(100),
            "{".repeat(100),
            "{".repeat(100),
            "[".repeat(100),
        );
        assert!(check_text(&text).is_ok(), "{text}");
    }

    #[test]
    fn deep_selection_sets_within_the_parser_limit_pass() {
        let text = format!("{}{}", "{ a ".repeat(40), "}".repeat(40));
        assert!(check_text(&text).is_ok());
    }

    #[test]
    fn deep_variables_are_refused() {
        let mut v = serde_json::json!({"title": "x"});
        for _ in 0..MAX_INPUT_DEPTH {
            v = serde_json::json!({ "NOT": v });
        }
        let vars = Variables::from_json(serde_json::json!({ "w": v }));
        let e = check_variables(&vars).unwrap_err();
        assert_eq!(code(&e), Some(Code::BadUserInput));
        assert!(e.message.contains("$w"), "{}", e.message);
        let mut v = serde_json::json!({"title": "x"});
        for _ in 0..MAX_INPUT_DEPTH - 1 {
            v = serde_json::json!([v]);
        }
        let vars = Variables::from_json(serde_json::json!({ "w": v }));
        assert!(check_variables(&vars).is_ok());
    }
}
