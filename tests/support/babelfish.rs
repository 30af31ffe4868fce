//! What Babelfish for PostgreSQL 4.3 lacks that some SQL Server tests need, each seen on a
//! real server (issue 25). A test that needs one calls `TestDb::skip_on_babelfish` with it and
//! returns there, or `TestDb::part_not_run_on_babelfish` to leave out only that part; on SQL
//! Server it runs in full. Each text says what Babelfish does instead. Also the stand-ins for
//! the SQL API's helpers Babelfish cannot run (`TestDb::babelfish_sql_api_stand_ins`).
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

/// No ownership chaining through procedures: a procedure runs with its caller's rights ("permission
/// denied for table …" when the caller holds only `EXECUTE`), so a role that holds only
/// `EXECUTE` on the SQL API cannot be shown to work there, only to be refused the tables.
pub const NO_OWNERSHIP_CHAINING: &str = "Babelfish 4.3 runs a procedure with its caller's \
rights (no ownership chaining), so a user holding only EXECUTE on the SQL API is refused its \
tables";

/// The SQL API's helpers that use what Babelfish lacks, each with a body it runs, for tests
/// that exercise the procedures around them there: `CharCount` (no `_SC` collation; Babelfish's
/// `LEN` counts characters already, its text being UTF-8), `HasLoneSurrogate` (its `CONVERT`
/// of a binary to `nchar` reads single bytes; UTF-8 text holds no surrogate code unit, so 0)
/// and `Utf8` (no `_UTF8` collation; the `varchar` bytes are the UTF-8 ones for ASCII text
/// only, so these stand-ins are for tests whose text is ASCII). What they replace is proven on
/// SQL Server only. `ALTER FUNCTION` is not supported there: each is dropped and created again.
pub const SQL_API_STAND_INS: &[(&str, &str)] = &[
    (
        "outbox.CharCount",
        "CREATE FUNCTION outbox.CharCount(@Text nvarchar(max)) RETURNS bigint AS \
         BEGIN RETURN LEN(CONCAT(@Text, N'.')) - 1; END",
    ),
    (
        "outbox.HasLoneSurrogate",
        "CREATE FUNCTION outbox.HasLoneSurrogate(@Text nvarchar(max)) RETURNS bit AS \
         BEGIN RETURN 0; END",
    ),
    (
        "outbox.Utf8",
        "CREATE FUNCTION outbox.Utf8(@Text nvarchar(max)) RETURNS varbinary(max) AS \
         BEGIN RETURN CAST(CAST(@Text AS varchar(max)) AS varbinary(max)); END",
    ),
];

/// LIKE reads a `-` at the end of a bracket class (`[^a-z0-9_-]`, literal on SQL Server) as
/// part of a range, so the pattern matches nothing: the SQL API's destination check (and the
/// table's check constraint) lets any text through there.
pub const LIKE_CLASS_ENDING_IN_HYPHEN: &str = "Babelfish's LIKE does not read a '-' at the end \
of a bracket class as itself, so the destination check [^a-z0-9_-] refuses nothing there";

/// `GROUP BY` a `datetimeoffset` column alone, with aggregates, leaves equal values in groups
/// of their own (seen: two rows of the same minute read back as two groups), so a read summed
/// by minute is not summed there.
pub const GROUP_BY_DATETIMEOFFSET: &str = "Babelfish's GROUP BY of a datetimeoffset column \
alone does not group equal values, so samples of one minute come back apart";
