#!/usr/bin/env python3
"""Parse every SQL Server statement and migration file with sqlfluff's T-SQL dialect.

No SQL Server runs in CI, so this is the check the T-SQL files get there: each
store/sql/mssql, migrations/mssql and bench/sql/mssql file must parse (sqlfluff reports what it cannot
parse as an error). Prints one line per file and a summary; exits 1 when a file fails or when
there is no file to check.

    pip install sqlfluff==4.5.0
    python3 ops/check-tsql.py
"""

import sys
from pathlib import Path

import sqlfluff

ROOT = Path(__file__).resolve().parent.parent
DIRS = ("store/sql/mssql", "migrations/mssql", "bench/sql/mssql")


def first_error(exc: BaseException) -> str:
    """The first line of what sqlfluff (or anything else) said about the file."""
    violations = getattr(exc, "violations", None)
    if violations:
        v = violations[0]
        desc = v.desc() if callable(getattr(v, "desc", None)) else str(v)
        return (desc.strip() or type(exc).__name__).splitlines()[0]
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def main() -> int:
    files = sorted(p for d in DIRS for p in (ROOT / d).glob("*.sql") if p.is_file())
    failed = 0
    for path in files:
        name = path.relative_to(ROOT).as_posix()
        try:
            sqlfluff.parse(path.read_text(encoding="utf-8"), dialect="tsql")
        except Exception as exc:  # APIParsingError, or anything else: the file fails
            failed += 1
            print(f"FAIL {name}: {first_error(exc)}")
        else:
            print(f"ok   {name}")
    print(
        f"T-SQL check: {len(files)} files parsed with sqlfluff {sqlfluff.__version__} "
        f"(tsql dialect), {failed} failed"
    )
    if not files:
        print("no *.sql file found under " + " or ".join(DIRS), file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
