//! A small JSON reader for what the library hands out (the config the learner was created
//! from, metrics): std only, no registry crates. Numbers are f64.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(BTreeMap<String, Value>),
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(m) => m.get(key),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(x) => Some(*x),
            _ => None,
        }
    }
    pub fn as_u64(&self) -> Option<u64> {
        self.as_f64().filter(|x| *x >= 0.0 && x.fract() == 0.0).map(|x| x as u64)
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&Vec<Value>> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Parse JSON text; Err(byte offset, what) on malformed input.
pub fn parse(text: &str) -> Result<Value, (usize, &'static str)> {
    let mut p = Parser { b: text.as_bytes(), i: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != p.b.len() {
        return Err((p.i, "trailing characters"));
    }
    Ok(v)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn lit(&mut self, s: &[u8], v: Value) -> Result<Value, (usize, &'static str)> {
        if self.b[self.i..].starts_with(s) {
            self.i += s.len();
            Ok(v)
        } else {
            Err((self.i, "bad literal"))
        }
    }
    fn value(&mut self) -> Result<Value, (usize, &'static str)> {
        self.ws();
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.lit(b"true", Value::Bool(true)),
            Some(b'f') => self.lit(b"false", Value::Bool(false)),
            Some(b'n') => self.lit(b"null", Value::Null),
            Some(_) => self.number(),
            None => Err((self.i, "unexpected end")),
        }
    }
    fn object(&mut self) -> Result<Value, (usize, &'static str)> {
        self.i += 1;
        let mut m = BTreeMap::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Value::Object(m));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err((self.i, "expected a key"));
            }
            let k = self.string()?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err((self.i, "expected ':'"));
            }
            self.i += 1;
            let v = self.value()?;
            m.insert(k, v);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(m));
                }
                _ => return Err((self.i, "expected ',' or '}'")),
            }
        }
    }
    fn array(&mut self) -> Result<Value, (usize, &'static str)> {
        self.i += 1;
        let mut a = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Value::Array(a));
        }
        loop {
            a.push(self.value()?);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(a));
                }
                _ => return Err((self.i, "expected ',' or ']'")),
            }
        }
    }
    fn string(&mut self) -> Result<String, (usize, &'static str)> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.b.len() && self.b[self.i] != b'"' && self.b[self.i] != b'\\' {
                self.i += 1;
            }
            let run = std::str::from_utf8(&self.b[start..self.i]).map_err(|_| (start, "utf-8"))?;
            out.push_str(run);
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let c = *self.b.get(self.i + 1).ok_or((self.i, "bad escape"))?;
                    self.i += 2;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hex = self.b.get(self.i..self.i + 4).ok_or((self.i, "bad \\u"))?;
                            let h = std::str::from_utf8(hex).map_err(|_| (self.i, "bad \\u"))?;
                            let code = u32::from_str_radix(h, 16).map_err(|_| (self.i, "bad \\u"))?;
                            self.i += 4;
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        _ => return Err((self.i, "bad escape")),
                    }
                }
                _ => return Err((self.i, "unterminated string")),
            }
        }
    }
    fn number(&mut self) -> Result<Value, (usize, &'static str)> {
        let start = self.i;
        while self.i < self.b.len()
            && matches!(self.b[self.i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        {
            self.i += 1;
        }
        let s = std::str::from_utf8(&self.b[start..self.i]).map_err(|_| (start, "number"))?;
        s.parse::<f64>().map(Value::Number).map_err(|_| (start, "bad number"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_library_writes() {
        let v = parse(r#"{"obs_dim": 4, "actions": [2, 3], "x": {"a": [true, null]},
                          "s": "a\"b\u0041", "e": -1.5e-3}"#)
            .unwrap();
        assert_eq!(v.get("obs_dim").and_then(Value::as_u64), Some(4));
        let acts: Vec<u64> = v.get("actions").unwrap().as_array().unwrap().iter()
            .map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(acts, vec![2, 3]);
        assert_eq!(v.get("s").and_then(Value::as_str), Some("a\"bA"));
        assert_eq!(v.get("e").and_then(Value::as_f64), Some(-1.5e-3));
        assert!(parse("{\"a\": 1,}").is_err());
        assert!(parse("[1 2]").is_err());
        assert_eq!(parse("{} x").unwrap_err().1, "trailing characters");
    }
}
