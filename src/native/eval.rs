//! A small CEL evaluator for the tests of the compiled expressions: the subset the compiler
//! writes for pod templates and counts (literals, field selection and `has`, indexing, the
//! operators, the conditional, list and map literals, `map`/`filter`/`exists`/`all`,
//! `lists.range`, `size`, `int`, `string`, `type`, `dyn`, message literals (as maps of their fields),
//! and the `min`, `max`, `sort`, `join`, `flatten`, `lowerAscii`, `contains`, `startsWith` and `replace`
//! methods), with CEL's grammar and semantics for what it covers: a missing field or an
//! overflow is an error, `&&` and `||` absorb an error the other side decides, values of
//! different types are never equal.

use serde_json::Value as Json;

/// A CEL value.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(String),
    List(Vec<V>),
    Map(Vec<(V, V)>),
    Type(&'static str),
    /// A Kubernetes quantity (`quantity(s)`).
    Quantity(crate::quantity::Quantity),
}

impl V {
    /// A JSON value as the API server hands it to CEL.
    pub fn from_json(j: &Json) -> V {
        match j {
            Json::Null => V::Null,
            Json::Bool(b) => V::Bool(*b),
            Json::Number(n) => n
                .as_i64()
                .map_or_else(|| V::Double(n.as_f64().unwrap_or(0.0)), V::Int),
            Json::String(s) => V::Str(s.clone()),
            Json::Array(a) => V::List(a.iter().map(V::from_json).collect()),
            Json::Object(o) => V::Map(
                o.iter()
                    .map(|(k, v)| (V::Str(k.clone()), V::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// The value as JSON (a type as its name).
    pub fn into_json(self) -> Json {
        match self {
            V::Null => Json::Null,
            V::Bool(b) => Json::Bool(b),
            V::Int(i) => Json::from(i),
            V::Double(d) => Json::from(d),
            V::Str(s) => Json::String(s),
            V::List(l) => Json::Array(l.into_iter().map(V::into_json).collect()),
            V::Map(m) => Json::Object(
                m.into_iter()
                    .map(|(k, v)| match k {
                        V::Str(k) => (k, v.into_json()),
                        k => (format!("{k:?}"), v.into_json()),
                    })
                    .collect(),
            ),
            V::Type(t) => Json::String(t.to_string()),
            V::Quantity(q) => Json::String(q.to_string()),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            V::Null => "null_type",
            V::Bool(_) => "bool",
            V::Int(_) => "int",
            V::Double(_) => "double",
            V::Str(_) => "string",
            V::List(_) => "list",
            V::Map(_) => "map",
            V::Type(_) => "type",
            V::Quantity(_) => "quantity",
        }
    }

    fn get(&self, key: &V) -> Result<V, String> {
        match (self, key) {
            (V::Map(m), k) => m
                .iter()
                .find(|(mk, _)| equal(mk, k))
                .map(|(_, v)| v.clone())
                .ok_or_else(|| format!("no such key: {k:?}")),
            (V::List(l), V::Int(i)) => usize::try_from(*i)
                .ok()
                .and_then(|i| l.get(i).cloned())
                .ok_or_else(|| format!("index out of range: {i}")),
            _ => Err(format!("cannot index {self:?} by {key:?}")),
        }
    }
}

fn equal(a: &V, b: &V) -> bool {
    match (a, b) {
        (V::Int(x), V::Double(y)) | (V::Double(y), V::Int(x)) => (*x as f64) == *y,
        (V::List(x), V::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b)),
        _ => a == b,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Double(f64),
    Str(String),
    Ident(String),
    P(&'static str),
}

const PUNCT: [&str; 23] = [
    "&&", "||", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ".", "?", ":", "<", ">",
    "+", "-", "*", "/", "!",
];

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            // A double literal: digits, a point, digits.
            if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let d: f64 = src[start..i].parse().map_err(|e| format!("{e}"))?;
                out.push(Tok::Double(d));
                continue;
            }
            let n: i64 = src[start..i].parse().map_err(|e| format!("{e}"))?;
            out.push(Tok::Int(n));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(src[start..i].to_string()));
        } else if c == '\'' || c == '"' {
            let quote = b[i];
            i += 1;
            let mut s = String::new();
            loop {
                let Some(&ch) = b.get(i) else {
                    return Err("unterminated string".into());
                };
                if ch == quote {
                    i += 1;
                    break;
                }
                if ch == b'\\' {
                    i += 1;
                    let escaped = *b.get(i).ok_or("bad escape")?;
                    s.push(match escaped {
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'\\' | b'\'' | b'"' => escaped as char,
                        other => {
                            return Err(format!("escape \\{} is not read here", other as char));
                        }
                    });
                    i += 1;
                    continue;
                }
                let ch = src[i..].chars().next().ok_or("bad text")?;
                s.push(ch);
                i += ch.len_utf8();
            }
            out.push(Tok::Str(s));
        } else if let Some(p) = PUNCT.iter().find(|p| src[i..].starts_with(**p)) {
            out.push(Tok::P(p));
            i += p.len();
        } else {
            return Err(format!("unexpected {c:?} at {i}"));
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
enum E {
    Lit(V),
    Ident(String),
    Select(Box<E>, String),
    Index(Box<E>, Box<E>),
    Call(String, Vec<E>),
    Method(Box<E>, String, Vec<E>),
    List(Vec<E>),
    Map(Vec<(E, E)>),
    Not(Box<E>),
    Neg(Box<E>),
    Bin(&'static str, Box<E>, Box<E>),
    Cond(Box<E>, Box<E>, Box<E>),
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Tok::P(q)) if *q == p) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), String> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(format!(
                "expected {p} at token {}: {:?}",
                self.at,
                self.peek()
            ))
        }
    }

