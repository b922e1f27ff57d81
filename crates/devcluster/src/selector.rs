//! Label and field selectors, parsed and matched as the Kubernetes apiserver (v1.33) does.
//!
//! * [`LabelSelector::parse`] is `k8s.io/apimachinery/pkg/labels.Parse`: the same lexer (byte
//!   based, whitespace is space, tab, CR and LF), the same grammar (`a=b`, `a==b`, `a!=b`,
//!   `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`), the same validation of keys
//!   (qualified names) and values (label values), and the same error messages. The apiserver
//!   answers a bad `?labelSelector=` with `400 BadRequest` whose `message` is exactly
//!   [`SelectorError`]'s text (`NewBadRequest(err.Error())` in the list/watch handlers), e.g.
//!   `unable to parse requirement: <nil>: Invalid value: "a b": name part must consist of ...`.
//! * [`LabelSelector::from_label_selector`] is `metav1.LabelSelectorAsSelector`, for the
//!   `{matchLabels, matchExpressions}` objects of Deployments, NetworkPolicies, PDBs...
//! * [`FieldSelector::parse`] is `k8s.io/apimachinery/pkg/fields.ParseSelector`, with its
//!   backslash escaping of `\`, `,` and `=` in values; a field absent from the object compares
//!   as `""`, like `fields.Set`. [`FieldSelector::check_supported`] gives the apiserver's
//!   `field label not supported: <field>` error for fields a resource does not index.
//!
//! Deliberate differences: requirements are sorted with a *stable* sort (Go's `sort.Sort` is
//! unstable beyond 12 elements, which only changes the order of equal keys), and the entries
//! of `matchLabels` are visited in key order (Go visits a map in random order, which only
//! changes which of several invalid entries is reported).

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::field::FieldError;
use crate::golike::go_json_quote;

/// A selector that could not be parsed or built. The text is the `message` of the `400`
/// Status the apiserver returns for the offending `labelSelector`/`fieldSelector` parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

// Label keys and values are validated by the apimachinery validators (v1.33 texts).
pub use crate::names::{is_qualified_name, is_valid_label_value};

/// `utilerrors.NewAggregate(errs).Error()`: duplicates dropped, one message bare, several in
/// brackets.
fn aggregate(msgs: Vec<String>) -> Option<String> {
    let mut unique: Vec<String> = Vec::new();
    for m in msgs {
        if !unique.contains(&m) {
            unique.push(m);
        }
    }
    match unique.len() {
        0 => None,
        1 => unique.pop(),
        _ => Some(format!("[{}]", unique.join(", "))),
    }
}

// ---------------------------------------------------------------------------------------------
// Label requirements and selectors.
// ---------------------------------------------------------------------------------------------

