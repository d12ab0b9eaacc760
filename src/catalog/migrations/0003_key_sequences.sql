-- shardwire catalog, migration 3: generated sharding keys. A sharded root table's key column
-- declared serial or as an identity takes its values from one sequence per column for the whole
-- cluster; proxies take blocks of it (next_value moves on by a block), so no two proxies ever hand
-- out the same value.
CREATE TABLE shardwire_catalog.key_sequence (
    table_id bigint NOT NULL REFERENCES shardwire_catalog.table_entry (id) ON DELETE CASCADE,
    column_name text NOT NULL,
    -- GENERATED ALWAYS AS IDENTITY: an INSERT may not give the value itself.
    always boolean NOT NULL DEFAULT false,
    next_value bigint NOT NULL DEFAULT 1 CHECK (next_value >= 1),
    PRIMARY KEY (table_id, column_name)
);
