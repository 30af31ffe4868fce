//! One statement with its parameters ([`Stmt`]) and reading its rows ([`Col`]). Parameters
//! are kept as the driver's values, so tests can check what each statement binds; columns
//! are decoded strictly (a `bigint` is an `i64`, an `int` an `i32`), and a column that is
//! missing, of another type or NULL where a value is required is an error naming it, never a
//! panic: a row written by hand can hold anything (G11).

use tiberius::{ColumnData, FromSql, IntoSql, Query, Row};
use time::OffsetDateTime;
use uuid::Uuid;

use super::error::{column_err, map_err};
use super::pool::Client;
use crate::error::Error;

/// A statement of `sql/mssql/` and its `@P1…@Pn` values, in order.
#[derive(Debug)]
pub(crate) struct Stmt<'a> {
    pub(crate) sql: &'static str,
    pub(crate) params: Vec<ColumnData<'a>>,
}

impl<'a> Stmt<'a> {
    /// The statement `sql`, nothing bound yet.
    pub(crate) fn new(sql: &'static str) -> Self {
        Stmt {
            sql,
            params: Vec::new(),
        }
    }

    /// Binds the next parameter.
    pub(crate) fn bind(mut self, value: impl IntoSql<'a> + 'a) -> Self {
        self.params.push(value.into_sql());
        self
    }

    /// Runs the statement and returns the rows of its (first and only) result set.
    pub(crate) async fn rows(self, c: &mut Client) -> Result<Vec<Row>, tiberius::error::Error> {
        let (sql, params) = typed_nulls(self.sql, self.params);
        let mut query = Query::new(sql);
        for p in params {
            query.bind(p);
        }
        query.query(c).await?.into_first_result().await
    }

    /// [`Stmt::rows`], its errors mapped.
    pub(crate) async fn fetch_all(self, c: &mut Client) -> Result<Vec<Row>, Error> {
        self.rows(c).await.map_err(map_err)
    }

    /// The first row, if any.
    pub(crate) async fn fetch_optional(self, c: &mut Client) -> Result<Option<Row>, Error> {
        Ok(self.fetch_all(c).await?.into_iter().next())
    }

    /// The one row the statement always returns.
    pub(crate) async fn fetch_one(self, c: &mut Client) -> Result<Row, Error> {
        self.fetch_optional(c)
            .await?
            .ok_or_else(|| column_err("(row)", "the statement returned no row"))
    }

    /// Runs a statement whose result is its `affected` row count.
    pub(crate) async fn affected(self, c: &mut Client) -> Result<u64, Error> {
        affected(&self.fetch_one(c).await?)
    }

    /// Runs a statement for its effect only.
    pub(crate) async fn execute(self, c: &mut Client) -> Result<(), Error> {
        self.fetch_all(c).await.map(drop)
    }
}

