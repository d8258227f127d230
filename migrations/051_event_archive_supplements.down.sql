-- An earlier release knows one object per period: the supplements' rows go
-- (their objects stay in the store; the events compaction deleted after
-- them are in those objects, which taskctl of this release still reads).
DROP TABLE event_archive_late;
DELETE FROM event_archives WHERE part > 0;
ALTER TABLE event_archives DROP CONSTRAINT event_archives_pkey, ADD PRIMARY KEY (period, period_start);
ALTER TABLE event_archives DROP COLUMN part;
