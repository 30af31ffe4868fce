"""Prints PL/pgSQL functions that run the store's own claim and completion statements with
the parameters as variables (the text of store/sql/postgres/*.sql, $n becoming pn), so that a
loop in the database runs exactly what the dispatcher sends, its plan cached as a prepared
statement's is. Usage: python3 wrap.py REPO"""
import pathlib
import re
import sys

repo = pathlib.Path(sys.argv[1])


def statement(name: str) -> str:
    text = (repo / "store/sql/postgres" / name).read_text()
    lines = [l for l in text.splitlines() if not l.lstrip().startswith("--")]
    return re.sub(r"\$(\d+)", r"p\1", "\n".join(lines)).strip().rstrip(";")


complete = statement("op_complete_batch_if_claimed.sql")
print(f"""
CREATE FUNCTION bench_complete(p1 text, p2 uuid, p3 bigint, p4 bigint[], p5 text[],
                               p6 bigint[], p7 text[], p8 integer[], p9 timestamptz[],
                               p10 text[], p11 integer[], p12 text[], p13 text[])
RETURNS SETOF bigint LANGUAGE plpgsql AS $f$
BEGIN
    RETURN QUERY {complete};
END
$f$;
""")
