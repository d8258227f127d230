DROP TABLE IF EXISTS event_compaction;
DROP TABLE IF EXISTS event_archives;
