-- An earlier release restarts each pass at its first left chain: the
-- chains recorded here are found again by its sweep only from its cursor
-- on, so the cursor goes back to the oldest of them.
UPDATE event_compaction c SET resume_at = l.created_at, resume_id = '00000000-0000-0000-0000-000000000000'
  FROM (SELECT min(created_at) AS created_at FROM event_compaction_left) l
 WHERE l.created_at IS NOT NULL AND l.created_at <= c.resume_at;
DROP TABLE event_compaction_left;
