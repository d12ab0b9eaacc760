"""asyncpg binding an enum and an array of it, through the proxy (run by tests/drivers.rs).

argv: DSN, then the tables to use (columns id bigint, mood drv_mood, moods drv_mood[]; empty).
asyncpg prepares every statement and looks up each type OID it is told of, so an OID that one
shard describes and another does not know fails its INSERT.
"""
import asyncio
import sys

import asyncpg

LABELS = ["sad", "ok", "happy"]


async def main(dsn, tables):
    conn = await asyncpg.connect(dsn)
    try:
        want = [(i, LABELS[i % 3], [LABELS[i % 3], "ok"]) for i in range(1, 41)]
        for table in tables:
            insert = f"INSERT INTO {table} (id, mood, moods) VALUES ($1, $2, $3)"
            for row in want:
                await conn.execute(insert, *row)
            await conn.executemany(
                f"UPDATE {table} SET moods = $2 WHERE id = $1",
                [(i, ms) for i, _, ms in want],
            )
            got = await conn.fetch(f"SELECT id, mood, moods FROM {table} ORDER BY id")
            assert [tuple(r) for r in got] == want, (table, [tuple(r) for r in got[:3]])
            for i, mood, moods in want[:6]:
                row = await conn.fetchrow(
                    f"SELECT mood, moods FROM {table} WHERE id = $1", i
                )
                assert tuple(row) == (mood, moods), (table, i, tuple(row))
            n = await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE mood = $1 AND moods = $2",
                "happy",
                ["happy", "ok"],
            )
            assert n == 13, (table, n)
            async with conn.transaction():
                stmt = await conn.prepare(f"SELECT id FROM {table} WHERE mood = ANY($1)")
                ids = sorted(r[0] for r in await stmt.fetch(["sad", "happy"]))
                assert ids == [i for i in range(1, 41) if i % 3 != 1], (table, ids)
    finally:
        await conn.close()
    print("asyncpg: ok", tables)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
