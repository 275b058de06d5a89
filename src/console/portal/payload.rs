//! A message's payload shown as it was stored: the bytes the receiver got, only re-indented.
//! Parsing it into a JSON value and printing that would change it (numbers past f64 rounded,
//! a repeated key dropped, keys re-sorted, escapes decoded), so the indentation is done on the
//! text itself, token by token, and only whitespace between tokens changes.

/// `raw` (JSON, as the ingest accepted it) with two-space indentation. Strings, numbers, keys
/// and their order are copied exactly; a text that is not a JSON document comes back as is.
pub fn indented(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() + raw.len() / 4);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = raw.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on its line: `{}`, `[]`.
                while chars.peek().is_some_and(|n| n.is_ascii_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|n| *n == '}' || *n == ']') {
                    out.push(chars.next().unwrap_or(c));
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    if in_string || depth != 0 {
        return raw.to_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token, in order, without the whitespace between them.
    fn tokens(text: &str) -> String {
        let mut out = String::new();
        let mut in_string = false;
        let mut escaped = false;
        for c in text.chars() {
            if in_string {
                out.push(c);
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => {}
                }
            } else if c == '"' {
                in_string = true;
                out.push(c);
            } else if !c.is_ascii_whitespace() {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn what_a_parser_would_change_is_kept() {
        let raw = r#"{"b":12345678901234567890123,"a":1,"a":[],"s":"x\"]{,:\u00e9","o":{ }}"#;
        let shown = indented(raw);
        assert_eq!(
            shown,
            "{\n  \"b\": 12345678901234567890123,\n  \"a\": 1,\n  \"a\": [],\n  \
             \"s\": \"x\\\"]{,:\\u00e9\",\n  \"o\": {}\n}"
        );
        assert_eq!(tokens(&shown), tokens(raw));
    }

    #[test]
    fn scalars_and_nesting() {
        assert_eq!(indented("42"), "42");
        assert_eq!(indented(" \"a b\" "), "\"a b\"");
        assert_eq!(
            indented("[1,[2,{\"k\":null}]]"),
            "[\n  1,\n  [\n    2,\n    {\n      \"k\": null\n    }\n  ]\n]"
        );
        assert_eq!(indented("{\"unterminated"), "{\"unterminated");
    }

    proptest::proptest! {
        #[test]
        fn only_whitespace_between_tokens_changes(value in proptest::arbitrary::any::<Vec<(String, i64, bool)>>()) {
            let raw = serde_json::to_string(&value).unwrap();
            let shown = indented(&raw);
            proptest::prop_assert_eq!(tokens(&shown), tokens(&raw));
            let reread: serde_json::Value = serde_json::from_str(&shown).unwrap();
            proptest::prop_assert_eq!(reread, serde_json::from_str::<serde_json::Value>(&raw).unwrap());
        }
    }
}
