//! Kubernetes JSONPath (k8s.io/client-go/util/jsonpath), as the apiextensions-apiserver uses
//! it for CRD `additionalPrinterColumns[].jsonPath` and `selectableFields[].jsonPath`.
//!
//! The parser is a port of `jsonpath/parser.go` (same grammar, same quirks, same error texts);
//! evaluation ports `jsonpath.go` on `serde_json::Value` with the apiserver's view of JSON:
//! integers are Go `int64`, other numbers `float64`, objects `map[string]interface{}`.
//! Supported: `.a.b`, `.a['b']` (the quoted key is itself parsed as a path, so `['b.c']` is
//! `.b.c` as upstream; escape dots instead: `.a.b\.c`), `[0]`, `[-1]`, `[*]`, `.a[*].b`, slices
//! `[0:2]`, `[::2]`, unions `[0,2]`, `['a','b']`, filters `[?(@.type=="Ready")]` with
//! `== != < > <= >=` (Go template comparison rules: int vs float is an error) and existence
//! `[?(@.x)]`, recursive descent `..name`, `*`, literals, and the `{...}` template form.
//!
//! Deliberate differences from upstream:
//! * `{range}`/`{end}` blocks are not evaluated (an error); printer columns do not use them.
//! * `.a["x"]` (double quotes) is rejected as upstream does (`invalid array index "x"`).
//! * Object members are visited in document order where Go visits maps in random order
//!   (`*`, `..` on objects).
//! * "Is a letter/digit" for non-ASCII characters uses Rust's Unicode tables, which differ
//!   slightly from Go's; it only changes which error a malformed expression reports.
//! * Parsing depth of nested sub-expressions (unions, filters) is bounded.

use serde_json::{Number, Value};
use std::borrow::Cow;

use crate::duration;
use crate::field::{FieldError, Path};

/// A parsed JSONPath template.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    root: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    List(Vec<Node>),
    Text(String),
    Field(String),
    Array([Param; 3]),
    Filter { left: Vec<Node>, right: Vec<Node>, op: String },
    Int(i64),
    Float(f64),
    Bool(bool),
    Wildcard,
    Recursive,
    Union(Vec<Vec<Node>>),
    Identifier(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

const MAX_DEPTH: usize = 16;

/// Parse a JSONPath the way the apiserver parses CRD paths: an expression that does not start
/// with `{` is wrapped in braces (`.status.phase` means `{.status.phase}`), one that does is
/// parsed as a template.
pub fn parse(expr: &str) -> Result<JsonPath, String> {
    if expr.starts_with('{') { parse_template(expr) } else { parse_template(&format!("{{{expr}}}")) }
}

/// `jsonpath.Parse`: a template of literal text and `{...}` actions.
pub fn parse_template(text: &str) -> Result<JsonPath, String> {
    Ok(JsonPath { root: parse_at_depth(text, 0)? })
}

/// The rule CRD validation applies to `additionalPrinterColumns[].jsonPath` (and the scale
/// subresource paths): `validateSimpleJSONPath`. Returns the error detail. Note that for printer
/// columns an empty path is reported as `Required value` by the caller; see
/// [`printer_column_json_path_errors`].
pub fn validate_printer_column_path(expr: &str) -> Result<(), String> {
    if expr.is_empty() {
        Err("must not be empty".to_string())
    } else if !expr.starts_with('.') {
        Err("must be a simple json path starting with .".to_string())
    } else {
        Ok(())
    }
}

/// The `jsonPath` errors of `ValidateCustomResourceColumnDefinition` for the column at
/// `column` (e.g. `spec.versions[0].additionalPrinterColumns[1]`). Upstream names the field
/// `JSONPath` (capitalised) in these errors, and so does this function.
pub fn printer_column_json_path_errors(expr: &str, column: &Path) -> Vec<FieldError> {
    let path = column.child("JSONPath");
    if expr.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    match validate_printer_column_path(expr) {
        Ok(()) => Vec::new(),
        Err(detail) => vec![FieldError::invalid(path, expr, detail)],
    }
}

impl JsonPath {
    /// `JSONPath.FindResults`: one list of results per top-level template node (text nodes give
    /// their text). With `allow_missing_keys` (what the apiserver sets for printer columns and
    /// selectable fields) a missing field yields no result instead of `<field> is not found`.
    /// Values that do not come from `data` (literals, bytes of a string under `*`) are owned.
    pub fn find_results<'a>(
        &self,
        data: &'a Value,
        allow_missing_keys: bool,
    ) -> Result<Vec<Vec<Cow<'a, Value>>>, String> {
        let ev = Evaluator { allow_missing_keys };
        let mut full = Vec::with_capacity(self.root.len());
        for node in &self.root {
            let results = ev.walk(vec![Cow::Borrowed(data)], node).map_err(|e| e.msg)?;
            full.push(results);
        }
        Ok(full)
    }

    /// All results, flattened, with missing keys allowed; an evaluation error gives no results.
    #[cfg(test)]
    pub fn eval<'a>(&self, data: &'a Value) -> Vec<Cow<'a, Value>> {
        self.find_results(data, true).map(|r| r.into_iter().flatten().collect()).unwrap_or_default()
    }

    /// `JSONPath.Execute`, as `kubectl get -o jsonpath=...` prints: results separated by spaces,
    /// objects and arrays as JSON, `null` as `<nil>`.
    #[cfg(test)]
    pub fn execute(&self, data: &Value, allow_missing_keys: bool) -> Result<String, String> {
        let mut out = String::new();
        for results in self.find_results(data, allow_missing_keys)? {
            for (i, r) in results.iter().enumerate() {
                match r.as_ref() {
                    Value::Null => out.push_str("<nil>"),
                    v => out.push_str(&print_text(v)),
                }
                if i + 1 != results.len() {
                    out.push(' ');
                }
            }
        }
        Ok(out)
    }

    /// The cell of a printer column with this path for `obj`, as the apiextensions-apiserver's
    /// table convertor computes it: the first result (none, or an evaluation error, gives
    /// `null`, which kubectl shows as `<none>`), formatted by [`cell_value`].
    pub fn printer_cell(&self, obj: &Value, column_type: &str, now_unix_secs: i64) -> Value {
        match self.find_results(obj, true) {
            Ok(results) => match results.first().and_then(|r| r.first()) {
                Some(v) => cell_value(&[v.as_ref()], column_type, now_unix_secs),
                None => Value::Null,
            },
            Err(_) => Value::Null,
        }
    }

    /// The value of a CRD selectable field with this path for `obj`, as the field set of the
    /// custom resource strategy computes it: `fmt.Sprint` of the single result, `""` when there
    /// is none (or it is `null`).
    #[cfg(test)]
    pub fn selectable_field_value(&self, obj: &Value) -> Result<String, String> {
        let results =
            self.find_results(obj, true).map_err(|e| format!("unexpected error finding value with jsonPath: {e}"))?;
        match results.first() {
            Some(first) if !first.is_empty() => {
                if results.len() > 1 || first.len() > 1 {
                    return Err("unexpectedly received more than one JSON path result".to_string());
                }
                match first.first().map(|v| v.as_ref()) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(v) => Ok(go_sprint(v)),
                }
            }
            _ => Ok(String::new()),
        }
    }
}