/// The operator of a label requirement (`selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelOp {
    In,
    NotIn,
    /// `=`
    Equals,
    /// `==`, kept apart from `=` so that the selector prints back as written.
    DoubleEquals,
    /// `!=`
    NotEquals,
    /// A bare key.
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>N`, integer comparison.
    GreaterThan,
    /// `key<N`, integer comparison.
    LessThan,
}

/// One requirement of a label selector (`labels.Requirement`). Always valid: built only by
/// [`Requirement::new`] or the parsers, which apply `labels.NewRequirement`'s checks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    op: LabelOp,
    values: Vec<String>,
}

impl Requirement {
    /// `labels.NewRequirement(key, op, values)` without a field path: errors name the fields
    /// `key`, `values` and `values[i][key]` as the Go function does.
    pub fn new(key: &str, op: LabelOp, values: Vec<String>) -> Result<Requirement, SelectorError> {
        let mut errs = Vec::new();
        let key_errs = is_qualified_name(key);
        if !key_errs.is_empty() {
            errs.push(FieldError::invalid("key", key, key_errs.join("; ")).to_string());
        }
        let invalid_values = |detail: &str| format!("values: Invalid value: {}: {detail}", go_json_strings(&values));
        match op {
            LabelOp::In | LabelOp::NotIn => {
                if values.is_empty() {
                    errs.push(invalid_values("for 'in', 'notin' operators, values set can't be empty"));
                }
            }
            LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::NotEquals => {
                if values.len() != 1 {
                    errs.push(invalid_values("exact-match compatibility requires one single value"));
                }
            }
            LabelOp::Exists | LabelOp::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(invalid_values("values set must be empty for exists and does not exist"));
                }
            }
            LabelOp::GreaterThan | LabelOp::LessThan => {
                if values.len() != 1 {
                    errs.push(invalid_values("for 'Gt', 'Lt' operators, exactly one value is required"));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(
                            FieldError::invalid(
                                format!("values[{i}]"),
                                v.as_str(),
                                "for 'Gt', 'Lt' operators, the value must be an integer",
                            )
                            .to_string(),
                        );
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = is_valid_label_value(v);
            if !value_errs.is_empty() {
                errs.push(
                    FieldError::invalid(format!("values[{i}][{key}]"), v.as_str(), value_errs.join("; ")).to_string(),
                );
            }
        }
        match aggregate(errs) {
            Some(msg) => Err(SelectorError(msg)),
            None => Ok(Requirement { key: key.to_string(), op, values }),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> LabelOp {
        self.op
    }

    /// The values, as given (the parser gives them sorted and without duplicates).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `Requirement.Matches`: `label` looks a key up in the object's labels.
    pub fn matches_with<'l>(&self, label: &dyn Fn(&str) -> Option<&'l str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.op {
            LabelOp::In | LabelOp::Equals | LabelOp::DoubleEquals => label(&self.key).is_some_and(has),
            LabelOp::NotIn | LabelOp::NotEquals => label(&self.key).is_none_or(|v| !has(v)),
            LabelOp::Exists => label(&self.key).is_some(),
            LabelOp::DoesNotExist => label(&self.key).is_none(),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let Some(Ok(have)) = label(&self.key).map(str::parse::<i64>) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.op == LabelOp::GreaterThan { have > want } else { have < want }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// `Requirement.String()`: `!k`, `k`, `k=v`, `k==v`, `k!=v`, `k>v`, `k<v`,
    /// `k in (a,b)`, `k notin (a,b)`, values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == LabelOp::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.op {
            LabelOp::Equals => "=",
            LabelOp::DoubleEquals => "==",
            LabelOp::NotEquals => "!=",
            LabelOp::In => " in ",
            LabelOp::NotIn => " notin ",
            LabelOp::GreaterThan => ">",
            LabelOp::LessThan => "<",
            LabelOp::Exists | LabelOp::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        let set = matches!(self.op, LabelOp::In | LabelOp::NotIn);
        if set {
            f.write_str("(")?;
        }
        if let [one] = self.values.as_slice() {
            f.write_str(one)?;
        } else {
            let mut sorted: Vec<&str> = self.values.iter().map(String::as_str).collect();
            sorted.sort_unstable();
            f.write_str(&sorted.join(","))?;
        }
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: an AND of requirements. `Default` (and [`LabelSelector::everything`])
/// selects everything; [`LabelSelector::nothing`] (what a `null` `metav1.LabelSelector` means)
/// selects nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// `labels.Parse`: the `?labelSelector=` syntax. The empty string selects everything.
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let mut parser = Parser::new(s);
        let mut requirements = parser.parse().map_err(SelectorError)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements, nothing: false })
    }

    /// `labels.Everything()`.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// `labels.Nothing()`: matches no object. Prints as the empty string.
    pub fn nothing() -> Self {
        LabelSelector { requirements: Vec::new(), nothing: true }
    }

    /// `Selector.Empty()`: true when the selector does not restrict anything.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for [`LabelSelector::nothing`].
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// `labels.SelectorFromValidatedSet`: `k=v` for every entry, without validation, as the
    /// apiserver builds selectors from a Service's or ReplicationController's `spec.selector`
    /// map. An empty set selects everything.
    pub fn from_set<'a>(set: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut requirements: Vec<Requirement> = set
            .into_iter()
            .map(|(k, v)| Requirement { key: k.to_string(), op: LabelOp::Equals, values: vec![v.to_string()] })
            .collect();
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements, nothing: false }
    }

    /// `metav1.LabelSelectorAsSelector` on the JSON form of a `metav1.LabelSelector`
    /// (`{matchLabels: {k: v}, matchExpressions: [{key, operator, values}]}`), as found in
    /// `spec.selector` of Deployments, `spec.podSelector` of NetworkPolicies, PDBs, ...
    ///
    /// * `null` (pass `&Value::Null` for an absent field) gives [`LabelSelector::nothing`];
    /// * `{}` or empty `matchLabels`/`matchExpressions` give [`LabelSelector::everything`];
    /// * an unknown operator gives `"Foo" is not a valid label selector operator`; invalid keys
    ///   and values give `labels.NewRequirement`'s errors (`key: Invalid value: ...`).
    pub fn from_label_selector(v: &Value) -> Result<LabelSelector, SelectorError> {
        let obj = match v {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(obj) => obj,
            other => {
                return Err(SelectorError(format!(
                    "json: cannot unmarshal {} into Go value of type v1.LabelSelector",
                    json_type(other)
                )));
            }
        };
        let empty_map = Map::new();
        let match_labels = match obj.get("matchLabels") {
            None | Some(Value::Null) => &empty_map,
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(SelectorError(format!(
                    "json: cannot unmarshal {} into Go struct field LabelSelector.matchLabels of type map[string]string",
                    json_type(other)
                )));
            }
        };
        let match_expressions: &[Value] = match obj.get("matchExpressions") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(a)) => a,
            Some(other) => {
                return Err(SelectorError(format!(
                    "json: cannot unmarshal {} into Go struct field LabelSelector.matchExpressions of type []v1.LabelSelectorRequirement",
                    json_type(other)
                )));
            }
        };
        if match_labels.is_empty() && match_expressions.is_empty() {
            return Ok(LabelSelector::everything());
        }
        let mut requirements = Vec::with_capacity(match_labels.len() + match_expressions.len());
        let sorted: BTreeMap<&String, &Value> = match_labels.iter().collect();
        for (k, v) in sorted {
            let Value::String(v) = v else {
                return Err(SelectorError(format!(
                    "json: cannot unmarshal {} into Go struct field LabelSelector.matchLabels of type string",
                    json_type(v)
                )));
            };
            requirements.push(Requirement::new(k, LabelOp::Equals, vec![v.clone()])?);
        }
        for expr in match_expressions {
            let key = expr.get("key").and_then(Value::as_str).unwrap_or("");
            let operator = expr.get("operator").and_then(Value::as_str).unwrap_or("");
            let op = match operator {
                "In" => LabelOp::In,
                "NotIn" => LabelOp::NotIn,
                "Exists" => LabelOp::Exists,
                "DoesNotExist" => LabelOp::DoesNotExist,
                other => {
                    return Err(SelectorError(format!(
                        "{} is not a valid label selector operator",
                        crate::field::go_quote(other)
                    )));
                }
            };
            let values: Vec<String> = expr
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect())
                .unwrap_or_default();
            requirements.push(Requirement::new(key, op, values)?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements, nothing: false })
    }

    /// Match against an object's `metadata.labels` (`None` when the object has none). Label
    /// values that are not strings count as absent (they cannot pass validation anyway).
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.matches_with(&|k| labels.and_then(|m| m.get(k)).and_then(Value::as_str))
    }

    /// Match against a label map.
    pub fn matches_map(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(&|k| labels.get(k).map(String::as_str))
    }

    /// Match with a label lookup function.
    pub fn matches_with<'l>(&self, label: &dyn Fn(&str) -> Option<&'l str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches_with(label))
    }

    /// `Selector.RequiresExactMatch`: the single value `key` must have, when the selector
    /// pins it with `=`, `==` or a one-value `in`.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.op, r.values.as_slice()) {
            (LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::In, [one]) => Some(one),
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    /// `Selector.String()`: the canonical form, requirements sorted by key and joined by `,`;
    /// it parses back to an equal selector. `nothing` prints as `""` like upstream.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `json.Marshal` of a Go `[]string` built by `append([]string(nil), values...)`: `null` when
/// empty.
fn go_json_strings(values: &[String]) -> String {
    if values.is_empty() {
        return "null".to_string();
    }
    let quoted: Vec<String> = values.iter().map(|v| go_json_quote(v)).collect();
    format!("[{}]", quoted.join(","))
}

// ---------------------------------------------------------------------------------------------
// The label selector lexer and parser (labels/selector.go).
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn literal_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The byte-oriented lexer. Like Go's, `read` returns 0 at the end of the input, so a NUL
/// byte in the input also ends a token (and, at the start of a token, the selector).
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(b) => {
                self.pos += 1;
                *b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
        }
        let s = String::from_utf8_lossy(&buffer).into_owned();
        match literal_token(&buffer) {
            Some(tok) => (tok, s),
            None => (Token::Identifier, s),
        }
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut last: Option<(Token, String)> = None;
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
            if let Some(tok) = literal_token(&buffer) {
                last = Some((tok, String::from_utf8_lossy(&buffer).into_owned()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some(item) => item,
            None => (Token::Error, format!("error expected: keyword found '{}'", String::from_utf8_lossy(&buffer))),
        }
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            (Token::EndOfString, String::new())
        } else if is_special_symbol(ch) {
            self.unread();
            self.scan_special_symbol()
        } else {
            self.unread();
            self.scan_id_or_keyword()
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(s: &str) -> Parser {
        let mut lexer = Lexer { s: s.as_bytes(), pos: 0 };
        let mut items = Vec::new();
        loop {
            let (tok, lit) = lexer.lex();
            let end = tok == Token::EndOfString;
            items.push((tok, lit));
            if end {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, ctx: Context, at: usize) -> (Token, String) {
        let (tok, lit) = self.items.get(at).cloned().unwrap_or((Token::EndOfString, String::new()));
        // "in" and "notin" are plain identifiers where values (or keys) are expected.
        match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.item(ctx, self.position)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let item = self.item(ctx, self.position);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!("found '{l2}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => return Err(format!("found '{lit}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (LabelOp::Exists | LabelOp::DoesNotExist)) = inferred {
            return Requirement::new(&key, op, Vec::new()).map_err(|e| e.0);
        }
        let op = self.parse_operator()?;
        let values = match op {
            LabelOp::In | LabelOp::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values.into_iter().collect()).map_err(|e| e.0)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<LabelOp>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            op = Some(LabelOp::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let errs = is_qualified_name(&lit);
        if !errs.is_empty() {
            // The parser has no field path: Go prints the nil *field.Path as "<nil>".
            return Err(FieldError::invalid("<nil>", lit.as_str(), errs.join("; ")).to_string());
        }
        let (next, _) = self.lookahead(Context::Values);
        if (next == Token::EndOfString || next == Token::Comma) && op != Some(LabelOp::DoesNotExist) {
            op = Some(LabelOp::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<LabelOp, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => LabelOp::In,
            Token::Equals => LabelOp::Equals,
            Token::DoubleEquals => LabelOp::DoubleEquals,
            Token::GreaterThan => LabelOp::GreaterThan,
            Token::LessThan => LabelOp::LessThan,
            Token::NotIn => LabelOp::NotIn,
            Token::NotEquals => LabelOp::NotEquals,
            _ => return Err(format!("found '{lit}', expected: in, notin, =, ==, !=, gt, lt")),
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let s = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut s = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    s.insert(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if s.is_empty() {
                        s.insert(String::new()); // "(,"
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        s.insert(String::new()); // ",)"
                        return Ok(s);
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        s.insert(String::new()); // ",,"
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            Ok(BTreeSet::from([lit]))
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Field selectors (fields/selector.go).
// ---------------------------------------------------------------------------------------------

/// The operator of a field requirement. `==` parses as [`FieldOp::Equals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOp {
    Equals,
    NotEquals,
}

