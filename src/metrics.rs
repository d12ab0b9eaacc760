//! Every metric the proxy exports: name (prefixed `shardwire_`), unit suffix, bounded labels.
