"""SQLAlchemy's Enum and ARRAY(Enum) through the proxy, and metadata.create_all() of a plain
table (run by tests/drivers.rs).

argv: URL (postgresql+psycopg2://… or postgresql+psycopg://…), the sharded table to use
(columns id bigint, mood drv_mood, moods drv_mood[]; empty), then the name of a plain table
for create_all to make. create_all runs in one transaction that first asks the catalog whether
the type and the table exist, then creates the table; the caller checks on the shards that it
landed on the first one.
"""
import enum
import sys

from sqlalchemy import BigInteger, Column, MetaData, Table, create_engine, select
from sqlalchemy.dialects.postgresql import ARRAY, ENUM


class Mood(enum.Enum):
    sad = "sad"
    ok = "ok"
    happy = "happy"


def table(metadata, name):
    mood = ENUM(Mood, name="drv_mood", create_type=False)
    return Table(
        name,
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("mood", mood),
        Column("moods", ARRAY(mood)),
    )


def main(url, sharded_name, plain_name):
    engine = create_engine(url)
    metadata = MetaData()
    sharded = table(metadata, sharded_name)
    plain = table(metadata, plain_name)
    metadata.create_all(engine, tables=[plain])
    moods = list(Mood)
    want = [(i, moods[i % 3], [moods[i % 3], Mood.ok]) for i in range(1, 41)]
    for t in (sharded, plain):
        with engine.begin() as conn:
            conn.execute(
                t.insert(), [{"id": i, "mood": m, "moods": ms} for i, m, ms in want]
            )
        with engine.connect() as conn:
            got = [tuple(r) for r in conn.execute(select(t).order_by(t.c.id))]
            assert got == want, (t.name, got[:3])
            happy = conn.execute(
                select(t.c.id).where(t.c.mood == Mood.happy).order_by(t.c.id)
            ).scalars().all()
            assert happy == [i for i in range(1, 41) if i % 3 == 2], (t.name, happy)
            row = conn.execute(select(t.c.moods).where(t.c.id == 9)).one()
            assert row.moods == [Mood.sad, Mood.ok], (t.name, row)
            n = conn.execute(
                select(t.c.id).where(t.c.moods.contains([Mood.happy]))
            ).all()
            assert len(n) == 13, (t.name, len(n))
    engine.dispose()
    print("sqlalchemy: ok", url.split(":")[0], sharded_name, plain_name)


if __name__ == "__main__":
    main(*sys.argv[1:])
