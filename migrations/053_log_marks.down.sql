DROP FUNCTION log_marks_seed();
DROP TABLE log_marks;
