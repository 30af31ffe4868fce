-- A number SQLite changes whenever another connection committed since this one last read it:
-- the dispatcher's wake-up when the WAL index cannot be read, and, run once on the watching
-- connection, the read that opens the WAL index (src/sqlite/wakeup.rs). No guarantee rests on
-- it: a wake-up it misses waits for dispatcher.poll_interval.
-- Parameters: none.
PRAGMA data_version