/// The statement as sent: every NULL the driver would send untyped is sent as a typed value of
/// the same declared type, and set to NULL by the statement's first line.
///
/// tiberius 0.13 declares a NULL text or binary parameter with its type (`nvarchar(4000)`,
/// `varbinary(max)`) but sends its value as TDS NULLTYPE (0x1F). SQL Server accepts that;
/// Babelfish for PostgreSQL refuses it ("Data type 0x1F is unknown", Msg 8009), and so may
/// other strict TDS servers. An `@Pn` of `sp_executesql` is a variable of the batch, so
/// `SET @Pn = NULL;` before the statement gives it the very value and type the statement
/// expected. The prefix holds only parameter numbers, never a value: the SQL stays
/// parameterised. The time types are sent as NULLTYPE too (`admin_op_list.sql` binds two
/// optional `datetimeoffset` bounds); integers, `bit` and `uniqueidentifier` NULLs are typed
/// already and are left as they are.
pub(crate) fn typed_nulls<'a>(
    sql: &'static str,
    mut params: Vec<ColumnData<'a>>,
) -> (std::borrow::Cow<'static, str>, Vec<ColumnData<'a>>) {
    let mut prefix = String::new();
    for (i, p) in params.iter_mut().enumerate() {
        let typed = match p {
            // Declared nvarchar(4000) either way (tiberius's type_name).
            ColumnData::String(None) => ColumnData::String(Some("".into())),
            // Declared varbinary(8000) instead of varbinary(max): it only ever holds NULL.
            ColumnData::Binary(None) => ColumnData::Binary(Some((&[][..]).into())),
            ColumnData::DateTimeOffset(None) => ColumnData::DateTimeOffset(Some(
                tiberius::time::DateTimeOffset::new(any_datetime2(), 0),
            )),
            ColumnData::DateTime2(None) => ColumnData::DateTime2(Some(any_datetime2())),
            ColumnData::Date(None) => ColumnData::Date(Some(tiberius::time::Date::new(0))),
            ColumnData::Time(None) => ColumnData::Time(Some(any_datetime2().time())),
            _ => continue,
        };
        *p = typed;
        prefix.push_str(&format!("SET @P{} = NULL;\n", i + 1));
    }
    if prefix.is_empty() {
        (sql.into(), params)
    } else {
        prefix.push_str(sql);
        (prefix.into(), params)
    }
}

/// A `datetime2(7)` value for a parameter the statement sets to NULL before reading it
/// (0001-01-01, midnight): declared at the scale tiberius declares for a NULL.
fn any_datetime2() -> tiberius::time::DateTime2 {
    tiberius::time::DateTime2::new(
        tiberius::time::Date::new(0),
        tiberius::time::Time::new(0, 7),
    )
}

/// The `affected` column of a statement that reports its row count.
pub(crate) fn affected(row: &Row) -> Result<u64, Error> {
    let n: i64 = row.col("affected")?;
    u64::try_from(n).map_err(|_| column_err("affected", "is negative"))
}

