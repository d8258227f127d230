package events

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// summaryTextLen bounds user text (reasons, messages) quoted in a summary.
const summaryTextLen = 120

// Summary is a one-line, human description of an event for timelines and
// tails: "claimed by Genesis", "failed (worker_offline): Worker Genesis went
// offline", "retry #1 created: <id>". names turns a user id into a display
// name ("" when unknown, then a short id is shown); it may be nil. The
// payload must be decoded; an unknown type is summarized by its name.
func Summary(e Envelope, names func(userID string) string) string {
	who := func(id string) string { return displayName(id, names) }
	switch p := e.Payload.(type) {
	case TaskCreated:
		s := fmt.Sprintf("created %q (%s)", oneLine(p.Title, summaryTextLen), p.Priority)
		if p.ParentTaskID != "" {
			s += fmt.Sprintf(" as retry #%d of %s", p.RetryCount, shortID(p.ParentTaskID))
		}
		if p.Blocked {
			s += fmt.Sprintf(", blocked by %d dependencies", len(p.DependsOn))
		}
		if p.AvailableAt != nil && p.AvailableAt.After(e.OccurredAt) {
			s += ", scheduled for " + p.AvailableAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		return s
	case TaskCompacted:
		return compactedSummary(p, who)
	case TaskAssigned:
		return withText(fmt.Sprintf("assigned to %s by %s", who(p.WorkerID), who(p.By)), p.Reason)
	case TaskClaimed:
		return "claimed by " + who(p.WorkerID)
	case TaskReleased:
		return withText("released by "+who(p.WorkerID), p.Reason)
	case TaskUpdatePosted:
		author := p.AuthorID
		if author == "" { // a system message: say which part of the system
			author = e.Meta.Actor.ID
		}
		return withText("update from "+who(author), p.Message)
	case TaskResultPosted:
		return fmt.Sprintf("result posted by %s (%d bytes)", who(p.WorkerID), len(p.Result))
	case TaskCompleted:
		return "completed by " + who(p.WorkerID)
	case TaskFailed:
		s := fmt.Sprintf("failed (%s): %s", p.Kind, oneLine(p.Reason, summaryTextLen))
		if p.WorkerID != "" && e.Meta.Actor.Kind == ActorSystem {
			s += " [held by " + who(p.WorkerID) + "]"
		}
		return s
	case TaskCancelled:
		if p.DependencyID != "" {
			return "cancelled: dependency " + shortID(p.DependencyID) + " ended without completing"
		}
		return withText("cancelled by "+who(p.By), p.Reason)
	case TaskUnblocked:
		if p.By != "" {
			return withText("released from its dependencies by "+who(p.By), p.Reason)
		}
		return "unblocked: its last dependency " + shortID(p.DependencyID) + " completed"
	case WorkflowCreated:
		return fmt.Sprintf("workflow %q created with %d tasks", oneLine(p.Name, summaryTextLen), p.TaskCount)
	case WorkflowCancelled:
		return withText("workflow cancelled by "+who(p.By), p.Reason)
	case TaskRetried:
		s := fmt.Sprintf("retry #%d created: %s", p.RetryNumber, p.RetryTaskID)
		if p.Manual {
			s += " (manual)"
		}
		if p.Hint != "" {
			s += ", hint: " + oneLine(p.Hint, summaryTextLen)
		}
		return s
	case TaskRetrySkipped:
		return withText("retry skipped", p.Reason)
	case TaskRetriesExhausted:
		return fmt.Sprintf("retries exhausted after %d attempts (max retries %d)", p.Attempts, p.MaxRetries)
	case TaskDataUploaded:
		s := fmt.Sprintf("data uploaded by %s: %s/%s (%s)", who(p.WorkerID), p.DataType, p.Filename, HumanBytes(p.Size))
		if p.Replaced != nil {
			s += fmt.Sprintf(", replacing an earlier upload (%s)", HumanBytes(p.Replaced.Size))
		}
		return s
	case TaskCheckpointed:
		return fmt.Sprintf("checkpoint saved by %s (%s)", who(p.WorkerID), HumanBytes(int64(p.SizeBytes)))
	case TaskUsageReported:
		by := "the retry advisor"
		if p.WorkerID != "" {
			by = who(p.WorkerID)
		}
		s := fmt.Sprintf("LLM usage by %s: %s, %d tokens (%d in, %d out, %d cache read, %d cache write), $%.4f",
			by, oneLine(p.Model, 60), p.Tokens(), p.InputTokens, p.OutputTokens, p.CacheReadTokens, p.CacheWriteTokens, p.CostUSD)
		if p.CostSource == CostUnpriced {
			s += " (model not in the price table)"
		}
		return s
	case TaskDataDeleted:
		return withText("data deleted: "+p.Key, p.Reason)
	case TaskEdited:
		s := fmt.Sprintf("edited: %q (%s)", oneLine(p.Title, summaryTextLen), p.Priority)
		if p.AvailableAt != nil {
			s += ", run at " + p.AvailableAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		return s
	case TaskDue:
		return "due: its run_at " + p.RunAt.UTC().Format("2006-01-02T15:04:05Z") + " came"
	case TaskTypeCreated:
		return withLimits(fmt.Sprintf("task type %q created (max retries %d)", p.Name, p.MaxRetries), p.TypeLimits)
	case TaskTypeUpdated:
		return withLimits(fmt.Sprintf("task type %q updated", p.Name), p.TypeLimits)
	case TaskTypePaused:
		return withText("task type paused by "+who(p.By), p.Reason)
	case TaskTypeResumed:
		return withText("task type resumed by "+who(p.By), p.Reason)
	case TaskTypeArchived:
		return "task type archived"
	case UserRegistered:
		return fmt.Sprintf("%s %s <%s> registered", roleName(p.IsAdmin, p.IsWorker), oneLine(p.FullName, summaryTextLen), p.Email)
	case WorkerWentOnline:
		return who(e.StreamID) + " came online"
	case WorkerWentOffline:
		s := fmt.Sprintf("%s went offline (silent for more than %ds", who(e.StreamID), p.ThresholdSeconds)
		switch p.Rule {
		case OfflineHeartbeatSaidSo:
			return fmt.Sprintf("%s went offline (its heartbeat said so, %d in progress)", who(e.StreamID), p.InProgress)
		case OfflineNeverHeard:
			s = fmt.Sprintf("%s went offline (never sent a heartbeat; silent for more than %ds since its last claim %s",
				who(e.StreamID), p.ThresholdSeconds, p.LastClaim)
		}
		if p.LastHeartbeat != "" {
			s += ", last heartbeat " + p.LastHeartbeat
		}
		return s + fmt.Sprintf(", %d in progress)", p.InProgress)
	case UserUpdated:
		return fmt.Sprintf("%s updated: %s, %s, max %d tasks", who(e.StreamID), oneLine(p.FullName, summaryTextLen),
			roleName(p.IsAdmin, p.IsWorker), p.MaxConcurrentTasks)
	case UserDeactivated:
		s := who(e.StreamID) + " deactivated"
		if n := len(p.ReleasedTasks); n > 0 {
			s += fmt.Sprintf(", %d held tasks released", n)
		}
		return withText(s, p.Reason)
	case UserReactivated:
		return withText(who(e.StreamID)+" reactivated", p.Reason)
	case UserPasswordChanged:
		if p.By == PasswordByAdmin {
			return who(e.StreamID) + "'s password reset by an admin"
		}
		return who(e.StreamID) + " changed their password"
	case UserLockedOut:
		return fmt.Sprintf("%s locked out for %ds after %d wrong passwords (lockout #%d, from %s)",
			who(e.StreamID), p.Seconds, p.Failures, p.Level, p.ClientAddress)
	}
	if s, ok := scheduleSummary(e, who); ok {
		return s
	}
	if s, ok := freshnessSummary(e, who); ok {
		return s
	}
	return e.Type
}

func roleName(admin, worker bool) string {
	switch {
	case admin && worker:
		return "admin and worker"
	case admin:
		return "admin"
	}
	return "worker"
}

// displayName is a user's name, or a short form of the id when unknown;
// system components (not UUIDs) are shown as they are.
func displayName(id string, names func(string) string) string {
	if id == "" {
		return "someone"
	}
	if names != nil {
		if n := names(id); n != "" {
			return n
		}
	}
	return shortID(id)
}

// shortID keeps the first block of a UUID, enough to tell ids apart in a
// timeline; anything else is returned whole.
func shortID(id string) string {
	if len(id) == 36 && id[8] == '-' {
		return id[:8]
	}
	return id
}

// withText appends ": text" when there is text, on one line.
func withText(s, text string) string {
	if t := oneLine(text, summaryTextLen); t != "" {
		return s + ": " + t
	}
	return s
}

// oneLine folds whitespace (newlines included) and cuts to n runes with an
// ellipsis.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// HumanBytes writes a size the way people read it: 512 B, 3.1 MB, 1.0 GB
// (powers of 1000, as file managers show them).
func HumanBytes(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"kB", "MB", "GB", "TB"} {
		v /= 1000
		if v < 999.95 || unit == "TB" {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	return ""
}

// withLimits adds a type's limits, when it has any, to its summary.
func withLimits(s string, l TypeLimits) string {
	if l := l.Describe(); l != "" {
		return s + "; limits: " + l
	}
	return s
}
