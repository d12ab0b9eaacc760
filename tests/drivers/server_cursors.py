"""Server-side cursors through the proxy (run by tests/drivers.rs): psycopg 3 named cursors with
and without hold, psycopg2 named cursors, SQLAlchemy 2's stream_results with psycopg, and
asyncpg cursors, each streaming a multi-shard ORDER BY of a sharded table.

argv: the proxy's address (host:port), the table (id bigint PRIMARY KEY, grp int, pad text), its
row count, and which drivers: `cursors` (the SQL cursors of psycopg 3, psycopg2 and SQLAlchemy)
`portals` (asyncpg's protocol-level portal with a row limit) or `django` (QuerySet.iterator()
over a model whose table is the sharded one, through Django's server-side cursors). Every
driver must get every row once, in the query's order.
"""
import asyncio
import sys

import asyncpg
import psycopg
import psycopg2
import sqlalchemy as sa

QUERY = "SELECT id, grp, pad FROM {t} WHERE id > %s ORDER BY grp, id DESC"


def expected(n):
    rows = [(i, i % 7) for i in range(1, n + 1) if i > 10]
    return sorted(rows, key=lambda r: (r[1], -r[0]))


def check(what, got, n):
    want = expected(n)
    assert len(got) == len(want), (what, len(got), len(want))
    assert got == want, (what, got[:3], want[:3])
    print(f"{what}: {len(got)} rows in order")


def psycopg3(dsn, table, n):
    with psycopg.connect(dsn) as conn:
        with conn.cursor(name="pg3_cur") as cur:
            cur.itersize = 1000
            cur.execute(QUERY.format(t=table), (10,))
            got = [(r[0], r[1]) for r in cur]
        check("psycopg 3 named cursor", got, n)
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.cursor(name="pg3_hold", withhold=True) as cur:
            cur.execute(QUERY.format(t=table), (10,))
            got = []
            while True:
                batch = cur.fetchmany(777)
                if not batch:
                    break
                got.extend((r[0], r[1]) for r in batch)
        check("psycopg 3 named cursor WITH HOLD", got, n)
    # A SCROLL cursor is held on a combining connection; pg_cursors, read through the extended
    # protocol with a parameter, lists it there.
    with psycopg.connect(dsn) as conn:
        with conn.cursor(name="pg3_scroll", scrollable=True) as cur:
            cur.execute(QUERY.format(t=table), (10,))
            first = cur.fetchone()
            listed = conn.execute(
                "SELECT name, is_scrollable FROM pg_cursors WHERE name = %s", ("pg3_scroll",)
            ).fetchall()
            assert listed == [("pg3_scroll", True)], listed
            cur.scroll(0, mode="absolute")
            assert cur.fetchone() == first
        print("psycopg 3 SCROLL cursor listed in pg_cursors")


def psycopg2_named(dsn, table, n):
    conn = psycopg2.connect(dsn)
    try:
        cur = conn.cursor(name="pg2_cur")
        cur.itersize = 2000
        cur.execute(QUERY.format(t=table), (10,))
        got = [(r[0], r[1]) for r in cur]
        cur.close()
        conn.commit()
        check("psycopg2 named cursor", got, n)
    finally:
        conn.close()


def sqlalchemy_stream(url, table, n):
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, max_row_buffer=500).execute(
            sa.text(QUERY.format(t=table).replace("%s", ":low")), {"low": 10}
        )
        got = [(r[0], r[1]) for r in result]
    engine.dispose()
    check("SQLAlchemy stream_results (psycopg)", got, n)


async def asyncpg_cursor(dsn, table, n):
    conn = await asyncpg.connect(dsn)
    try:
        got = []
        async with conn.transaction():
            async for r in conn.cursor(QUERY.format(t=table).replace("%s", "$1"), 10, prefetch=500):
                got.append((r[0], r[1]))
        check("asyncpg cursor", got, n)
    finally:
        await conn.close()


def django_iterator(addr, table, n):
    import django
    from django.conf import settings

    host, port = addr.rsplit(":", 1)
    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "app",
                "USER": "app",
                "PASSWORD": "app",
                "HOST": host,
                "PORT": port,
            }
        },
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()
    from django.db import models

    class Streamed(models.Model):
        id = models.BigIntegerField(primary_key=True)
        grp = models.IntegerField()
        pad = models.TextField()

        class Meta:
            app_label = "drivers"
            db_table = table
            managed = False

    rows = Streamed.objects.filter(id__gt=10).order_by("grp", "-id")
    got = [(r.id, r.grp) for r in rows.iterator(chunk_size=1000)]
    check("Django QuerySet.iterator()", got, n)


def main(addr, table, n, which):
    n = int(n)
    dsn = f"postgresql://app:app@{addr}/app"
    if which == "cursors":
        psycopg3(dsn, table, n)
        psycopg2_named(dsn, table, n)
        sqlalchemy_stream(f"postgresql+psycopg://app:app@{addr}/app", table, n)
    elif which == "django":
        django_iterator(addr, table, n)
    else:
        asyncio.run(asyncpg_cursor(dsn, table, n))


if __name__ == "__main__":
    main(*sys.argv[1:])
