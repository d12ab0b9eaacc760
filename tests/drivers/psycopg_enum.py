"""psycopg 3 with a registered enum, through the proxy (run by tests/drivers.rs).

argv: DSN, then the tables to use; each has columns (id bigint, mood drv_mood, moods
drv_mood[]) and starts empty. Every row must come back as the registered Python enum, whichever
shard it lives on, in text and in binary results.
"""
import enum
import sys

import psycopg
from psycopg.types.enum import EnumInfo, register_enum


class Mood(enum.Enum):
    sad = "sad"
    ok = "ok"
    happy = "happy"


def rows():
    moods = list(Mood)
    return [(i, moods[i % 3], [moods[i % 3], Mood.ok]) for i in range(1, 41)]


def main(dsn, tables):
    with psycopg.connect(dsn) as conn:  # autocommit off, as psycopg's default
        info = EnumInfo.fetch(conn, "drv_mood")
        assert info is not None, "EnumInfo.fetch found no drv_mood"
        register_enum(info, conn, Mood)
        want = rows()
        for table in tables:
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {table} (id, mood, moods) VALUES (%s, %s, %s)", want
                )
            conn.commit()
            # In text and in binary results; arrays of the enum come back as lists of it (a
            # binary array names its element type's OID).
            for binary in (False, True):
                with conn.cursor(binary=binary) as cur:
                    cur.execute(f"SELECT id, mood, moods FROM {table} ORDER BY id")
                    got = cur.fetchall()
                    assert got == want, (table, binary, got[:3])
                    cur.execute(f"SELECT mood, moods FROM {table} WHERE id = %s", (8,))
                    assert cur.fetchone() == (Mood.happy, [Mood.happy, Mood.ok]), (table, binary)
                    cur.execute(
                        f"SELECT count(*) FROM {table} WHERE mood = %s", (Mood.ok,)
                    )
                    assert cur.fetchone()[0] == 14, (table, binary)
            with conn.cursor() as cur:
                cur.execute(
                    f"SELECT id FROM {table} WHERE moods = %s ORDER BY id",
                    ([Mood.happy, Mood.ok],),
                )
                assert [r[0] for r in cur.fetchall()] == [i for i in range(1, 41) if i % 3 == 2]
            conn.commit()
    print("psycopg: ok", tables)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
