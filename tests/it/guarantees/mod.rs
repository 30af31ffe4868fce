//! One module per guarantee of DESIGN.md, each test run against every backend.

mod g01_tokens;
mod g02_exclusive;
mod g03_renew_release;
mod g10_invalid_input;