/// Format a printer-column cell from the path's results (only the first is used), as the
/// table convertor does for each column `type`:
/// * `string`: the value printed as text (`kubectl -o jsonpath` style; objects and arrays as
///   JSON, numbers as Go prints them, `null` as `<no value>`);
/// * `integer`: integers as is, floats truncated; `number`: any number; `boolean`: booleans;
/// * `date`: an RFC 3339 string as an age (`5m`, `3d`); an unparsable one gives `<invalid>`,
///   an empty one `<unknown>`;
/// * anything else, a value of the wrong type, or no value: `null` (kubectl shows `<none>`).
pub fn cell_value(values: &[&Value], column_type: &str, now_unix_secs: i64) -> Value {
    let Some(value) = values.first() else {
        return Value::Null;
    };
    if column_type == "string" {
        return Value::String(match value {
            Value::Null => "<no value>".to_string(),
            v => print_text(v),
        });
    }
    match (column_type, value) {
        (_, Value::Null) => Value::Null,
        ("integer", Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            // Go's int64(float64): truncation (saturating here where Go's is undefined).
            (None, Some(f)) => Value::from(f as i64),
            _ => Value::Null,
        },
        ("number", Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => go_float_json_value(f),
            _ => Value::Null,
        },
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(s)) => {
            if s.is_empty() || s == "null" {
                return Value::String("<unknown>".to_string());
            }
            match duration::parse_rfc3339(s) {
                Some((secs, nanos)) => Value::String(duration::age_since(secs, nanos, now_unix_secs)),
                None => Value::String("<invalid>".to_string()),
            }
        }
        _ => Value::Null,
    }
}

/// A float64 cell: Go's JSON encoder writes integral floats without a fraction (`3`, not
/// `3.0`), so integral values that an `f64` holds exactly are given as integers.
fn go_float_json_value(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        Value::from(f as i64)
    } else {
        Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)
    }
}

// ---------------------------------------------------------------------------------------------
// Parser (parser.go).
// ---------------------------------------------------------------------------------------------

fn parse_at_depth(text: &str, depth: usize) -> Result<Vec<Node>, String> {
    if depth > MAX_DEPTH {
        return Err("jsonpath expression nested too deeply".to_string());
    }
    let mut p = Parser { input: text, pos: 0, start: 0, width: 0, depth };
    let mut root = Vec::new();
    loop {
        // parseText
        if p.rest().starts_with('{') {
            if p.pos > p.start {
                root.push(Node::Text(p.consume_text().to_string()));
            }
            p.pos += 1;
            p.consume_text();
            let mut list = Vec::new();
            p.parse_inside_action(&mut list)?;
            root.push(Node::List(list));
            continue;
        }
        if p.next().is_none() {
            if p.pos > p.start {
                root.push(Node::Text(p.consume_text().to_string()));
            }
            return Ok(root);
        }
    }
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        self.input.get(self.pos..).unwrap_or("")
    }

    fn next(&mut self) -> Option<char> {
        match self.rest().chars().next() {
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                Some(c)
            }
            None => {
                self.width = 0;
                None
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        let r = self.next();
        self.backup();
        r
    }

    fn backup(&mut self) {
        self.pos = self.pos.saturating_sub(self.width);
    }

    fn consume_text(&mut self) -> &'a str {
        let value = self.input.get(self.start..self.pos).unwrap_or("");
        self.start = self.pos;
        value
    }

    fn byte_before(&self, back: usize) -> Option<u8> {
        self.pos.checked_sub(back).and_then(|i| self.input.as_bytes().get(i)).copied()
    }

    /// `parseAction`: parse `{text}` and return the nodes of its action.
    fn parse_action(&self, text: &str) -> Result<Vec<Node>, String> {
        let nodes = parse_at_depth(&format!("{{{text}}}"), self.depth + 1)?;
        match nodes.into_iter().next() {
            Some(Node::List(list)) => Ok(list),
            _ => Ok(Vec::new()),
        }
    }

    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            let rest = self.rest();
            if rest.starts_with('}') {
                self.pos += 1;
                self.consume_text();
                return Ok(());
            }
            if rest.starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if rest.starts_with("..") {
                self.parse_recursive(cur)?;
                continue;
            }
            match self.next() {
                None | Some('\r') | Some('\n') => return Err("unclosed action".to_string()),
                Some(' ') | Some('@') | Some('$') => {
                    self.consume_text();
                }
                Some('[') => self.parse_array(cur)?,
                Some(q @ ('"' | '\'')) => self.parse_quote(cur, q)?,
                Some('.') => self.parse_field(cur),
                Some(c) if c == '+' || c == '-' || is_digit(c) => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                Some(c) if is_alphanumeric(c) => {
                    self.backup();
                    self.parse_identifier(cur);
                }
                Some(c) => return Err(format!("unrecognized character in action: {}", go_unicode(c))),
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) {
        loop {
            let r = self.next();
            if is_terminator(r) {
                self.backup();
                break;
            }
        }
        let value = self.consume_text();
        cur.push(match value {
            "true" => Node::Bool(true),
            "false" => Node::Bool(false),
            other => Node::Identifier(other.to_string()),
        });
    }

    fn parse_recursive(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        if matches!(cur.last(), Some(Node::Recursive)) {
            return Err("invalid multiple recursive descent".to_string());
        }
        self.pos += 2;
        self.consume_text();
        cur.push(Node::Recursive);
        if self.peek().is_some_and(is_alphanumeric) {
            self.parse_field(cur);
        }
        Ok(())
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        if matches!(self.peek(), Some('+' | '-')) {
            self.next();
        }
        loop {
            match self.next() {
                Some(c) if c == '.' || is_digit(c) => {}
                _ => {
                    self.backup();
                    break;
                }
            }
        }
        let value = self.consume_text();
        if let Ok(i) = value.parse::<i64>() {
            cur.push(Node::Int(i));
        } else if let Some(f) = value.parse::<f64>().ok().filter(|f| f.is_finite()) {
            cur.push(Node::Float(f));
        } else {
            return Err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated array".to_string()),
                Some(']') => break,
                _ => {}
            }
        }
        let text = self.consume_text();
        let mut inner = text.get(1..text.len().saturating_sub(1)).unwrap_or("");
        if inner == "*" {
            inner = ":";
        }

        // union operator
        let parts: Vec<&str> = inner.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::with_capacity(parts.len());
            for part in parts {
                union.push(self.parse_action(&format!("[{}]", part.trim_matches(' ')))?);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }

        // dict key: ^'([^']*)'$
        if inner.len() >= 2 && inner.starts_with('\'') && inner.ends_with('\'') {
            let key = inner.get(1..inner.len() - 1).unwrap_or("");
            if !key.contains('\'') {
                let nodes = self.parse_action(&format!(".{key}"))?;
                cur.extend(nodes);
                return Ok(());
            }
        }

        // slice operator: ^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$
        let groups = slice_groups(inner).ok_or_else(|| format!("invalid array index {inner}"))?;
        let mut params = [Param::default(); 3];
        for (i, group) in groups.iter().enumerate() {
            let param = if !group.is_empty() {
                let digits = if i > 0 { group.get(1..).unwrap_or("") } else { group };
                if i > 0 && digits.is_empty() {
                    Param::default()
                } else {
                    let value = digits.parse::<i64>().map_err(|_| format!("array index {digits} is not a number"))?;
                    Param { value, known: true, derived: false }
                }
            } else if i == 1 {
                // `[n]` is the slice `[n:n+1]`.
                Param { value: params[0].value.wrapping_add(1), known: true, derived: true }
            } else {
                Param::default()
            };
            if let Some(slot) = params.get_mut(i) {
                *slot = param;
            }
        }
        cur.push(Node::Array(params));
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        self.pos += 3;
        self.consume_text();
        let mut begin = false;
        let mut end = false;
        let mut pair = '\0';
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated filter".to_string()),
                Some(r @ ('"' | '\'')) => {
                    if !begin {
                        begin = true;
                        pair = r;
                        continue;
                    }
                    if self.byte_before(2) != Some(b'\\') && r == pair {
                        end = true;
                    }
                }
                // In the text checked below, quotes appear at most once, paired.
                Some(')') if begin == end => break,
                _ => {}
            }
        }
        if self.next() != Some(']') {
            return Err("unclosed array expect ]".to_string());
        }
        let text = self.consume_text();
        let text = text.get(..text.len().saturating_sub(2)).unwrap_or("");
        match split_filter(text) {
            None => {
                let left = self.parse_action(text)?;
                cur.push(Node::Filter { left, right: Vec::new(), op: "exists".to_string() });
            }
            Some((l, op, r)) => {
                let left = self.parse_action(l)?;
                let right = self.parse_action(r)?;
                cur.push(Node::Filter { left, right, op: op.to_string() });
            }
        }
        Ok(())
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated quoted string".to_string()),
                Some(c) if c == end && self.byte_before(2) != Some(b'\\') => break,
                _ => {}
            }
        }
        let value = self.consume_text();
        let s = unquote_extend(value).map_err(|e| format!("unquote string {value} error {e}"))?;
        cur.push(Node::Text(s));
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) {
        self.consume_text();
        while self.advance() {}
        let value = self.consume_text();
        if value == "*" {
            cur.push(Node::Wildcard);
        } else {
            cur.push(Node::Field(value.replace('\\', "")));
        }
    }

    /// Scan to the next terminator not escaped by a backslash.
    fn advance(&mut self) -> bool {
        let r = self.next();
        if r == Some('\\') {
            self.next();
        } else if is_terminator(r) {
            self.backup();
            return false;
        }
        true
    }
}

