//! The shared table of enqueue inputs, `tests/cases/enqueue_validation.json`, read once for
//! every entry point that runs it: the Rust builder (`producer/tests/validation_table.rs`),
//! PostgreSQL's `outbox.enqueue` and SQL Server's `outbox.Enqueue` (`it/sql_api/`). Each
//! runner maps a case's inputs to its own API; what the inputs mean is decided here.

use serde_json::{Map, Value};

const TABLE: &str = include_str!("../cases/enqueue_validation.json");

/// The fewest cases the table may hold: a runner that sees fewer fails (the table lost cases).
pub const MIN_CASES: usize = 50;

/// One row of the table: its inputs (the defaults with the case's `set` applied) and what every
/// entry point must answer.
#[derive(Debug, Clone)]
pub struct EnqueueCase {
    /// What the case is about.
    pub name: String,
    /// Every input, by the table's field names.
    pub inputs: Map<String, Value>,
    /// `None` when the enqueue is accepted; otherwise the field the refusal names.
    pub expect: Option<String>,
}

impl EnqueueCase {
    /// A text input; `None` when the table gives null.
    pub fn text(&self, field: &str) -> Option<String> {
        self.input(field).as_str().map(str::to_owned)
    }

    /// A flag input.
    pub fn flag(&self, field: &str) -> bool {
        self.input(field)
            .as_bool()
            .unwrap_or_else(|| panic!("{}: {field} is not a boolean", self.name))
    }

    /// A number input.
    pub fn number(&self, field: &str) -> u64 {
        self.input(field)
            .as_u64()
            .unwrap_or_else(|| panic!("{}: {field} is not a number", self.name))
    }

    /// The headers as the table writes them: a JSON list of `[name, value]`.
    pub fn headers_json(&self) -> Value {
        self.input("headers").clone()
    }

    /// The headers as pairs.
    pub fn headers(&self) -> Vec<(String, String)> {
        let list = self.input("headers").as_array();
        let list = list.unwrap_or_else(|| panic!("{}: headers is not a list", self.name));
        list.iter()
            .map(|pair| {
                let text = |i: usize| pair[i].as_str().map(str::to_owned);
                match (text(0), text(1)) {
                    (Some(name), Some(value)) => (name, value),
                    _ => panic!("{}: a header is not [name, value]", self.name),
                }
            })
            .collect()
    }

    /// The body (`body` repeated `body_repeat` times, as UTF-8) and its content type, given
    /// together or not at all, as the builder's `.body(bytes, content_type)` takes them.
    pub fn body_and_content_type(&self) -> Option<(Vec<u8>, String)> {
        let repeat = usize::try_from(self.number("body_repeat")).expect("body_repeat fits");
        match (self.text("body"), self.text("content_type")) {
            (Some(body), Some(content_type)) => {
                Some((body.repeat(repeat).into_bytes(), content_type))
            }
            _ => None,
        }
    }

    /// The input field whose text holds a NUL character, if one does.
    pub fn nul_field(&self) -> Option<&str> {
        self.inputs
            .iter()
            .find(|(_, value)| value.as_str().is_some_and(|s| s.contains('\0')))
            .map(|(k, _)| k.as_str())
    }

    fn input(&self, field: &str) -> &Value {
        self.inputs
            .get(field)
            .unwrap_or_else(|| panic!("{}: the table has no field {field}", self.name))
    }
}

/// Every case of the table, in its order. Panics on a malformed table: it is test data.
pub fn enqueue_cases() -> Vec<EnqueueCase> {
    let table: Value = serde_json::from_str(TABLE).expect("the table is JSON");
    let defaults = table["defaults"].as_object().expect("defaults");
    let cases = table["cases"].as_array().expect("cases");
    let cases: Vec<EnqueueCase> = cases
        .iter()
        .map(|case| {
            let name = case["name"].as_str().expect("a case has a name").to_owned();
            let mut inputs = defaults.clone();
            for (k, v) in case["set"].as_object().expect("set") {
                assert!(inputs.contains_key(k), "{name}: sets an unknown field {k}");
                inputs.insert(k.clone(), v.clone());
            }
            let expect = match &case["expect"] {
                Value::String(s) if s == "ok" => None,
                other => Some(
                    other["invalid"]
                        .as_str()
                        .unwrap_or_else(|| {
                            panic!("{name}: expect is \"ok\" or {{\"invalid\": field}}")
                        })
                        .to_owned(),
                ),
            };
            EnqueueCase {
                name,
                inputs,
                expect,
            }
        })
        .collect();
    assert!(
        cases.len() >= MIN_CASES,
        "the table lost cases: {}",
        cases.len()
    );
    cases
}