/// One `field=value` / `field!=value` term, with the value unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    pub field: String,
    pub op: FieldOp,
    pub value: String,
}

/// A field selector: an AND of terms. `Default` selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// `fields.ParseSelector`: terms split on unescaped `,` and sorted as strings; each term is
    /// split at its first `!=`, `==` or `=`; the value is unescaped (`\\`, `\,`, `\=`). Terms
    /// with an empty field and an empty value are dropped (they select everything upstream).
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, rhs)) = split_term(part) else {
                return Err(SelectorError(format!("invalid selector: '{s}'; can't understand '{part}'")));
            };
            let value = unescape_value(rhs).map_err(SelectorError)?;
            if field.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement { field: field.to_string(), op, value });
        }
        Ok(FieldSelector { requirements })
    }

    /// `fields.Everything()`.
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Match against an object's fields; `get` returns a field's value, and a field it does not
    /// know compares as `""`, like `fields.Set.Get`.
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let have = get(&r.field).unwrap_or_default();
            match r.op {
                FieldOp::Equals => have == r.value,
                FieldOp::NotEquals => have != r.value,
            }
        })
    }

    /// Match against a `fields.Set`.
    pub fn matches_map(&self, fields: &BTreeMap<String, String>) -> bool {
        self.matches(&|f| fields.get(f).cloned())
    }

    /// What the apiserver does next with a parsed selector (`Transform` with the resource's
    /// `ConvertFieldLabel`): the first term, in order, whose field the resource does not
    /// support fails with `field label not supported: <field>` (also a `400 BadRequest`).
    pub fn check_supported(&self, is_supported: &dyn Fn(&str) -> bool) -> Result<(), SelectorError> {
        match self.requirements.iter().find(|r| !is_supported(&r.field)) {
            Some(r) => Err(SelectorError(format!("field label not supported: {}", r.field))),
            None => Ok(()),
        }
    }

    /// `Selector.RequiresExactMatch`: the value an `=` term pins `field` to.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements.iter().find(|r| r.field == field && r.op == FieldOp::Equals).map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    /// `Selector.String()`: `field=value` / `field!=value`, values escaped, joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match r.op {
                FieldOp::Equals => "=",
                FieldOp::NotEquals => "!=",
            };
            write!(f, "{}{}{}", r.field, op, escape_value(&r.value))?;
        }
        Ok(())
    }
}

