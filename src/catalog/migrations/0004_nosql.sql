-- shardwire catalog, migration 4: Oracle NoSQL tables. A table made by a CREATE TABLE in the
-- NoSQL dialect (or a child of one) is marked, so `parent.child` names resolve to it and its
-- NoSQL properties apply; its default time to live is kept with its unit, as the user wrote it.
-- States gain UPDATING (an ALTER TABLE or CREATE INDEX is running on the shards).
ALTER TABLE shardwire_catalog.table_entry
    ADD COLUMN nosql boolean NOT NULL DEFAULT false,
    ADD COLUMN ttl_amount integer CHECK (ttl_amount > 0),
    ADD COLUMN ttl_unit text CHECK (ttl_unit IN ('hours', 'days')),
    ADD CHECK ((ttl_amount IS NULL) = (ttl_unit IS NULL)),
    DROP CONSTRAINT table_entry_state_check,
    ADD CONSTRAINT table_entry_state_check
        CHECK (state IN ('creating', 'active', 'updating', 'dropping'));