fn is_terminator(r: Option<char>) -> bool {
    match r {
        None => true,
        Some(c) => matches!(c, ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'),
    }
}

/// Go's `unicode.IsDigit` (approximated by Rust's tables outside ASCII).
fn is_digit(c: char) -> bool {
    c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric())
}

/// `isAlphaNumeric`: `_`, a letter or a digit.
fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || is_digit(c)
}

/// Go's `%#U`: `U+0041 'A'`, without the quoted character when it is not printable.
fn go_unicode(c: char) -> String {
    let printable = !c.is_control() && (c == ' ' || !c.is_whitespace());
    if printable { format!("U+{:04X} '{c}'", c as u32) } else { format!("U+{:04X}", c as u32) }
}

/// The groups of `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$`, `""` for a group that did not match.
fn slice_groups(s: &str) -> Option<[&str; 3]> {
    let b = s.as_bytes();
    let mut i = 0usize;
    let scan = |i: &mut usize| {
        if b.get(*i) == Some(&b'-') {
            *i += 1;
        }
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
    };
    scan(&mut i);
    let g0 = s.get(..i)?;
    let mut groups = ["", ""];
    for g in groups.iter_mut() {
        if b.get(i) == Some(&b':') {
            let start = i;
            i += 1;
            scan(&mut i);
            *g = s.get(start..i)?;
        }
    }
    if i != b.len() {
        return None;
    }
    Some([g0, groups[0], groups[1]])
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$` with Go's backtracking: the operator is the run of operator
/// characters after the left side, minus its last character when nothing else follows.
fn split_filter(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let left_end = text.find(is_op)?;
    if left_end == 0 {
        return None;
    }
    let after = text.get(left_end..)?;
    let op_len = after.find(|c: char| !is_op(c)).unwrap_or(after.len());
    let op_len = if op_len < after.len() {
        op_len
    } else if op_len >= 2 {
        op_len - 1
    } else {
        return None;
    };
    Some((text.get(..left_end)?, after.get(..op_len)?, after.get(op_len..)?))
}

/// `UnquoteExtend`: `strconv.Unquote` that also accepts single-quoted strings. Escapes that
/// produce bytes which are not UTF-8 (`\xff`) are replaced by U+FFFD.
fn unquote_extend(s: &str) -> Result<String, &'static str> {
    const SYNTAX: &str = "invalid syntax";
    let b = s.as_bytes();
    let (Some(&quote), Some(&last)) = (b.first(), b.last()) else {
        return Err(SYNTAX);
    };
    if b.len() < 2 || quote != last || (quote != b'"' && quote != b'\'') {
        return Err(SYNTAX);
    }
    let inner = s.get(1..s.len() - 1).ok_or(SYNTAX)?;
    if !inner.contains('\\') && !inner.contains(quote as char) {
        return Ok(inner.to_string());
    }
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut rest = inner;
    while !rest.is_empty() {
        let (c, multibyte, tail) = unquote_char(rest, quote).ok_or(SYNTAX)?;
        rest = tail;
        if c < 0x80 || !multibyte {
            out.push(c as u8);
        } else {
            let ch = char::from_u32(c).ok_or(SYNTAX)?;
            let mut buf = [0u8; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `strconv.UnquoteChar`: the decoded value, whether it is a multibyte rune (as opposed to
/// a single byte), and the rest of the string.
fn unquote_char(s: &str, quote: u8) -> Option<(u32, bool, &str)> {
    let b = s.as_bytes();
    let c = *b.first()?;
    if c == quote {
        return None;
    }
    if c >= 0x80 {
        let ch = s.chars().next()?;
        return Some((ch as u32, true, s.get(ch.len_utf8()..)?));
    }
    if c != b'\\' {
        return Some((u32::from(c), false, s.get(1..)?));
    }
    let esc = *b.get(1)?;
    let tail_after = |n: usize| s.get(2 + n..);
    let simple = |v: u8| Some((u32::from(v), false, s.get(2..)?));
    match esc {
        b'a' => simple(7),
        b'b' => simple(8),
        b'f' => simple(12),
        b'n' => simple(b'\n'),
        b'r' => simple(b'\r'),
        b't' => simple(b'\t'),
        b'v' => simple(11),
        b'\\' => simple(b'\\'),
        b'\'' | b'"' => {
            if esc != quote {
                return None;
            }
            simple(esc)
        }
        b'x' | b'u' | b'U' => {
            let n = match esc {
                b'x' => 2,
                b'u' => 4,
                _ => 8,
            };
            let hex = b.get(2..2 + n)?;
            let mut v: u32 = 0;
            for h in hex {
                v = (v << 4) | char::from(*h).to_digit(16)?;
            }
            if esc == b'x' {
                return Some((v, false, tail_after(n)?));
            }
            char::from_u32(v)?;
            Some((v, true, tail_after(n)?))
        }
        b'0'..=b'7' => {
            let digits = b.get(2..4)?;
            let mut v = u32::from(esc - b'0');
            for d in digits {
                if !(b'0'..=b'7').contains(d) {
                    return None;
                }
                v = (v << 3) | u32::from(d - b'0');
            }
            if v > 255 {
                return None;
            }
            Some((v, false, tail_after(2)?))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation (jsonpath.go).
// ---------------------------------------------------------------------------------------------

/// An evaluation error, with the values the failing Go function returned alongside it (an
/// existence filter counts them even on error, as upstream does).
struct EvalError<'a> {
    msg: String,
    values: Vec<Cow<'a, Value>>,
}

type EvalResult<'a> = Result<Vec<Cow<'a, Value>>, EvalError<'a>>;

fn fail<'a>(msg: impl Into<String>, values: Vec<Cow<'a, Value>>) -> EvalError<'a> {
    EvalError { msg: msg.into(), values }
}

struct Evaluator {
    allow_missing_keys: bool,
}

/// Apply `f` to the value, keeping borrowed results borrowed and cloning those of owned values.
fn map_ref<'a>(v: &Cow<'a, Value>, f: impl for<'b> Fn(&'b Value) -> Vec<&'b Value>) -> Vec<Cow<'a, Value>> {
    match v {
        Cow::Borrowed(b) => f(b).into_iter().map(Cow::Borrowed).collect(),
        Cow::Owned(o) => f(o).into_iter().map(|x| Cow::Owned(x.clone())).collect(),
    }
}

/// Members of an object, items of an array (what `*` and `..` descend into, besides the bytes
/// of strings).
fn members(v: &Value) -> Vec<&Value> {
    match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => Vec::new(),
    }
}

impl Evaluator {
    fn walk<'a>(&self, input: Vec<Cow<'a, Value>>, node: &Node) -> EvalResult<'a> {
        match node {
            Node::List(nodes) => self.eval_list(input, nodes),
            Node::Text(t) => Ok(vec![Cow::Owned(Value::String(t.clone()))]),
            Node::Field(name) => self.eval_field(input, name),
            Node::Array(params) => self.eval_array(input, params),
            Node::Filter { left, right, op } => self.eval_filter(input, left, right, op),
            Node::Int(i) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*i))).collect()),
            Node::Float(f) => {
                let v = Number::from_f64(*f).map(Value::Number).unwrap_or(Value::Null);
                Ok(input.iter().map(|_| Cow::Owned(v.clone())).collect())
            }
            Node::Bool(b) => Ok(input.iter().map(|_| Cow::Owned(Value::Bool(*b))).collect()),
            Node::Wildcard => Ok(self.eval_wildcard(input)),
            Node::Recursive => Ok(self.eval_recursive(input)),
            Node::Union(lists) => {
                let mut result = Vec::new();
                for list in lists {
                    match self.eval_list(input.clone(), list) {
                        Ok(values) => result.extend(values),
                        Err(e) => return Err(fail(e.msg, input)),
                    }
                }
                Ok(result)
            }
            Node::Identifier(name) => match name.as_str() {
                "range" | "end" => Err(fail(format!("jsonpath {name} blocks are not supported"), input)),
                _ => Err(fail(format!("unrecognized identifier {name}"), input)),
            },
        }
    }

    fn eval_list<'a>(&self, input: Vec<Cow<'a, Value>>, nodes: &[Node]) -> EvalResult<'a> {
        let mut cur = input;
        for node in nodes {
            cur = self.walk(cur, node)?;
        }
        Ok(cur)
    }

    fn eval_field<'a>(&self, input: Vec<Cow<'a, Value>>, name: &str) -> EvalResult<'a> {
        if input.is_empty() {
            return Ok(input);
        }
        let mut results = Vec::new();
        for v in &input {
            results.extend(map_ref(v, |x| match x {
                Value::Object(m) => m.get(name).into_iter().collect(),
                _ => Vec::new(),
            }));
        }
        if results.is_empty() && !self.allow_missing_keys {
            return Err(fail(format!("{name} is not found"), results));
        }
        Ok(results)
    }

    fn eval_array<'a>(&self, input: Vec<Cow<'a, Value>>, params: &[Param; 3]) -> EvalResult<'a> {
        let mut result = Vec::new();
        for v in &input {
            let len = match v.as_ref() {
                Value::Null => continue,
                Value::Array(a) => i64::try_from(a.len()).unwrap_or(i64::MAX),
                other => return Err(fail(format!("{} is not array or slice", go_type(other)), input.clone())),
            };
            let mut p = *params;
            if !p[0].known {
                p[0].value = 0;
            }
            if p[0].value < 0 {
                p[0].value = p[0].value.wrapping_add(len);
            }
            if !p[1].known {
                p[1].value = len;
            }
            if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
                p[1].value = p[1].value.wrapping_add(len);
            }
            let (start, end) = (p[0].value, p[1].value);
            if end == start {
                // Requesting zero elements ends the whole evaluation of this node (upstream
                // returns here, skipping the remaining inputs).
                return Ok(result);
            }
            if start >= len || start < 0 {
                return Err(fail(format!("array index out of bounds: index {start}, length {len}"), input.clone()));
            }
            if end > len || end < 0 {
                let shown = end.wrapping_sub(1);
                return Err(fail(format!("array index out of bounds: index {shown}, length {len}"), input.clone()));
            }
            if start > end {
                return Err(fail(format!("starting index {start} is greater than ending index {end}"), input.clone()));
            }
            let step = if p[2].known {
                if p[2].value <= 0 {
                    return Err(fail("step must be > 0", input.clone()));
                }
                usize::try_from(p[2].value).unwrap_or(usize::MAX)
            } else {
                1
            };
            let (start, end) = (usize::try_from(start).unwrap_or(0), usize::try_from(end).unwrap_or(0));
            result.extend(map_ref(v, |x| match x {
                Value::Array(a) => a.get(start..end).unwrap_or(&[]).iter().step_by(step).collect(),
                _ => Vec::new(),
            }));
        }
        Ok(result)
    }

    fn eval_filter<'a>(&self, input: Vec<Cow<'a, Value>>, left: &[Node], right: &[Node], op: &str) -> EvalResult<'a> {
        let mut results: Vec<Cow<'a, Value>> = Vec::new();
        for v in &input {
            if !matches!(v.as_ref(), Value::Array(_)) {
                let msg = format!("{} is not array or slice and cannot be filtered", go_sprint(v));
                return Err(fail(msg, input.clone()));
            }
            for item in map_ref(v, members) {
                let lefts = self.eval_list(vec![item.clone()], left);
                if op == "exists" {
                    let found = match &lefts {
                        Ok(l) => !l.is_empty(),
                        Err(e) => !e.values.is_empty(),
                    };
                    if found {
                        results.push(item);
                    }
                    continue;
                }
                let lefts = lefts.map_err(|e| fail(e.msg, input.clone()))?;
                let l = match lefts.as_slice() {
                    [] => continue,
                    [one] => one.clone(),
                    _ => return Err(fail("can only compare one element at a time", input.clone())),
                };
                let rights = self.eval_list(vec![item.clone()], right).map_err(|e| fail(e.msg, input.clone()))?;
                let r = match rights.as_slice() {
                    [] => continue,
                    [one] => one.clone(),
                    _ => return Err(fail("can only compare one element at a time", input.clone())),
                };
                match compare(op, &l, &r) {
                    Ok(true) => results.push(item),
                    Ok(false) => {}
                    Err(msg) => return Err(fail(msg, results)),
                }
            }
        }
        Ok(results)
    }

    fn eval_wildcard<'a>(&self, input: Vec<Cow<'a, Value>>) -> Vec<Cow<'a, Value>> {
        let mut results = Vec::new();
        for v in &input {
            if let Value::String(s) = v.as_ref() {
                // Go indexes a string into its bytes (uint8 values).
                results.extend(s.bytes().map(|b| Cow::Owned(Value::from(b))));
            } else {
                results.extend(map_ref(v, members));
            }
        }
        results
    }

    /// Pre-order: each value that has children (objects, arrays, non-empty strings), then its
    /// descendants. Iterative, so deep documents cannot overflow the stack.
    fn eval_recursive<'a>(&self, input: Vec<Cow<'a, Value>>) -> Vec<Cow<'a, Value>> {
        let mut result = Vec::new();
        let mut stack: Vec<Cow<'a, Value>> = input.into_iter().rev().collect();
        while let Some(v) = stack.pop() {
            let (container, non_empty_string) = match v.as_ref() {
                Value::String(s) => (false, !s.is_empty()),
                Value::Object(_) | Value::Array(_) => (true, false),
                _ => (false, false),
            };
            if non_empty_string {
                result.push(v);
            } else if container {
                let children = map_ref(&v, members);
                if !children.is_empty() {
                    stack.extend(children.into_iter().rev());
                    result.push(v);
                }
            }
        }
        result
    }
}

/// The Go type the apiserver's unstructured view gives a JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.as_i64().is_some() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

// ---------------------------------------------------------------------------------------------
// Comparisons of the forked text/template package (eq, lt, ...).
// ---------------------------------------------------------------------------------------------

enum Basic<'v> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'v str),
}

const BAD_COMPARISON_TYPE: &str = "invalid type for comparison";
const BAD_COMPARISON: &str = "incompatible types for comparison";

fn basic_kind(v: &Value) -> Result<Basic<'_>, String> {
    match v {
        Value::Bool(b) => Ok(Basic::Bool(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Basic::Int(i)),
            (None, Some(f)) => Ok(Basic::Float(f)),
            _ => Err(BAD_COMPARISON_TYPE.to_string()),
        },
        Value::String(s) => Ok(Basic::Str(s)),
        _ => Err(BAD_COMPARISON_TYPE.to_string()),
    }
}

fn go_equal(a: &Value, b: &Value) -> Result<bool, String> {
    match (basic_kind(a)?, basic_kind(b)?) {
        (Basic::Bool(x), Basic::Bool(y)) => Ok(x == y),
        (Basic::Int(x), Basic::Int(y)) => Ok(x == y),
        (Basic::Float(x), Basic::Float(y)) => Ok(x == y),
        (Basic::Str(x), Basic::Str(y)) => Ok(x == y),
        _ => Err(BAD_COMPARISON.to_string()),
    }
}

fn go_less(a: &Value, b: &Value) -> Result<bool, String> {
    match (basic_kind(a)?, basic_kind(b)?) {
        (Basic::Bool(_), Basic::Bool(_)) => Err(BAD_COMPARISON_TYPE.to_string()),
        (Basic::Int(x), Basic::Int(y)) => Ok(x < y),
        (Basic::Float(x), Basic::Float(y)) => Ok(x < y),
        (Basic::Str(x), Basic::Str(y)) => Ok(x < y),
        _ => Err(BAD_COMPARISON.to_string()),
    }
}

fn compare(op: &str, l: &Value, r: &Value) -> Result<bool, String> {
    match op {
        "==" => go_equal(l, r),
        "!=" => go_equal(l, r).map(|e| !e),
        "<" => go_less(l, r),
        "<=" => Ok(go_less(l, r)? || go_equal(l, r)?),
        ">" => Ok(!(go_less(l, r)? || go_equal(l, r)?)),
        ">=" => go_less(l, r).map(|lt| !lt),
        _ => Err(format!("unrecognized filter operator {op}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Go value printing: fmt.Sprint / %v, encoding/json.
// ---------------------------------------------------------------------------------------------

/// How `JSONPath.PrintResults` prints one non-null result: objects and arrays as JSON, scalars
/// with `fmt.Fprint`.
fn print_text(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => go_json(v),
        other => go_sprint(other),
    }
}

/// `fmt.Sprint` of the Go value the apiserver's unstructured view holds.
pub fn go_sprint(v: &Value) -> String {
    crate::golike::go_v(v)
}

/// The bytes `encoding/json` writes for a value (sorted keys, HTML-safe escapes).
pub fn go_json(v: &Value) -> String {
    crate::golike::go_json(v)
}

/// Go's `%v` of a float64.
#[cfg(test)]
pub fn go_format_float_v(f: f64) -> String {
    crate::golike::go_float_g(f)
}
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn run(template: &str, data: &Value) -> Result<String, String> {
        parse_template(template)?.execute(data, false)
    }

    fn run_missing_ok(template: &str, data: &Value) -> Result<String, String> {
        parse_template(template)?.execute(data, true)
    }

    fn types() -> Value {
        json!({
            "bools": [true, false, true, false],
            "integers": [1, 2, 3, 4],
            "floats": [1.0, 2.2, 3.3, 4.0],
            "strings": ["one", "two", "three", "four"],
            "interfaces": [true, "one", 1, 1.1],
            "maps": [
                {"name": "one", "value": 1},
                {"name": "two", "value": 2.02},
                {"name": "three", "value": 3.03},
                {"name": "four", "value": 4.04}
            ]
        })
    }

    #[test]
    fn types_input_table() {
        // TestTypesInput from client-go/util/jsonpath/jsonpath_test.go.
        let t = types();
        let cases = [
            ("{ .bools }", "[true,false,true,false]"),
            ("{ .bools[0] }", "true"),
            ("{ .bools[-1] }", "false"),
            ("{ .bools[0:2] }", "true false"),
            ("{ .bools[:2] }", "true false"),
            ("{ .bools[:4:2] }", "true true"),
            ("{ .integers }", "[1,2,3,4]"),
            ("{ .integers[-2] }", "3"),
            ("{ .integers[:4:2] }", "1 3"),
            ("{ .floats }", "[1,2.2,3.3,4]"),
            ("{ .floats[0] }", "1"),
            ("{ .floats[-2] }", "3.3"),
            ("{ .floats[:4:2] }", "1 3.3"),
            ("{ .strings }", r#"["one","two","three","four"]"#),
            ("{ .strings[0] }", "one"),
            ("{ .strings[-2] }", "three"),
            ("{ .strings[:4:2] }", "one three"),
            ("{ .interfaces }", r#"[true,"one",1,1.1]"#),
            ("{ .interfaces[0:2] }", "true one"),
            ("{ .interfaces[:4:2] }", "true 1"),
            ("{ .maps[0] }", r#"{"name":"one","value":1}"#),
            ("{ .maps[-2] }", r#"{"name":"three","value":3.03}"#),
            ("{ .maps[::2] }", r#"{"name":"one","value":1} {"name":"three","value":3.03}"#),
            ("{ .maps[1::2] }", r#"{"name":"two","value":2.02} {"name":"four","value":4.04}"#),
        ];
        for (tpl, want) in cases {
            assert_eq!(run(tpl, &t).as_deref(), Ok(want), "{tpl}");
        }
    }

    fn nodes() -> Value {
        json!({
          "kind": "List",
          "items": [
            {"kind": "None",
             "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
             "status": {"capacity": {"cpu": "4"}, "ready": true,
                        "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}]}},
            {"kind": "None",
             "metadata": {"name": "127.0.0.2", "labels": {"kubernetes.io/hostname": "127.0.0.2"}},
             "status": {"capacity": {"cpu": "8"}, "ready": false,
                        "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.2"},
                                      {"type": "another", "address": "127.0.0.3"}]}}
          ],
          "users": [
            {"name": "myself", "user": {}},
            {"name": "e2e", "user": {"username": "admin", "password": "secret"}}
          ]
        })
    }

    #[test]
    fn kubernetes_table() {
        // TestKubernetes (without range blocks).
        let n = nodes();
        let cases = [
            ("{.items[*].status.addresses[*].address}", "127.0.0.1 127.0.0.2 127.0.0.3"),
            ("{.items[*].metadata.name}", "127.0.0.1 127.0.0.2"),
            ("{.items[*]['metadata.name', 'status.capacity']}", r#"127.0.0.1 127.0.0.2 {"cpu":"4"} {"cpu":"8"}"#),
            (r#"{.users[?(@.name=="e2e")].user.password}"#, "secret"),
            (r"{.items[0].metadata.labels.kubernetes\.io/hostname}", "127.0.0.1"),
            (r#"{.items[?(@.metadata.labels.kubernetes\.io/hostname=="127.0.0.1")].kind}"#, "None"),
            ("{.items[?(@..ready==true)].metadata.name}", "127.0.0.1"),
            ("{..name}", "127.0.0.1 127.0.0.2 myself e2e"),
            ("{.kind} and {.items[1].status.capacity.cpu}", "List and 8"),
            (r#"{.items[0].metadata.name}{"\t"}{.items[1].metadata.name}"#, "127.0.0.1\t127.0.0.2"),
        ];
        for (tpl, want) in cases {
            assert_eq!(run(tpl, &n).as_deref(), Ok(want), "{tpl}");
        }
    }

    #[test]
    fn store_and_points_tables() {
        // TestStructInput / TestJSONInput cases that apply to JSON data.
        assert_eq!(run("hello jsonpath", &Value::Null).as_deref(), Ok("hello jsonpath"));
        assert_eq!(run("{..}", &json!([1, 2, 3])).as_deref(), Ok("[1,2,3]"));
        assert_eq!(run("{[?(@<5)]}", &json!([2, 6, 3, 7])).as_deref(), Ok("2 3"));
        assert_eq!(run(r#"{"{"}"#, &Value::Null).as_deref(), Ok("{"));
        assert_eq!(run("{[1,3,4]}", &json!([0, 1, 2, 3, 4])).as_deref(), Ok("1 3 4"));
        assert_eq!(run("{[0:2]}", &json!(["Monday", "Tudesday"])).as_deref(), Ok("Monday Tudesday"));
        let store = json!({"Labels": {"web/html": 15, "k8s-app": 20}, "Book": [{"Price": 8.95}, {"Price": 12.99}],
                           "Bicycle": [{"Color": "red", "IsNew": true}, {"Color": "green", "IsNew": false}]});
        assert_eq!(run("{$.Labels.web/html}", &store).as_deref(), Ok("15"));
        assert_eq!(run("{.Labels.k8s-app}", &store).as_deref(), Ok("20"));
        assert_eq!(run("{.Bicycle[*].Color}", &store).as_deref(), Ok("red green"));
        assert_eq!(run("{..Price}", &store).as_deref(), Ok("8.95 12.99"));
        assert_eq!(run("{...Price}", &store).as_deref(), Ok("8.95 12.99"));
        assert_eq!(run("{.Book[-1:]}", &store).as_deref(), Ok(r#"{"Price":12.99}"#));
        assert_eq!(run("{.Bicycle[?(@.IsNew==true)]}", &store).as_deref(), Ok(r#"{"Color":"red","IsNew":true}"#));
        assert!(parse_template("{............Price}").is_err());
        let points = json!([
            {"id": "i1", "x": 4, "y": -5}, {"id": "i2", "x": -2, "y": -5, "z": 1},
            {"id": "i3", "x": 8, "y": 3}, {"id": "i4", "x": -6, "y": -1},
            {"id": "i5", "x": 0, "y": 2, "z": 1}, {"id": "i6", "x": 1, "y": 4}
        ]);
        assert_eq!(run("{[?(@.z)].id}", &points).as_deref(), Ok("i2 i5"));
        assert_eq!(run("{[0]['id']}", &points).as_deref(), Ok("i1"));
        assert_eq!(run("{[?(@.x>=1)].id}", &points).as_deref(), Ok("i1 i3 i6"));
        assert_eq!(run("{[?(@.x!=0)].id}", &points).as_deref(), Ok("i1 i2 i3 i4 i6"));
        assert_eq!(run("{[?(@.y<=-5)].id}", &points).as_deref(), Ok("i1 i2"));
        // Missing keys.
        assert_eq!(run_missing_ok("{.hello}", &store).as_deref(), Ok(""));
        assert_eq!(run_missing_ok("before-{.hello}after", &store).as_deref(), Ok("before-after"));
        // Failures (testFailJSONPath).
        assert_eq!(run("{hello}", &store), Err("unrecognized identifier hello".into()));
        assert_eq!(run("{.hello}", &store), Err("hello is not found".into()));
        assert_eq!(run("{.Labels[0]}", &store), Err("map[string]interface {} is not array or slice".into()));
        assert_eq!(run("{.Book[?(@.Price<>10)]}", &store), Err("unrecognized filter operator <>".into()));
    }

    #[test]
    fn filters_tolerate_missing_keys() {
        // TestFilterPartialMatchesSometimesMissingAnnotations
        let data = json!({"items": [
            {"metadata": {"name": "pod1", "annotations": {"color": "blue"}}},
            {"metadata": {"name": "pod2"}},
            {"metadata": {"name": "pod3", "annotations": {"color": "green"}}},
            {"metadata": {"name": "pod4", "annotations": {"color": "blue"}}}
        ]});
        let tpl = r#"{.items[?(@.metadata.annotations.color=="blue")].metadata.name}"#;
        assert_eq!(run_missing_ok(tpl, &data).as_deref(), Ok("pod1 pod4"));
        assert!(run(tpl, &data).is_err());
        // Comparing an int with a float or a string is an error, as in Go templates.
        assert_eq!(run("{[?(@.x==1.0)]}", &json!([{"x": 1}])), Err("incompatible types for comparison".into()));
        assert_eq!(run(r#"{[?(@.x=="1")]}"#, &json!([{"x": 1}])), Err("incompatible types for comparison".into()));
        assert_eq!(run("{[?(@.x<true)]}", &json!([{"x": false}])), Err("invalid type for comparison".into()));
        assert_eq!(run("{[?(@.x==1)]}", &json!([{"x": 1}, {"x": 2}])).as_deref(), Ok(r#"{"x":1}"#));
        assert_eq!(run("{[?(@.x=='a')].x}", &json!([{"x": "a"}, {"x": "b"}])).as_deref(), Ok("a"));
    }

    #[test]
    fn negative_index_and_step_tables() {
        // TestNegativeIndex and TestStep.
        let data = json!({"spec": {"containers": [
            {"name": "fake0"}, {"name": "fake1"}, {"name": "fake2"}, {"name": "fake3"}
        ]}});
        let cases: [(&str, Option<&str>); 15] = [
            ("{.spec.containers[0].name}", Some("fake0")),
            ("{.spec.containers[0:0].name}", Some("")),
            ("{.spec.containers[0:-1].name}", Some("fake0 fake1 fake2")),
            ("{.spec.containers[-1:0].name}", None),
            ("{.spec.containers[-1].name}", Some("fake3")),
            ("{.spec.containers[-1:].name}", Some("fake3")),
            ("{.spec.containers[-2].name}", Some("fake2")),
            ("{.spec.containers[-2:].name}", Some("fake2 fake3")),
            ("{.spec.containers[-4].name}", Some("fake0")),
            ("{.spec.containers[-4:].name}", Some("fake0 fake1 fake2 fake3")),
            ("{.spec.containers[-5].name}", None),
            ("{.spec.containers[5:5].name}", Some("")),
            ("{.spec.containers[-5:-5].name}", Some("")),
            ("{.spec.containers[3:1].name}", None),
            ("{.spec.containers[-1:-2].name}", None),
        ];
        for (tpl, want) in cases {
            assert_eq!(run(tpl, &data).ok().as_deref(), want, "{tpl}");
        }
        let six = json!({"c": [0, 1, 2, 3, 4, 5]});
        let steps: [(&str, Option<&str>); 9] = [
            ("{.c[0:]}", Some("0 1 2 3 4 5")),
            ("{.c[0:6:]}", Some("0 1 2 3 4 5")),
            ("{.c[0:6:0]}", None),
            ("{.c[0:6:-1]}", None),
            ("{.c[1:4:2]}", Some("1 3")),
            ("{.c[1:4:4]}", Some("1")),
            ("{.c[0:6:5]}", Some("0 5")),
            ("{.c[*]}", Some("0 1 2 3 4 5")),
            ("{.c[]}", Some("0")),
        ];
        for (tpl, want) in steps {
            assert_eq!(run(tpl, &six).ok().as_deref(), want, "{tpl}");
        }
        assert_eq!(
            run("{.spec.containers[-5].name}", &data),
            Err("array index out of bounds: index -1, length 4".into())
        );
        assert_eq!(run("{.c[3:1]}", &six), Err("starting index 3 is greater than ending index 1".into()));
        assert_eq!(run("{.c[9]}", &six), Err("array index out of bounds: index 9, length 6".into()));
        assert_eq!(run("{.c[0:6:0]}", &six), Err("step must be > 0".into()));
    }

    #[test]
    fn parse_errors_are_upstreams() {
        let e = |s: &str| parse_template(s).err();
        assert_eq!(e("{.a"), Some("unclosed action".into()));
        assert_eq!(e("{.a[0}"), Some("unterminated array".into()));
        assert_eq!(e("{.a[?(@.x==1}"), Some("unterminated filter".into()));
        assert_eq!(e("{.a[?(@.x==1)}"), Some("unclosed array expect ]".into()));
        assert_eq!(e(r#"{"abc}"#), Some("unterminated quoted string".into()));
        assert_eq!(e("{.a[x]}"), Some("invalid array index x".into()));
        assert_eq!(e(r#"{.a["x"]}"#), Some(r#"invalid array index "x""#.into()));
        assert_eq!(e("{.a[-]}"), Some("array index - is not a number".into()));
        assert_eq!(e("{....a}"), Some("invalid multiple recursive descent".into()));
        assert_eq!(e("{1.2.3}"), Some("cannot parse number 1.2.3".into()));
        assert_eq!(e("{#}"), Some("unrecognized character in action: U+0023 '#'".into()));
        assert_eq!(e("{\t}"), Some("unrecognized character in action: U+0009".into()));
        assert_eq!(e(r#"{"\q"}"#), Some(r#"unquote string "\q" error invalid syntax"#.into()));
        assert!(e("{.a}{.b}").is_none());
    }

    #[test]
    fn quotes_and_literals() {
        assert_eq!(run(r#"{"a\tb\u00e9\x41"}"#, &Value::Null).as_deref(), Ok("a\tbéA"));
        assert_eq!(run(r#"{'it\'s'}"#, &Value::Null).as_deref(), Ok("it's"));
        assert_eq!(run(r#"{"\101"}"#, &Value::Null).as_deref(), Ok("A"));
        // Dict keys are paths: ['a.b'] is .a.b, as upstream.
        let v = json!({"a": {"b": 1}, "a.b": 2});
        assert_eq!(run("{['a.b']}", &v).as_deref(), Ok("1"));
        assert_eq!(run(r"{.a\.b}", &v).as_deref(), Ok("2"));
    }

    fn crd_object() -> Value {
        json!({
            "apiVersion": "vesper.eventide.dev/v1alpha1",
            "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "creationTimestamp": "2024-01-02T03:04:05Z",
                         "annotations": {"example.com/owner": "me"}},
            "spec": {"replicas": 3, "ratio": 0.5, "enabled": true, "ttl": 2.0, "tags": ["a", "b"],
                     "nothing": null, "nested": {"b": 1, "a": "<x>"}},
            "status": {"phase": "Ready",
                       "conditions": [{"type": "Available", "status": "False"},
                                      {"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2024-01-02T03:09:05Z"}]}
        })
    }

    #[test]
    fn printer_cells_like_the_table_convertor() {
        let obj = crd_object();
        let now = 1_704_164_645 + 3 * 86_400 + 3600;
        let cell = |path: &str, ty: &str| parse(path).map(|p| p.printer_cell(&obj, ty, now));
        assert_eq!(cell(".status.phase", "string"), Ok(json!("Ready")));
        assert_eq!(cell(r#".status.conditions[?(@.type=="Ready")].status"#, "string"), Ok(json!("True")));
        assert_eq!(cell(".spec.replicas", "integer"), Ok(json!(3)));
        assert_eq!(cell(".spec.ratio", "integer"), Ok(json!(0)));
        assert_eq!(cell(".spec.ratio", "number"), Ok(json!(0.5)));
        assert_eq!(cell(".spec.replicas", "number"), Ok(json!(3)));
        assert_eq!(cell(".spec.ttl", "string"), Ok(json!("2")));
        assert_eq!(cell(".spec.enabled", "boolean"), Ok(json!(true)));
        assert_eq!(cell(".spec.enabled", "string"), Ok(json!("true")));
        assert_eq!(cell(".spec.replicas", "boolean"), Ok(Value::Null));
        assert_eq!(cell(".spec.tags", "string"), Ok(json!(r#"["a","b"]"#)));
        assert_eq!(cell(".spec.nested", "string"), Ok(json!(r#"{"a":"\u003cx\u003e","b":1}"#)));
        assert_eq!(cell(".spec.tags[*]", "string"), Ok(json!("a")));
        assert_eq!(cell(".spec.nothing", "string"), Ok(json!("<no value>")));
        assert_eq!(cell(".spec.nothing", "integer"), Ok(Value::Null));
        assert_eq!(cell(".spec.missing", "string"), Ok(Value::Null));
        assert_eq!(cell(".spec.tags[5]", "string"), Ok(Value::Null));
        assert_eq!(cell(".metadata.creationTimestamp", "date"), Ok(json!("3d1h")));
        assert_eq!(cell(r#".status.conditions[?(@.type=="Ready")].lastTransitionTime"#, "date"), Ok(json!("3d")));
        assert_eq!(cell(".status.phase", "date"), Ok(json!("<invalid>")));
        assert_eq!(cell(".spec.replicas", "date"), Ok(Value::Null));
        assert_eq!(cell(r".metadata.annotations.example\.com/owner", "string"), Ok(json!("me")));
        assert_eq!(cell(".status.phase", "unknown-type"), Ok(Value::Null));
        assert_eq!(cell_value(&[&json!("")], "date", now), json!("<unknown>"));
        assert_eq!(cell_value(&[], "string", now), Value::Null);
        // The braced form and the plain form are the same path.
        assert_eq!(parse("{.status.phase}"), parse(".status.phase"));
    }

    #[test]
    fn selectable_field_values() {
        let obj = crd_object();
        let value = |path: &str| parse(path).and_then(|p| p.selectable_field_value(&obj));
        assert_eq!(value(".status.phase"), Ok("Ready".into()));
        assert_eq!(value(".spec.replicas"), Ok("3".into()));
        assert_eq!(value(".spec.enabled"), Ok("true".into()));
        assert_eq!(value(".spec.ratio"), Ok("0.5".into()));
        assert_eq!(value(".spec.missing"), Ok("".into()));
        assert_eq!(value(".spec.nothing"), Ok("".into()));
        assert_eq!(value(".spec.nested"), Ok("map[a:<x> b:1]".into()));
        assert_eq!(value(".spec.tags[*]"), Err("unexpectedly received more than one JSON path result".into()));
    }

    #[test]
    fn printer_column_validation() {
        assert_eq!(validate_printer_column_path(".status.phase"), Ok(()));
        assert_eq!(validate_printer_column_path("."), Ok(()));
        assert_eq!(validate_printer_column_path(""), Err("must not be empty".into()));
        assert_eq!(
            validate_printer_column_path("status.phase"),
            Err("must be a simple json path starting with .".into())
        );
        let col = Path::new("spec").child("versions").index(0).child("additionalPrinterColumns").index(1);
        let errs: Vec<String> = printer_column_json_path_errors("status", &col).iter().map(|e| e.to_string()).collect();
        assert_eq!(
            errs,
            [
                "spec.versions[0].additionalPrinterColumns[1].JSONPath: Invalid value: \"status\": must be a simple json path starting with ."
            ]
        );
        let errs: Vec<String> = printer_column_json_path_errors("", &col).iter().map(|e| e.to_string()).collect();
        assert_eq!(errs, ["spec.versions[0].additionalPrinterColumns[1].JSONPath: Required value"]);
    }

    #[test]
    fn go_number_formatting() {
        for (f, v, j) in [
            (0.0, "0", "0"),
            (1.5, "1.5", "1.5"),
            (100000.0, "100000", "100000"),
            (1e6, "1e+06", "1000000"),
            (1234567.0, "1.234567e+06", "1234567"),
            (0.0001, "0.0001", "0.0001"),
            (0.00001, "1e-05", "0.00001"),
            (1e-7, "1e-07", "1e-7"),
            (1e21, "1e+21", "1e+21"),
            (1e20, "1e+20", "100000000000000000000"),
            (-2.5, "-2.5", "-2.5"),
            (123456789.125, "1.23456789125e+08", "123456789.125"),
        ] {
            assert_eq!(go_format_float_v(f), v, "%v of {f}");
            assert_eq!(crate::golike::go_json_float(f), j, "json of {f}");
        }
    }

    #[test]
    fn wildcards_and_recursion() {
        let v = json!({"a": {"x": 1, "y": [2, {"x": 3}]}, "s": "hi", "e": ""});
        assert_eq!(run("{.a.*}", &v).as_deref(), Ok(r#"1 [2,{"x":3}]"#));
        assert_eq!(run("{..x}", &v).as_deref(), Ok("1 3"));
        assert_eq!(run("{.s.*}", &v).as_deref(), Ok("104 105"));
        let all = parse("..").map(|p| p.eval(&v).len());
        // root, a, a.y, a.y[1], "hi" (the empty string has no children).
        assert_eq!(all, Ok(5));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".*") {
            let _ = parse(&s);
            let _ = parse_template(&s);
        }

        #[test]
        fn eval_never_panics(s in r#"[.a-c0-9\[\]\*:,?()@="'<>!\-{} $\\]{0,24}"#) {
            let doc = json!({"a": [1, {"b": "x", "c": [true, null]}, "str"], "b": {"c": 2.5}, "c": null});
            if let Ok(p) = parse(&s) {
                let _ = p.eval(&doc);
                let _ = p.execute(&doc, false);
                let _ = p.printer_cell(&doc, "string", 0);
                let _ = p.selectable_field_value(&doc);
            }
        }

        #[test]
        fn float_formatting_round_trips(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            prop_assert_eq!(go_format_float_v(f).parse::<f64>().ok(), Some(f));
            prop_assert_eq!(crate::golike::go_json_float(f).parse::<f64>().ok(), Some(f));
        }
    }
}
