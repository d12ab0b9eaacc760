-- shardwire catalog, migration 6: views over recorded tables. A view exists on every shard that
-- holds the tables it reads; the proxy routes a query over it by what its definition is (see the
-- router's `view` module). Ids come from table_entry's sequence: a view is named where a table
-- could be, and the proxy finds either by one id.
CREATE TABLE shardwire_catalog.view_entry (
    id bigint PRIMARY KEY
        DEFAULT nextval(pg_get_serial_sequence('shardwire_catalog.table_entry', 'id')::regclass),
    schema_name text NOT NULL,
    view_name text NOT NULL,
    state text NOT NULL CHECK (state IN ('creating', 'active', 'dropping')),
    -- family: each shard's copy gives that shard's rows of one family (placed_like: its root);
    -- duplicated: every copy gives every row (placed_like: a duplicated table it reads);
    -- expanded: a query over it is planned over its definition;
    -- materialized: a materialized view on the first shard holding the whole answer, over a
    -- table there that the proxy fills (schema shardwire_matview, named m<id>).
    shape text NOT NULL CHECK (shape IN ('family', 'duplicated', 'expanded', 'materialized')),
    placed_like bigint REFERENCES shardwire_catalog.table_entry (id),
    -- pg_get_viewdef on a shard under an empty search_path: every name qualified; for a
    -- materialized view, its query as the client wrote it (names unqualified mean public).
    definition text NOT NULL,
    -- Per sharding-key column of the family root (then per partition-set column): the view's
    -- column holding it, NULL where the view does not show it.
    key_columns text[] NOT NULL,
    -- The recorded tables and views its definition names.
    reads bigint[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (schema_name, view_name),
    CHECK ((shape IN ('expanded', 'materialized')) = (placed_like IS NULL))
);
