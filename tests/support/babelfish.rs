//! What Babelfish for PostgreSQL 4.3 lacks that some SQL Server tests need, each seen on a
//! real server (issue 25). A test that needs one calls `TestDb::skip_on_babelfish` with it and
//! returns there; on SQL Server it runs in full. Each text says what Babelfish does instead.
//! Also the URL setting with which tests and benchmarks open a store there.

/// `url` with `AllowBabelfishForTests=true` (added, or in place of its own value), without
/// which the store and `outbox_store::mssql::connect` refuse Babelfish: for the test harness
/// and the benchmark only. On SQL Server it changes nothing.
pub fn allowed_for_tests(url: &str) -> String {
    let mut parsed = url::Url::parse(url).expect("a URL the harness or the benchmark built");
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("AllowBabelfishForTests"))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    parsed
        .query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("AllowBabelfishForTests", "true");
    parsed.into()
}

/// Table hints take no lock: UPDLOCK, HOLDLOCK and READPAST are accepted and ignored
/// (`escape_hatch_table_hints = ignore`), so a test that proves a lock (a waiting takeover, one
/// winner of a race, nothing sent twice across a handover) cannot pass there.
pub const IGNORES_LOCKING_HINTS: &str = "Babelfish ignores locking hints (UPDLOCK, HOLDLOCK, \
READPAST take no lock), and this test proves a lock";

/// OPENJSON and JSON_VALUE return a string value with the JSON escapes of `"`, `\` and control
/// characters kept (`a\nb` comes back as the four characters a, \, n, b; `\u0022` as `\"`), so
/// text with those characters cannot travel in a JSON batch; no escape form avoids it.
pub const OPENJSON_KEEPS_ESCAPES: &str = "Babelfish's OPENJSON returns string values with \
their JSON escapes (\\\", \\\\, \\n) kept, and this test sends such text in a JSON batch";

/// No supplementary-character (`_SC`) or UTF-8 (`_UTF8`) collation exists, and the SQL API's
/// procedures use them to count characters and to hash UTF-8 bytes ("collation
/// latin1_general_100_ci_as_sc for encoding UTF8 does not exist").
pub const NO_SC_OR_UTF8_COLLATIONS: &str = "Babelfish has no _SC or _UTF8 collation, which \
the SQL API's procedures need to count characters and hash UTF-8 bytes";

/// Every statement batch is compiled as a new PL/tsql block and every login is slow: the
/// claim takes 60-80 ms there with nothing due (2.6 s with a 2,000-op backlog), the completion
/// about as long, and one `outboxctl` call 0.8-0.95 s, so a test whose deadlines, lease TTLs
/// or amount of work assume a server answering in milliseconds times out.
pub const SLOW_BATCHES: &str = "Babelfish compiles each statement batch afresh and logs in \
slowly (a claim takes 60-80 ms, an outboxctl call 0.8-0.95 s), and this test's deadlines or \
lease TTLs assume a server answering in milliseconds";
