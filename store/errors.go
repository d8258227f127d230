package store

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/clawdbot/task-service/events"
)

// mapErr turns pgx errors into the domain's: the one place that reads them.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", events.ErrNotFound, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			switch pgErr.ConstraintName {
			// event_streams_version: the events did not continue their
			// stream's head, or a task's row had moved past the version
			// the writer folded from (the guards of migration 044, ADR 034).
			// task_events_stream_id_version_key: the same on a log not yet
			// partitioned (a database migrated past 043 without 044).
			case "event_streams_version", "task_events_stream_id_version_key",
				// Projection rows are queued before the events (append.go), so
				// a lost race can surface on the assignment row's (task_id,
				// version) key before it reaches the event's.
				"task_assignments_pkey":
				return fmt.Errorf("%w: another write to the same stream won", events.ErrConflict)
			case "users_email_key":
				return &events.DuplicateError{Field: "email"}
			case "task_types_name_key":
				return &events.DuplicateError{Field: "name"}
			case "task_types_alias":
				return &events.DuplicateError{Field: "alias"}
			case "schedule_firings_once", "schedule_firings_pkey", "worker_tasks_schedule_once":
				return fmt.Errorf("%w: this schedule's due time was fired already", events.ErrConflict)
			case "worker_tasks_one_retry":
				return fmt.Errorf("%w: the task already has a retry", events.ErrConflict)
			}
		case "22P02": // invalid_text_representation: a malformed id reached SQL
			return &events.ValidationError{Message: "malformed value: " + pgErr.Message}
		case "22021", "22P05": // character_not_in_repertoire, untranslatable_character: NUL in text or jsonb
			return &events.ValidationError{Message: "text must not contain the NUL character"}
		case "22003": // numeric_value_out_of_range: a JSON number beyond what jsonb's numeric holds
			return &events.ValidationError{Message: "a number is out of range: " + pgErr.Message}
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return fmt.Errorf("%w: %w", events.ErrConflict, err)
		}
	}
	return err
}

// IsUnavailable reports whether err says the database could not be reached
// or dropped the connection (an outage, a restart, a failover), as opposed to
// refusing the statement: a client should retry later (HTTP 503).
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr) && !netErr.Timeout():
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &pgErr):
		// Class 08 (connection exception); 57P01-03: shutting down, crashed,
		// not accepting connections yet.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	return strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "failed to connect")
}