/// A field label whose Go value is not a string, with where it is read and how an unset value
/// renders: the registries' field set functions render every field of the object (a bool with
/// `strconv.FormatBool`, a number with `strconv.Itoa`), so an unset field selects as its Go zero
/// value (`spec.unschedulable=false` matches a Node without the field: `kubectl drain` and
/// `kubectl cordon` list with it).
/// Sources: pkg/registry/core/node/strategy.go (NodeToSelectableFields), core/pod/strategy.go
/// (ToSelectableFields: `spec.hostNetwork`), apps/replicaset/strategy.go and
/// core/replicationcontroller/strategy.go (`status.replicas`), batch/job/strategy.go
/// (`status.successful` is `status.succeeded`).
const NON_STRING_FIELD_LABELS: &[(&str, &str, &str, &str, &str)] = &[
    // (group, resource, label, path, zero)
    ("", "nodes", "spec.unschedulable", "spec.unschedulable", "false"),
    ("", "pods", "spec.hostNetwork", "spec.hostNetwork", "false"),
    ("", "replicationcontrollers", "status.replicas", "status.replicas", "0"),
    ("apps", "replicasets", "status.replicas", "status.replicas", "0"),
    ("batch", "jobs", "status.successful", "status.succeeded", "0"),
];

/// Where a field label of a built-in resource reads (when it is not the label itself) and
/// what it is when the object does not set it: `""` for strings, `false`, `0`.
pub fn field_label_zero(group: &str, resource: &str, label: &str) -> (Option<&'static str>, &'static str) {
    NON_STRING_FIELD_LABELS
        .iter()
        .find(|(g, r, l, _, _)| *g == group && *r == resource && *l == label)
        .map(|(_, _, l, p, z)| ((p != l).then_some(*p), *z))
        .unwrap_or((None, ""))
}