/// A Rust value one column decodes to.
pub(crate) trait Cell: Sized {
    /// The value, or why there is none.
    fn cell(data: &ColumnData<'static>) -> Result<Self, String>;
}

/// Implements [`Cell`] for `$t` and `Option<$t>` by the driver's strict decoding of `$via`.
macro_rules! cells {
    ($($t:ty => $via:ty, $own:expr;)*) => {$(
        impl Cell for Option<$t> {
            fn cell(data: &ColumnData<'static>) -> Result<Self, String> {
                <$via as FromSql>::from_sql(data)
                    .map(|v| v.map($own))
                    .map_err(|e| e.to_string())
            }
        }
        impl Cell for $t {
            fn cell(data: &ColumnData<'static>) -> Result<Self, String> {
                Option::<$t>::cell(data)?.ok_or_else(|| "is NULL".to_owned())
            }
        }
    )*};
}

cells! {
    i64 => i64, |v| v;
    i32 => i32, |v| v;
    bool => bool, |v| v;
    Uuid => Uuid, |v| v;
    OffsetDateTime => OffsetDateTime, |v| v;
    String => &str, str::to_owned;
    Vec<u8> => &[u8], <[u8]>::to_vec;
}

/// Reads a column by name, or says which one could not be read.
pub(crate) trait Col {
    /// The column `name`, decoded as `T`.
    fn col<T: Cell>(&self, name: &str) -> Result<T, Error>;
}

impl Col for Row {
    /// By name as written, else ignoring case as T-SQL names compare (Babelfish for PostgreSQL
    /// sends a procedure's `OUTPUT … AS OwnerId` as `ownerid`).
    fn col<T: Cell>(&self, name: &str) -> Result<T, Error> {
        let data = match self.get_column_data(name) {
            Ok(data) => data,
            Err(_) => {
                let at = self
                    .columns()
                    .iter()
                    .position(|c| c.name().eq_ignore_ascii_case(name))
                    .ok_or_else(|| column_err(name, "is missing from the row"))?;
                self.cells()
                    .nth(at)
                    .map(|(_, data)| data)
                    .ok_or_else(|| column_err(name, "is missing from the row"))?
            }
        };
        T::cell(data).map_err(|reason| column_err(name, reason))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::borrow::Cow;
    use tiberius::ColumnType;

    /// A row as the server would send it, for decoding tests.
    pub(crate) fn row(cells: Vec<(&str, ColumnData<'static>)>) -> Row {
        cells
            .into_iter()
            .fold(Row::builder(), |b, (name, data)| {
                b.column(name, ColumnType::Null, data)
            })
            .build()
    }

    #[test]
    fn a_column_is_found_by_its_name_in_any_case() {
        let r = row(vec![("ownerid", ColumnData::I64(Some(7)))]);
        assert_eq!(r.col::<i64>("OwnerId").unwrap(), 7);
        let e = r.col::<i64>("Token").unwrap_err().to_string();
        assert!(e.contains("Token") && e.contains("missing"), "{e}");
    }

    #[test]
    fn columns_decode_strictly_and_name_themselves_when_they_cannot() {
        let r = row(vec![
            ("id", ColumnData::I64(Some(7))),
            ("attempts", ColumnData::I32(Some(2))),
            ("state", ColumnData::String(Some(Cow::Borrowed("pending")))),
            ("body", ColumnData::Binary(Some(Cow::Borrowed(b"\x00\xff")))),
            ("order_key", ColumnData::String(None)),
            ("live", ColumnData::Bit(Some(true))),
        ]);
        assert_eq!(r.col::<i64>("id").unwrap(), 7);
        assert_eq!(r.col::<i32>("attempts").unwrap(), 2);
        assert_eq!(r.col::<String>("state").unwrap(), "pending");
        assert_eq!(r.col::<Vec<u8>>("body").unwrap(), vec![0, 255]);
        assert_eq!(r.col::<Option<String>>("order_key").unwrap(), None);
        assert!(r.col::<bool>("live").unwrap());
        for (name, err) in [
            ("attempts", r.col::<i64>("attempts").unwrap_err()),
            ("order_key", r.col::<String>("order_key").unwrap_err()),
            ("nope", r.col::<i64>("nope").unwrap_err()),
            ("id", r.col::<String>("id").unwrap_err()),
        ] {
            assert!(err.to_string().contains(&format!("column {name}")), "{err}");
        }
        assert!(
            r.col::<String>("order_key")
                .unwrap_err()
                .to_string()
                .contains("NULL")
        );
    }

    /// The `@Pn` numbers a statement's body (not its comments) uses.
    pub(crate) fn params_used(sql: &str) -> std::collections::BTreeSet<usize> {
        let body: String = sql
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        body.match_indices("@P")
            .filter_map(|(i, _)| {
                let digits: String = body[i + 2..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
            .collect()
    }

    #[test]
    fn every_statement_numbers_its_parameters_from_one_without_gaps_and_lists_them() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/mssql");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let sql = std::fs::read_to_string(&path).unwrap();
            let used = params_used(&sql);
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                used.iter().copied().eq(1..=used.len()),
                "{name}: parameters {used:?} are not @P1..@P{}",
                used.len()
            );
            let header: String = sql
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect::<Vec<_>>()
                .join(" ");
            for n in &used {
                let listed = header.match_indices(&format!("@P{n}")).any(|(i, _)| {
                    !header[i + 2 + n.to_string().len()..].starts_with(|c: char| c.is_ascii_digit())
                });
                assert!(listed, "{name}: its header does not say what @P{n} is");
            }
        }
    }

    #[test]
    fn untyped_nulls_are_sent_typed_and_set_to_null_by_the_statement() {
        let no_time: Option<OffsetDateTime> = None;
        let s = Stmt::new("SELECT @P1, @P2, @P3, @P4, @P5")
            .bind(Option::<&str>::None)
            .bind(Option::<i64>::None)
            .bind(Some("x"))
            .bind(Option::<&[u8]>::None)
            .bind(tiberius::ToSql::to_sql(&no_time));
        let (sql, params) = typed_nulls(s.sql, s.params);
        assert_eq!(
            sql,
            "SET @P1 = NULL;\nSET @P4 = NULL;\nSET @P5 = NULL;\nSELECT @P1, @P2, @P3, @P4, @P5"
        );
        assert!(matches!(&params[0], ColumnData::String(Some(v)) if v.is_empty()));
        assert!(matches!(params[1], ColumnData::I64(None)));
        assert!(matches!(&params[2], ColumnData::String(Some(v)) if v == "x"));
        assert!(matches!(&params[3], ColumnData::Binary(Some(v)) if v.is_empty()));
        assert!(matches!(&params[4], ColumnData::DateTimeOffset(Some(_))));
        // Nothing to type: the statement is sent as written.
        let plain = Stmt::new("SELECT @P1").bind(1_i32);
        let (sql, _) = typed_nulls(plain.sql, plain.params);
        assert!(matches!(sql, std::borrow::Cow::Borrowed("SELECT @P1")));
    }

    /// The statement (its const's name) that each `.affected(` of `source` reads its count
    /// from: the one built right after it, or, for `….affected(c)`, the one it was called on.
    fn read_for_affected(source: &str) -> Vec<String> {
        let starts = ["Stmt::new(", "with_partition_lease("];
        let name_at = |i: usize| -> String {
            source[i..]
                .chars()
                .skip_while(|c| *c != '(')
                .skip(1)
                .skip_while(|c| c.is_whitespace())
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect()
        };
        let mut names = Vec::new();
        for (at, _) in source.match_indices(".affected(") {
            let after = &source[at..(at + 120).min(source.len())];
            let next = starts.iter().filter_map(|s| after.find(s)).min();
            let before = starts.iter().filter_map(|s| source[..at].rfind(s)).max();
            let name = match (next, before) {
                (Some(n), _) => name_at(at + n),
                (None, Some(b)) => name_at(b),
                (None, None) => continue,
            };
            // Statements built from a variable (this test's own text) name no const.
            if !name.is_empty() {
                names.push(name);
            }
        }
        names
    }

    /// `affected` reads a column of the statement's one row: a statement that returns none
    /// fails every call (instance_leave.sql did, until it ran on a server).
    #[test]
    fn every_statement_read_for_its_affected_count_returns_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut source = String::new();
        for entry in std::fs::read_dir(dir.join("src/mssql")).unwrap() {
            source.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
        }
        let names = read_for_affected(&source);
        assert!(names.len() >= 8, "found only {names:?}");
        for name in names {
            let decl = format!("const {name}: &str");
            let at = source
                .find(&decl)
                .unwrap_or_else(|| panic!("no {decl} for an affected count"));
            let file: String = source[at..]
                .split("sql/mssql/")
                .nth(1)
                .unwrap()
                .chars()
                .take_while(|c| *c != '"')
                .collect();
            let sql = std::fs::read_to_string(dir.join("sql/mssql").join(&file)).unwrap();
            assert!(
                sql.contains("AS affected"),
                "{file} is read for its affected count but returns no `affected` column"
            );
        }
    }

    #[test]
    fn parameters_are_kept_in_order_as_the_driver_sends_them() {
        let owner = Uuid::nil();
        let s = Stmt::new("SELECT @P1, @P2, @P3, @P4")
            .bind("r")
            .bind(owner)
            .bind(41_i64)
            .bind(Option::<i32>::None);
        assert!(matches!(&s.params[0], ColumnData::String(Some(v)) if v == "r"));
        assert!(matches!(s.params[1], ColumnData::Guid(Some(u)) if u == owner));
        assert!(matches!(s.params[2], ColumnData::I64(Some(41))));
        assert!(matches!(s.params[3], ColumnData::I32(None)));
    }
}
