//! Which server a SQL Server URL reaches, and what the store does about it (issue 25):
//! Babelfish for PostgreSQL speaks SQL Server's protocol but ignores locking hints, so the
//! store refuses it unless the URL says the use is for tests only.

mod mssql {
    use outbox_store::{Error, Store};
    use outbox_tests::TestDb;

    /// `url` without the test-only setting the harness adds on Babelfish.
    fn without_test_setting(url: &str) -> String {
        let mut parsed = url::Url::parse(url).expect("the harness's URL");
        let kept: Vec<(String, String)> = parsed
            .query_pairs()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("AllowBabelfishForTests"))
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(kept);
        parsed.into()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
    async fn issue25_babelfish_is_refused_unless_the_url_allows_it_for_tests() {
        let db = TestDb::mssql().await;
        let plain = without_test_setting(db.url());
        let opened = Store::connect(&plain, TestDb::options()).await;
        if !db.babelfish() {
            // SQL Server (or Azure SQL): nothing to refuse, with or without the setting.
            opened.expect("SQL Server is opened");
            return;
        }
        let err = opened.expect_err("Babelfish is refused without the test-only setting");
        let Error::Invalid(invalid) = &err else {
            panic!("a typed refusal, not {err:?}");
        };
        assert_eq!(invalid.field, "database_url");
        for says in ["Babelfish", "locking hints", "AllowBabelfishForTests=true"] {
            assert!(invalid.reason.contains(says), "{err}");
        }
        let password = url::Url::parse(db.url())
            .unwrap()
            .password()
            .map(str::to_owned);
        if let Some(password) = password.filter(|p| p.len() > 3) {
            assert!(
                !err.to_string().contains(&password),
                "the password shows: {err}"
            );
        }
        // With it, the store opens and migrates.
        db.store().await;
    }
}