/// `fields.EscapeValue`.
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `fields.splitTerms`: split on commas not preceded by an escaping backslash; the terms keep
/// their backslashes.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(s.get(start..i).unwrap_or_default());
            start = i + 1;
        }
    }
    terms.push(s.get(start..).unwrap_or_default());
    terms
}

/// `fields.splitTerm`: the first occurrence of `!=`, `==` or `=` splits the term.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = term.get(i..)?;
        for (op, kind) in [("!=", FieldOp::NotEquals), ("==", FieldOp::Equals), ("=", FieldOp::Equals)] {
            if rest.starts_with(op) {
                return Some((term.get(..i)?, kind, term.get(i + op.len()..)?));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`, with its error messages (Go prints the offending rune as a number).
fn unescape_value(s: &str) -> Result<String, String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(format!("invalid field selector: invalid escape sequence: \\{c}")),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(format!("invalid field selector: unescaped character in value: {}", c as u32));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_labels_render_go_zero_values() {
        assert_eq!(field_label_zero("", "nodes", "spec.unschedulable"), (None, "false"));
        assert_eq!(field_label_zero("", "pods", "spec.hostNetwork"), (None, "false"));
        assert_eq!(field_label_zero("", "pods", "spec.nodeName"), (None, ""));
        assert_eq!(field_label_zero("apps", "replicasets", "status.replicas"), (None, "0"));
        assert_eq!(field_label_zero("batch", "jobs", "status.successful"), (Some("status.succeeded"), "0"));
        let unscheduled = FieldSelector::parse("spec.unschedulable=false").unwrap_or_default();
        assert!(unscheduled.matches(&|_| Some("false".to_string())));
        assert!(!unscheduled.matches(&|_| None), "without the table an unset bool is \"\"");
    }
    use proptest::prelude::*;
    use serde_json::json;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(sel) => panic!("{s:?} parsed as {sel:?}"),
            Err(e) => e.to_string(),
        }
    }

    const NAME_PART_REGEX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const LABEL_VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    #[test]
    fn parses_and_restrings_like_upstream() {
        // TestSelectorParse: good strings restring to themselves without spaces.
        for s in ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5"] {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(sel.to_string(), s.replace(' ', ""), "{s}");
        }
        for s in ["x=a||y=b", "x==a==b", "!x=a", "x<a"] {
            assert!(LabelSelector::parse(s).is_err(), "{s}");
        }
        // TestDeterministicParse
        assert_eq!(
            LabelSelector::parse("x=a,a=x").map(|s| s.to_string()),
            LabelSelector::parse("a=x,x=a").map(|s| s.to_string())
        );
    }

    #[test]
    fn set_based_parser_table() {
        // TestSetSelectorParser (valid entries, with the expected canonical string).
        let good = [
            ("\rx", "x"),
            ("this-is-a-dns.domain.com/key-with-dash", "this-is-a-dns.domain.com/key-with-dash"),
            (
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            ),
            (
                "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
                "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)",
            ),
            ("foo  in\t (abc)", "foo in (abc)"),
            ("x notin\n (abc)", "x notin (abc)"),
            ("x  notin\t\t\t(abc,def)", "x notin (abc,def)"),
            ("x in (abc,def)", "x in (abc,def)"),
            ("x in (abc,)", "x in (,abc)"),
            ("x in ()", "x in ()"),
            ("x notin (abc,,def),bar,z in (),w", "bar,w,x notin (,abc,def),z in ()"),
            ("x notin (abc,def),bar", "bar,x notin (abc,def)"),
            ("x,y in (a)", "x,y in (a)"),
            ("x=a", "x=a"),
            ("x>1", "x>1"),
            ("x<7", "x<7"),
            ("x=a,y!=b", "x=a,y!=b"),
            ("x=a,y!=b,z in (h,i,j)", "x=a,y!=b,z in (h,i,j)"),
            ("x notin ( )", "x notin ()"),
            ("x notin (, a)", "x notin (,a)"),
            ("a ", "a"),
            ("a in (x,y,notin, z,in)", "a in (in,notin,x,y,z)"),
            ("notin=in", "notin=in"),
            ("x==a", "x==a"),
        ];
        for (input, want) in good {
            let sel = LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.to_string(), want, "{input:?}");
        }
        for bad in [
            "x=a||y=b",
            "x,,y",
            ",x,y",
            "x nott in (y)",
            "a in (xyz),",
            "a in (xyz)b notin ()",
            "a in (xyz abc)",
            "a notin(",
            "a (",
            "(",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn error_messages_are_the_apiservers() {
        assert_eq!(
            err("app:monolith"),
            format!("unable to parse requirement: <nil>: Invalid value: \"app:monolith\": {NAME_PART_REGEX}")
        );
        assert_eq!(
            err("app=demo-{nginx}"),
            format!(
                "unable to parse requirement: values[0][app]: Invalid value: \"demo-{{nginx}}\": {LABEL_VALUE_REGEX}"
            )
        );
        assert_eq!(
            err("environment>qa"),
            "unable to parse requirement: values[0]: Invalid value: \"qa\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert_eq!(
            err("app.kubernetes_io/name=x"),
            "unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(
            err("a/b/c=d"),
            "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        );
        let long = "a".repeat(64);
        assert_eq!(
            err(&long),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 characters"
            )
        );
        assert_eq!(
            err(&format!("x={long}")),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"{long}\": must be no more than 63 characters"
            )
        );
        assert_eq!(
            err("x in (a_,-b)"),
            format!(
                "unable to parse requirement: [values[0][x]: Invalid value: \"-b\": {LABEL_VALUE_REGEX}, values[1][x]: Invalid value: \"a_\": {LABEL_VALUE_REGEX}]"
            )
        );
        assert_eq!(err("x==a==b"), "found '==', expected: ',' or 'end of string'");
        assert_eq!(err("!x=a"), "found '=', expected: ',' or 'end of string'");
        assert_eq!(err("x y"), "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt");
        assert_eq!(
            err("x=a||y=b"),
            format!("unable to parse requirement: values[0][x]: Invalid value: \"a||y\": {LABEL_VALUE_REGEX}")
        );
        assert_eq!(err(",x"), "found ',', expected: !, identifier, or 'end of string'");
        assert_eq!(err("a in (xyz),"), "found '', expected: identifier after ','");
        assert_eq!(err("a in (xyz abc)"), "unable to parse requirement: found 'abc', expected: ',' or ')'");
        assert_eq!(err("a notin("), "unable to parse requirement: found '', expected: ',', ')' or identifier");
        assert_eq!(err("a in x"), "unable to parse requirement: found 'x' expected: '('");
        assert_eq!(err("a in (x,=)"), "unable to parse requirement: found '=', expected: ',', or identifier");
        assert_eq!(err("!"), "unable to parse requirement: found '', expected: identifier");
        assert_eq!(err("x=!a"), "unable to parse requirement: found '!', expected: identifier");
        assert_eq!(err("("), "found '(', expected: !, identifier, or 'end of string'");
        assert_eq!(err("_x"), format!("unable to parse requirement: <nil>: Invalid value: \"_x\": {NAME_PART_REGEX}"));
        assert_eq!(
            err("/x"),
            "unable to parse requirement: <nil>: Invalid value: \"/x\": prefix part must be non-empty"
        );
        assert_eq!(
            err("a/"),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be non-empty; {NAME_PART_REGEX}"
            )
        );
    }

    #[test]
    fn matching_table() {
        // TestSelectorMatches
        let m = |s: &str, l: &[(&str, &str)]| LabelSelector::parse(s).map(|sel| sel.matches_map(&set(l)));
        assert_eq!(m("", &[("x", "y")]), Ok(true));
        assert_eq!(m("x=y", &[("x", "y")]), Ok(true));
        assert_eq!(m("x=y,z=w", &[("x", "y"), ("z", "w")]), Ok(true));
        assert_eq!(m("x!=y,z!=w", &[("x", "z"), ("z", "a")]), Ok(true));
        assert_eq!(m("notin=in", &[("notin", "in")]), Ok(true));
        assert_eq!(m("x", &[("x", "z")]), Ok(true));
        assert_eq!(m("!x", &[("y", "z")]), Ok(true));
        assert_eq!(m("x>1", &[("x", "2")]), Ok(true));
        assert_eq!(m("x<1", &[("x", "0")]), Ok(true));
        assert_eq!(m("x=z", &[]), Ok(false));
        assert_eq!(m("x=y", &[("x", "z")]), Ok(false));
        assert_eq!(m("x=y,z=w", &[("x", "w"), ("z", "w")]), Ok(false));
        assert_eq!(m("x!=y,z!=w", &[("x", "z"), ("z", "w")]), Ok(false));
        assert_eq!(m("x", &[("y", "z")]), Ok(false));
        assert_eq!(m("!x", &[("x", "z")]), Ok(false));
        assert_eq!(m("x>1", &[("x", "0")]), Ok(false));
        assert_eq!(m("x<1", &[("x", "2")]), Ok(false));
        assert_eq!(m("x>1", &[("x", "v2")]), Ok(false));
        assert_eq!(m("x>1", &[]), Ok(false));
        assert_eq!(m("x notin (a)", &[]), Ok(true));
        assert_eq!(m("x in (a,b)", &[("x", "b")]), Ok(true));
        assert_eq!(m("x in ()", &[("x", "")]), Ok(true));
        assert_eq!(m("x in ()", &[("y", "baz")]), Ok(false));
        assert_eq!(m("x notin (),y", &[("y", "")]), Ok(true));
        assert_eq!(m("x notin (),!y", &[("y", "")]), Ok(false));
        let labels = json!({"foo": "bar", "baz": "blah"});
        let sel = LabelSelector::parse("foo=bar,baz=blah").unwrap_or_default();
        assert!(sel.matches(labels.as_object()));
        assert!(!LabelSelector::parse("foo=bar,foobar=bar,baz=blah").unwrap_or_default().matches(labels.as_object()));
        assert!(LabelSelector::parse("!foo").unwrap_or_default().matches(None));
        assert!(!LabelSelector::parse("foo").unwrap_or_default().matches(None));
    }

    #[test]
    fn everything_and_nothing() {
        assert!(LabelSelector::everything().is_empty());
        assert!(LabelSelector::everything().matches(None));
        assert_eq!(LabelSelector::parse(""), Ok(LabelSelector::everything()));
        assert!(!LabelSelector::nothing().is_empty());
        assert!(!LabelSelector::nothing().matches(json!({}).as_object()));
        assert_eq!(LabelSelector::nothing().to_string(), "");
    }

    #[test]
    fn from_metav1_label_selector() {
        let sel = LabelSelector::from_label_selector(&json!({
            "matchLabels": {"app": "web", "tier": "fe"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "canary", "operator": "DoesNotExist"}
            ]
        }));
        let sel = sel.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sel.to_string(), "app=web,!canary,env in (dev,prod),tier=fe");
        let labels = json!({"app": "web", "tier": "fe", "env": "prod"});
        assert!(sel.matches(labels.as_object()));
        let labels = json!({"app": "web", "tier": "fe", "env": "prod", "canary": "1"});
        assert!(!sel.matches(labels.as_object()));

        assert_eq!(LabelSelector::from_label_selector(&json!({})), Ok(LabelSelector::everything()));
        assert_eq!(
            LabelSelector::from_label_selector(&json!({"matchLabels": {}, "matchExpressions": []})),
            Ok(LabelSelector::everything())
        );
        assert_eq!(LabelSelector::from_label_selector(&Value::Null), Ok(LabelSelector::nothing()));

        let e = |v: Value| LabelSelector::from_label_selector(&v).map_err(|e| e.0);
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]})),
            Err("\"Foo\" is not a valid label selector operator".to_string())
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})),
            Err("values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty".to_string())
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x", "<y>"]}]})),
            Err(format!(
                "[values: Invalid value: [\"x\",\"\\u003cy\\u003e\"]: values set must be empty for exists and does not exist, values[1][a]: Invalid value: \"<y>\": {LABEL_VALUE_REGEX}]"
            ))
        );
        assert_eq!(
            e(json!({"matchLabels": {"bad key": "v"}})),
            Err(format!("key: Invalid value: \"bad key\": {NAME_PART_REGEX}"))
        );
        assert!(e(json!("app=web")).is_err());
    }

    #[test]
    fn exact_match_introspection() {
        let sel = LabelSelector::parse("a=1,b in (2),c in (3,4),d!=5").unwrap_or_default();
        assert_eq!(sel.requires_exact_match("a"), Some("1"));
        assert_eq!(sel.requires_exact_match("b"), Some("2"));
        assert_eq!(sel.requires_exact_match("c"), None);
        assert_eq!(sel.requires_exact_match("d"), None);
        assert_eq!(LabelSelector::from_set([("b", "2"), ("a", "1")]).to_string(), "a=1,b=2");
    }

    #[test]
    fn field_selectors() {
        let sel = FieldSelector::parse("status.phase!=Running,metadata.name=x").unwrap_or_default();
        assert_eq!(
            sel.requirements(),
            &[
                FieldRequirement { field: "metadata.name".into(), op: FieldOp::Equals, value: "x".into() },
                FieldRequirement { field: "status.phase".into(), op: FieldOp::NotEquals, value: "Running".into() },
            ]
        );
        let fields = set(&[("metadata.name", "x"), ("status.phase", "Pending")]);
        assert!(sel.matches_map(&fields));
        assert!(!sel.matches_map(&set(&[("metadata.name", "x"), ("status.phase", "Running")])));
        // An absent field compares as "".
        assert!(sel.matches(&|f| (f == "metadata.name").then(|| "x".to_string())));
        assert!(FieldSelector::parse("spec.nodeName=").unwrap_or_default().matches(&|_| None));

        let s = FieldSelector::parse("a==b").unwrap_or_default();
        assert_eq!(
            s.requirements()[..],
            [FieldRequirement { field: "a".into(), op: FieldOp::Equals, value: "b".into() }]
        );
        assert_eq!(s.requires_exact_match("a"), Some("b"));
        // Escapes (fields/selector_test.go TestSplitTerms / TestEscapeValue).
        let s = FieldSelector::parse(r"a=\,\=\\,b!=c").unwrap_or_default();
        assert_eq!(s.requirements()[0].value, r",=\");
        assert_eq!(s.to_string(), r"a=\,\=\\,b!=c");
        assert_eq!(
            FieldSelector::parse("x=a=b").map_err(|e| e.0),
            Err("invalid field selector: unescaped character in value: 61".into())
        );
        assert_eq!(
            FieldSelector::parse(r"x=a\b").map_err(|e| e.0),
            Err(r"invalid field selector: invalid escape sequence: \b".into())
        );
        assert_eq!(
            FieldSelector::parse(r"x=a\").map_err(|e| e.0),
            Err(r"invalid field selector: invalid escape sequence: \".into())
        );
        assert_eq!(
            FieldSelector::parse("x=a,b").map_err(|e| e.0),
            Err("invalid selector: 'x=a,b'; can't understand 'b'".into())
        );
        assert_eq!(FieldSelector::parse(""), Ok(FieldSelector::everything()));
        assert_eq!(FieldSelector::parse(",,=,"), Ok(FieldSelector::everything()));
        assert_eq!(FieldSelector::parse("x!=").map(|s| s.to_string()), Ok("x!=".into()));
        // The apiserver's follow-up check of supported fields.
        let sel = FieldSelector::parse("spec.foo=1,metadata.name=a").unwrap_or_default();
        let supported = |f: &str| f == "metadata.name" || f == "metadata.namespace";
        assert_eq!(
            sel.check_supported(&supported).map_err(|e| e.to_string()),
            Err("field label not supported: spec.foo".into())
        );
    }

    /// Valid requirements in the `?labelSelector=` syntax, with optional whitespace.
    fn requirement_text() -> impl Strategy<Value = String> {
        let key = r"((example\.com|a-b\.io)/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,4}[A-Za-z0-9])?|in|notin";
        let value = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,4}[A-Za-z0-9])?)?|in|notin";
        let ws = "[ \t]{0,2}";
        let nonempty = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,4}[A-Za-z0-9])?|in|notin";
        prop_oneof![
            (key, ws, "=|==|!=", ws, value).prop_map(|(k, a, op, b, v)| format!("{k}{a}{op}{b}{v}")),
            // Empty entries are only valid in some positions ("(,a)" but not "(,,)").
            (key, " (in|notin) ", ws, prop::collection::vec(nonempty, 0..4))
                .prop_map(|(k, op, w, vs)| format!("{k}{op}{w}({})", vs.join(","))),
            ("!?", key).prop_map(|(bang, k)| format!("{bang}{k}")),
            (key, "[<>]", "[0-9]{1,3}").prop_map(|(k, op, n)| format!("{k}{op}{n}")),
        ]
    }

    proptest! {
        #[test]
        fn valid_selectors_parse_and_round_trip(reqs in prop::collection::vec(requirement_text(), 0..5)) {
            let s = reqs.join(",");
            let sel = LabelSelector::parse(&s);
            prop_assert!(sel.is_ok(), "{:?}: {:?}", s, sel);
            let sel = sel.unwrap_or_default();
            prop_assert_eq!(sel.requirements().len(), reqs.len());
            let printed = sel.to_string();
            prop_assert_eq!(LabelSelector::parse(&printed), Ok(sel.clone()), "{:?} -> {:?}", s, printed);
        }

        #[test]
        fn label_parse_never_panics(s in ".*") {
            let _ = LabelSelector::parse(&s);
        }

        #[test]
        fn label_selector_round_trips(s in r"[a-c!=(),<> \t.\-_/0-9]{0,24}|(in|notin|x|y|=|==|!=|\(|\)|,| |!|>|<|1|-)*") {
            if let Ok(sel) = LabelSelector::parse(&s) {
                let printed = sel.to_string();
                prop_assert_eq!(LabelSelector::parse(&printed), Ok(sel.clone()), "{:?} -> {:?}", s, printed);
                prop_assert_eq!(LabelSelector::parse(&printed).map(|s| s.to_string()), Ok(printed));
            }
        }

        #[test]
        fn field_parse_never_panics(s in ".*") {
            if let Ok(sel) = FieldSelector::parse(&s) {
                let _ = sel.matches(&|_| None);
                // Printing and re-parsing keeps the same set of terms.
                let again = FieldSelector::parse(&sel.to_string());
                let mut want = sel.requirements().to_vec();
                want.sort_by(|a, b| (&a.field, &a.value).cmp(&(&b.field, &b.value)));
                let mut got = again.map(|s| s.requirements().to_vec()).unwrap_or_default();
                got.sort_by(|a, b| (&a.field, &a.value).cmp(&(&b.field, &b.value)));
                prop_assert_eq!(got, want);
            }
        }

        #[test]
        fn label_selector_from_json_never_panics(k in ".{0,8}", op in "In|NotIn|Exists|DoesNotExist|.{0,3}", v in ".{0,8}") {
            let _ = LabelSelector::from_label_selector(&json!({"matchLabels": {k.clone(): v.clone()}, "matchExpressions": [{"key": k, "operator": op, "values": [v]}]}));
        }
    }
}
