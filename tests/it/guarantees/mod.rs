//! One module per guarantee of DESIGN.md, each test run against every backend.

mod g01_tokens;
mod g02_exclusive;
mod g03_renew_release;
mod g04_fenced_enqueue;
mod g05_never_sent;
mod g07_idempotency;
mod g10_invalid_input;