    /// CEL's grammar: `expr = conditionalOr ["?" conditionalOr ":" expr]`. The branch taken
    /// when the condition holds is no conditional unless parenthesised: the API server refuses
    /// `a ? b ? c : d : e`.
    fn expr(&mut self) -> Result<E, String> {
        let c = self.or()?;
        if self.eat("?") {
            let a = self.or()?;
            self.expect(":")?;
            let b = self.expr()?;
            return Ok(E::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }

    fn or(&mut self) -> Result<E, String> {
        let mut l = self.and()?;
        while self.eat("||") {
            l = E::Bin("||", Box::new(l), Box::new(self.and()?));
        }
        Ok(l)
    }

    fn and(&mut self) -> Result<E, String> {
        let mut l = self.rel()?;
        while self.eat("&&") {
            l = E::Bin("&&", Box::new(l), Box::new(self.rel()?));
        }
        Ok(l)
    }

    fn rel(&mut self) -> Result<E, String> {
        let mut l = self.add()?;
        loop {
            let op = match self.peek() {
                Some(Tok::P(p)) if ["==", "!=", "<", ">", "<=", ">="].contains(p) => *p,
                Some(Tok::Ident(w)) if w == "in" => "in",
                _ => return Ok(l),
            };
            self.at += 1;
            l = E::Bin(op, Box::new(l), Box::new(self.add()?));
        }
    }

    fn add(&mut self) -> Result<E, String> {
        let mut l = self.mul()?;
        loop {
            let op = if self.eat("+") {
                "+"
            } else if self.eat("-") {
                "-"
            } else {
                return Ok(l);
            };
            l = E::Bin(op, Box::new(l), Box::new(self.mul()?));
        }
    }

    fn mul(&mut self) -> Result<E, String> {
        let mut l = self.unary()?;
        loop {
            let op = if self.eat("*") {
                "*"
            } else if self.eat("/") {
                "/"
            } else {
                return Ok(l);
            };
            l = E::Bin(op, Box::new(l), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<E, String> {
        if self.eat("!") {
            return Ok(E::Not(Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(E::Neg(Box::new(self.unary()?)));
        }
        self.member()
    }

    fn args(&mut self, close: &str) -> Result<Vec<E>, String> {
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.expr()?);
            if self.eat(close) {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    fn member(&mut self) -> Result<E, String> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                let Some(Tok::Ident(name)) = self.peek().cloned() else {
                    return Err("expected a name after '.'".into());
                };
                self.at += 1;
                if self.eat("(") {
                    e = E::Method(Box::new(e), name, self.args(")")?);
                } else {
                    e = E::Select(Box::new(e), name);
                }
            } else if self.eat("[") {
                let i = self.expr()?;
                self.expect("]")?;
                e = E::Index(Box::new(e), Box::new(i));
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<E, String> {
        let tok = self.peek().cloned().ok_or("unexpected end")?;
        self.at += 1;
        Ok(match tok {
            Tok::Int(n) => E::Lit(V::Int(n)),
            Tok::Double(d) => E::Lit(V::Double(d)),
            Tok::Str(s) => E::Lit(V::Str(s)),
            Tok::Ident(w) => match w.as_str() {
                "true" => E::Lit(V::Bool(true)),
                "false" => E::Lit(V::Bool(false)),
                "null" => E::Lit(V::Null),
                _ if self.eat("(") => E::Call(w, self.args(")")?),
                // A message literal (`JSONPatch{op: 'add', ...}`) evaluates as a map of its
                // fields.
                _ if w.starts_with(|c: char| c.is_ascii_uppercase()) && self.eat("{") => {
                    let mut out = Vec::new();
                    if !self.eat("}") {
                        loop {
                            let Some(Tok::Ident(field)) = self.peek().cloned() else {
                                return Err(format!("a field name in {w}"));
                            };
                            self.at += 1;
                            self.expect(":")?;
                            out.push((E::Lit(V::Str(field)), self.expr()?));
                            if self.eat("}") {
                                break;
                            }
                            self.expect(",")?;
                        }
                    }
                    E::Map(out)
                }
                "int" | "bool" | "string" | "double" | "list" | "map" => {
                    E::Lit(V::Type(match w.as_str() {
                        "int" => "int",
                        "bool" => "bool",
                        "string" => "string",
                        "double" => "double",
                        "list" => "list",
                        _ => "map",
                    }))
                }
                _ => E::Ident(w),
            },
            Tok::P("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                e
            }
            Tok::P("[") => E::List(self.args("]")?),
            Tok::P("{") => {
                let mut out = Vec::new();
                if !self.eat("}") {
                    loop {
                        let k = self.expr()?;
                        self.expect(":")?;
                        out.push((k, self.expr()?));
                        if self.eat("}") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                E::Map(out)
            }
            t => return Err(format!("unexpected {t:?}")),
        })
    }
}

/// A parsed expression.
pub struct Program(E);

/// Parses `src`.
pub fn parse(src: &str) -> Result<Program, String> {
    let mut p = Parser {
        toks: lex(src)?,
        at: 0,
    };
    let e = p.expr()?;
    if p.at != p.toks.len() {
        return Err(format!("trailing input at token {}: {:?}", p.at, p.peek()));
    }
    Ok(Program(e))
}

impl Program {
    /// Evaluates the expression with the variables `vars`.
    pub fn run(&self, vars: &[(&str, V)]) -> Result<V, String> {
        let mut env: Vec<(String, V)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        ev(&self.0, &mut env)
    }
}

/// Evaluates `src` with the variables `vars`.
pub fn eval(src: &str, vars: &[(&str, V)]) -> Result<V, String> {
    parse(src)?.run(vars)
}

fn int(v: V) -> Result<i64, String> {
    match v {
        V::Int(i) => Ok(i),
        v => Err(format!("not an int: {v:?}")),
    }
}

fn boolean(v: V) -> Result<bool, String> {
    match v {
        V::Bool(b) => Ok(b),
        v => Err(format!("not a bool: {v:?}")),
    }
}

fn list(v: V) -> Result<Vec<V>, String> {
    match v {
        V::List(l) => Ok(l),
        v => Err(format!("not a list: {v:?}")),
    }
}

fn ev(e: &E, env: &mut Vec<(String, V)>) -> Result<V, String> {
    match e {
        E::Lit(v) => Ok(v.clone()),
        E::Ident(name) => env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("undeclared {name}")),
        E::Select(base, f) => ev(base, env)?.get(&V::Str(f.clone())),
        E::Index(base, i) => {
            let b = ev(base, env)?;
            b.get(&ev(i, env)?)
        }
        E::List(items) => Ok(V::List(
            items.iter().map(|i| ev(i, env)).collect::<Result<_, _>>()?,
        )),
        E::Map(items) => Ok(V::Map(
            items
                .iter()
                .map(|(k, v)| Ok((ev(k, env)?, ev(v, env)?)))
                .collect::<Result<_, String>>()?,
        )),
        E::Not(x) => Ok(V::Bool(!boolean(ev(x, env)?)?)),
        E::Neg(x) => Ok(V::Int(int(ev(x, env)?)?.checked_neg().ok_or("overflow")?)),
        E::Cond(c, a, b) => {
            if boolean(ev(c, env)?)? {
                ev(a, env)
            } else {
                ev(b, env)
            }
        }
        E::Bin(op @ ("&&" | "||"), l, r) => {
            let decides = *op == "||";
            let l = ev(l, env).and_then(boolean);
            if l == Ok(decides) {
                return Ok(V::Bool(decides));
            }
            let r = ev(r, env).and_then(boolean);
            match (l, r) {
                (_, Ok(b)) if b == decides => Ok(V::Bool(decides)),
                (Ok(_), Ok(b)) => Ok(V::Bool(b)),
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
        E::Bin(op, l, r) => {
            let (l, r) = (ev(l, env)?, ev(r, env)?);
            match (*op, l, r) {
                ("==", a, b) => Ok(V::Bool(equal(&a, &b))),
                ("!=", a, b) => Ok(V::Bool(!equal(&a, &b))),
                ("in", k, V::Map(m)) => Ok(V::Bool(m.iter().any(|(mk, _)| equal(mk, &k)))),
                ("in", x, V::List(l)) => Ok(V::Bool(l.iter().any(|y| equal(y, &x)))),
                ("<", V::Int(a), V::Int(b)) => Ok(V::Bool(a < b)),
                (">", V::Int(a), V::Int(b)) => Ok(V::Bool(a > b)),
                ("<=", V::Int(a), V::Int(b)) => Ok(V::Bool(a <= b)),
                (">=", V::Int(a), V::Int(b)) => Ok(V::Bool(a >= b)),
                ("+", V::Int(a), V::Int(b)) => {
                    a.checked_add(b).map(V::Int).ok_or("overflow".into())
                }
                ("-", V::Int(a), V::Int(b)) => {
                    a.checked_sub(b).map(V::Int).ok_or("overflow".into())
                }
                ("*", V::Int(a), V::Int(b)) => {
                    a.checked_mul(b).map(V::Int).ok_or("overflow".into())
                }
                ("/", V::Int(a), V::Int(b)) => {
                    a.checked_div(b).map(V::Int).ok_or("division".into())
                }
                ("+", V::Str(a), V::Str(b)) => Ok(V::Str(format!("{a}{b}"))),
                ("+", V::List(mut a), V::List(b)) => {
                    a.extend(b);
                    Ok(V::List(a))
                }
                (op, a, b) => Err(format!("no {op} for {a:?} and {b:?}")),
            }
        }
        E::Call(f, args) => match (f.as_str(), args.as_slice()) {
            ("has", [E::Select(base, field)]) => match ev(base, env)? {
                V::Map(m) => Ok(V::Bool(m.iter().any(|(k, _)| *k == V::Str(field.clone())))),
                v => Err(format!("has() on {v:?}")),
            },
            ("type", [x]) => Ok(V::Type(ev(x, env)?.type_name())),
            ("dyn", [x]) => ev(x, env),
            ("size", [x]) => match ev(x, env)? {
                V::List(l) => Ok(V::Int(l.len() as i64)),
                V::Map(m) => Ok(V::Int(m.len() as i64)),
                V::Str(s) => Ok(V::Int(s.chars().count() as i64)),
                v => Err(format!("size of {v:?}")),
            },
            ("isQuantity", [x]) => match ev(x, env)? {
                V::Str(s) => Ok(V::Bool(crate::quantity::Quantity::parse(&s).is_ok())),
                v => Err(format!("isQuantity of {v:?}")),
            },
            ("quantity", [x]) => match ev(x, env)? {
                V::Str(s) => crate::quantity::Quantity::parse(&s)
                    .map(V::Quantity)
                    .map_err(|e| format!("quantity({s:?}): {e}")),
                v => Err(format!("quantity of {v:?}")),
            },
            ("int", [x]) => match ev(x, env)? {
                V::Int(i) => Ok(V::Int(i)),
                V::Str(s) => s
                    .parse::<i64>()
                    .map(V::Int)
                    .map_err(|_| format!("int({s:?})")),
                v => Err(format!("int of {v:?}")),
            },
            ("string", [x]) => match ev(x, env)? {
                V::Int(i) => Ok(V::Str(i.to_string())),
                V::Double(d) => Ok(V::Str(d.to_string())),
                V::Str(s) => Ok(V::Str(s)),
                v => Err(format!("string of {v:?}")),
            },
            (f, _) => Err(format!("unknown function {f}")),
        },
        E::Method(target, m, args) => {
            if let (E::Ident(ns), "range", [n]) = (target.as_ref(), m.as_str(), args.as_slice())
                && ns == "lists"
            {
                let n = int(ev(n, env)?)?;
                return Ok(V::List((0..n.max(0)).map(V::Int).collect()));
            }
            let t = ev(target, env)?;
            match (m.as_str(), args.as_slice()) {
                (macro_ @ ("map" | "filter" | "exists" | "all"), [E::Ident(var), body]) => {
                    let items: Vec<V> = match t {
                        V::List(l) => l,
                        V::Map(m) => m.into_iter().map(|(k, _)| k).collect(),
                        v => return Err(format!("{macro_} over {v:?}")),
                    };
                    let mut out = Vec::new();
                    for item in items {
                        env.push((var.clone(), item.clone()));
                        let r = ev(body, env);
                        env.pop();
                        let r = r?;
                        match macro_ {
                            "map" => out.push(r),
                            "filter" => {
                                if boolean(r)? {
                                    out.push(item)
                                }
                            }
                            "exists" => {
                                if boolean(r)? {
                                    return Ok(V::Bool(true));
                                }
                            }
                            _ => {
                                if !boolean(r)? {
                                    return Ok(V::Bool(false));
                                }
                            }
                        }
                    }
                    Ok(match macro_ {
                        "exists" => V::Bool(false),
                        "all" => V::Bool(true),
                        _ => V::List(out),
                    })
                }
                ("min" | "max", []) => {
                    let l: Vec<i64> = list(t)?.into_iter().map(int).collect::<Result<_, _>>()?;
                    let v = if m == "min" {
                        l.iter().min()
                    } else {
                        l.iter().max()
                    };
                    v.map(|v| V::Int(*v))
                        .ok_or_else(|| "min/max of an empty list".into())
                }
                ("join", [separator]) => {
                    let separator = match ev(separator, env)? {
                        V::Str(s) => s,
                        v => return Err(format!("join with {v:?}")),
                    };
                    let parts: Vec<String> = list(t)?
                        .into_iter()
                        .map(|v| match v {
                            V::Str(s) => Ok(s),
                            v => Err(format!("join of {v:?}")),
                        })
                        .collect::<Result<_, _>>()?;
                    Ok(V::Str(parts.join(&separator)))
                }
                ("sort", []) => {
                    let mut l: Vec<String> = list(t)?
                        .into_iter()
                        .map(|v| match v {
                            V::Str(s) => Ok(s),
                            v => Err(format!("sort of {v:?}")),
                        })
                        .collect::<Result<_, String>>()?;
                    l.sort();
                    Ok(V::List(l.into_iter().map(V::Str).collect()))
                }
                ("flatten", []) => {
                    let mut out = Vec::new();
                    for item in list(t)? {
                        out.extend(list(item)?);
                    }
                    Ok(V::List(out))
                }
                ("lowerAscii", []) => match t {
                    V::Str(s) => Ok(V::Str(s.to_ascii_lowercase())),
                    v => Err(format!("lowerAscii of {v:?}")),
                },
                ("contains", [a]) => match (t, ev(a, env)?) {
                    (V::Str(s), V::Str(a)) => Ok(V::Bool(s.contains(&a))),
                    _ => Err("contains needs strings".into()),
                },
                ("startsWith" | "endsWith", [a]) => match (t, ev(a, env)?) {
                    (V::Str(s), V::Str(a)) => Ok(V::Bool(if m == "startsWith" {
                        s.starts_with(&a)
                    } else {
                        s.ends_with(&a)
                    })),
                    _ => Err(format!("{m} needs strings")),
                },
                ("substring", [a]) => match (t, ev(a, env)?) {
                    (V::Str(s), V::Int(n)) => usize::try_from(n)
                        .ok()
                        .filter(|n| *n <= s.chars().count())
                        .map(|n| V::Str(s.chars().skip(n).collect()))
                        .ok_or_else(|| format!("substring({n}) of {s:?}")),
                    _ => Err("substring needs a string and an int".into()),
                },
                // Only the whole-name expressions the compiler writes for `*`/`?` patterns:
                // `^…$` of literal characters (`\\` escapes), `.*` and `.`.
                ("matches", [a]) => match (t, ev(a, env)?) {
                    (V::Str(s), V::Str(re)) => {
                        let body = re
                            .strip_prefix('^')
                            .and_then(|r| r.strip_suffix('$'))
                            .ok_or_else(|| format!("unsupported regex {re:?}"))?;
                        let mut pattern = String::new();
                        let mut chars = body.chars().peekable();
                        while let Some(c) = chars.next() {
                            match c {
                                '\\' => pattern.push(chars.next().ok_or("a trailing \\")?),
                                '.' if chars.peek() == Some(&'*') => {
                                    chars.next();
                                    pattern.push('*');
                                }
                                '.' => pattern.push('?'),
                                '*' | '?' | '[' | '(' | '|' | '+' => {
                                    return Err(format!("unsupported regex {re:?}"));
                                }
                                c => pattern.push(c),
                            }
                        }
                        Ok(V::Bool(wildmatch::WildMatch::new(&pattern).matches(&s)))
                    }
                    _ => Err("matches needs strings".into()),
                },
                ("compareTo", [a]) => match (t, ev(a, env)?) {
                    (V::Quantity(q), V::Quantity(o)) => Ok(V::Int(match q.cmp(&o) {
                        std::cmp::Ordering::Less => -1,
                        std::cmp::Ordering::Equal => 0,
                        std::cmp::Ordering::Greater => 1,
                    })),
                    _ => Err("compareTo needs quantities".into()),
                },
                ("sign", []) => match t {
                    V::Quantity(q) => Ok(V::Int(if q.is_negative() {
                        -1
                    } else if q == crate::quantity::Quantity::ZERO {
                        0
                    } else {
                        1
                    })),
                    v => Err(format!("sign of {v:?}")),
                },
                ("replace", [a, b]) => match (t, ev(a, env)?, ev(b, env)?) {
                    (V::Str(s), V::Str(a), V::Str(b)) => Ok(V::Str(s.replace(&a, &b))),
                    _ => Err("replace needs strings".into()),
                },
                (m, _) => Err(format!("unknown method {m}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The evaluator parses what the API server parses: a conditional in the middle of another
    /// needs parentheses, one after the `:` does not.
    #[test]
    fn a_conditional_is_parsed_as_cel_parses_it() {
        assert!(parse("true ? false ? 1 : 2 : 3").is_err());
        assert_eq!(eval("true ? (false ? 1 : 2) : 3", &[]), Ok(V::Int(2)));
        assert_eq!(eval("false ? 1 : true ? 2 : 3", &[]), Ok(V::Int(2)));
    }

    #[test]
    fn starts_with_compares_prefixes() {
        assert_eq!(
            eval("'kueue.x-k8s.io/a'.startsWith('kueue.x-k8s.io/')", &[]),
            Ok(V::Bool(true))
        );
        assert_eq!(
            eval("'app'.startsWith('kueue.x-k8s.io/')", &[]),
            Ok(V::Bool(false))
        );
    }
}
