package api

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/paramtemplate"
)

// telegramCommand is one command as typed: /pause@MyBot reddit → name
// "pause", args ["reddit"].
type telegramCommand struct {
	name string
	args []string
}

// maxCommandName bounds the name kept in telegram_updates.
const maxCommandName = 32

// parseTelegramCommand reads a message's text; false when it is not a
// command (plain talk in a group is none of the bot's business).
func parseTelegramCommand(text string) (telegramCommand, bool) {
	fields := strings.Fields(text)
	if len(fields) == 0 || !strings.HasPrefix(fields[0], "/") {
		return telegramCommand{}, false
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(fields[0], "/"), "@")
	name = strings.ToLower(name)
	if len(name) > maxCommandName {
		name = name[:maxCommandName]
	}
	return telegramCommand{name: name, args: fields[1:]}, true
}

// telegramCall is what a command's handler gets.
type telegramCall struct {
	args []string
	meta events.Meta
}

// telegramHandler runs one command and returns its answer (HTML, user
// text escaped). An error a user can act on becomes the answer instead.
type telegramHandler struct {
	changes bool // it changes something: admins only, and events carry the Telegram user
	usage   string
	run     func(s *Server, ctx context.Context, c telegramCall) (string, error)
}

// telegramHandlers are the commands, in the order /help lists them.
func telegramHandlers() []struct {
	name string
	h    telegramHandler
} {
	return []struct {
		name string
		h    telegramHandler
	}{
		{"status", telegramHandler{usage: "/status — the queue, workers online, failures in the last hour", run: (*Server).tgStatus}},
		{"task", telegramHandler{usage: "/task &lt;id or prefix&gt; — one task", run: (*Server).tgTask}},
		{"add", telegramHandler{changes: true, usage: "/add &lt;type alias&gt; &lt;key or name=value…&gt; — a task from the type's params template, e.g. /add reddit NVDA", run: (*Server).tgAdd}},
		{"pause", telegramHandler{changes: true, usage: "/pause [type] [reason] — stop claims of a type (all types without one)", run: (*Server).tgPause}},
		{"resume", telegramHandler{changes: true, usage: "/resume [type] — let claims take a type again (all paused types without one)", run: (*Server).tgResume}},
		{"retry", telegramHandler{changes: true, usage: "/retry &lt;task&gt; [hint] — retry a failed task now", run: (*Server).tgRetry}},
		{"cancel", telegramHandler{changes: true, usage: "/cancel &lt;task&gt; [reason] — cancel a task", run: (*Server).tgCancel}},
		{"budget", telegramHandler{usage: "/budget — LLM usage against the budgets", run: (*Server).tgBudget}},
		{"help", telegramHandler{usage: "/help — this list", run: (*Server).tgHelp}},
	}
}

func findTelegramHandler(name string) (telegramHandler, bool) {
	for _, c := range telegramHandlers() {
		if c.name == name {
			return c.h, true
		}
	}
	return telegramHandler{}, false
}

// runTelegramCommand runs cmd in a savepoint of tx, so a command that
// fails changes nothing while its answer and the update's record still
// commit. It returns an error only when the answer cannot be given (the
// database is gone): then nothing commits and Telegram delivers again.
func (s *Server) runTelegramCommand(ctx context.Context, tx pgx.Tx, updateID int64, m *TelegramMessage, cmd telegramCommand) (string, error) {
	h, ok := findTelegramHandler(cmd.name)
	if !ok {
		return "I don't know /" + html.EscapeString(cmd.name) + ".\n\n" + telegramHelp(), nil
	}
	if h.changes && s.telegramAccess(m) != accessAdmin {
		return "Only an admin can /" + cmd.name + " (ask to be added to TELEGRAM_ADMIN_USER_IDS). /status and /task work for everyone here.", nil
	}
	call := telegramCall{args: cmd.args, meta: telegramMeta(updateID, m)}
	var reply string
	err := s.db.Savepoint(ctx, tx, func(ctx context.Context) error {
		var err error
		reply, err = h.run(s, ctx, call)
		return err
	})
	if err == nil {
		return reply, nil
	}
	if store.IsUnavailable(err) || errors.Is(err, context.Canceled) {
		return "", err
	}
	status, body := classify(err)
	if status >= http.StatusInternalServerError {
		s.log.Error().Err(err).Str("request_id", call.meta.RequestID).Str("command", cmd.name).Msg("telegram command failed")
		return "⚠️ /" + cmd.name + " failed on our side; the operators can find it in the log as " + call.meta.RequestID + ".", nil
	}
	return "⚠️ " + html.EscapeString(body.Message), nil
}

func telegramHelp() string {
	lines := []string{"<b>Commands</b>"}
	for _, c := range telegramHandlers() {
		lines = append(lines, c.h.usage)
	}
	lines = append(lines, "A task is its id or the first characters of it (at least 4); a type is its alias or name.")
	return strings.Join(lines, "\n")
}

func (s *Server) tgHelp(context.Context, telegramCall) (string, error) { return telegramHelp(), nil }

func (s *Server) tgStatus(ctx context.Context, _ telegramCall) (string, error) {
	st, err := s.db.TelegramStatus(ctx)
	if err != nil {
		return "", err
	}
	lines := []string{
		fmt.Sprintf("📊 <b>Queue</b>: %d waiting, %d scheduled, %d in progress",
			st.Stats.QueueDepth, st.Stats.Scheduled, st.Stats.ByStatus["in_progress"]),
		fmt.Sprintf("<b>Workers online</b>: %d of %d", st.Stats.WorkersOnline, st.Stats.WorkersTotal),
		fmt.Sprintf("<b>Failures in the last hour</b>: %d", st.FailedLastHour),
	}
	if len(st.PausedTypes) > 0 {
		lines = append(lines, "⏸️ Paused: "+html.EscapeString(strings.Join(st.PausedTypes, ", ")))
	}
	return strings.Join(lines, "\n"), nil
}

// resolveTask finds the task an argument names: a whole id or a prefix.
func (s *Server) resolveTask(ctx context.Context, args []string, usage string) (string, error) {
	if len(args) == 0 {
		return "", events.Invalid("task", "is missing: %s", usage)
	}
	if _, err := uuid.Parse(args[0]); err == nil && len(args[0]) == 36 {
		return strings.ToLower(args[0]), nil
	}
	id, err := s.db.FindTaskByPrefix(ctx, args[0])
	if errors.Is(err, store.ErrAmbiguous) {
		return "", events.Invalid("task", "%q matches more than one task; type more of its id", args[0])
	}
	return id, err
}

func (s *Server) tgTask(ctx context.Context, c telegramCall) (string, error) {
	id, err := s.resolveTask(ctx, c.args, "/task <id or prefix>")
	if err != nil {
		return "", err
	}
	t, err := s.db.GetTaskWithType(ctx, id)
	if err != nil {
		return "", err
	}
	lines := []string{
		"📋 <b>" + html.EscapeString(t.Title) + "</b>",
		"<code>" + t.ID + "</code>",
		fmt.Sprintf("%s · %s · %s", html.EscapeString(t.TaskType.Name), t.Status, t.Priority),
		"created " + t.CreatedAt.UTC().Format(time.RFC3339),
	}
	if t.RetryCount > 0 {
		lines = append(lines, fmt.Sprintf("retry %d", t.RetryCount))
	}
	if t.FailureReason != nil {
		lines = append(lines, "failed: "+html.EscapeString(cutString(*t.FailureReason, 300)))
	}
	if t.RetryTaskID != nil {
		lines = append(lines, "retried as <code>"+*t.RetryTaskID+"</code>")
	}
	return strings.Join(lines, "\n"), nil
}

// typeArg finds the type an argument names by alias or name.
func (s *Server) typeArg(ctx context.Context, ref string) (*events.TaskType, error) {
	tt, err := s.db.FindTaskType(ctx, ref)
	if err != nil {
		return nil, err
	}
	if tt == nil {
		return nil, events.Invalid("type", "no task type has the alias or name %q", ref)
	}
	return tt, nil
}

// reasonOf is the words after a command's first argument, or def.
func reasonOf(args []string, def string) string {
	if len(args) == 0 {
		return def
	}
	return strings.Join(args, " ")
}

func (s *Server) tgPause(ctx context.Context, c telegramCall) (string, error) {
	if len(c.args) > 0 {
		tt, err := s.typeArg(ctx, c.args[0])
		if err != nil {
			return "", err
		}
		reason := reasonOf(c.args[1:], "paused from Telegram by "+c.meta.Actor.Name)
		if _, err := s.PauseTaskType(ctx, tt.ID, reason, c.meta); err != nil {
			return "", err
		}
		return "⏸️ Paused " + html.EscapeString(tt.Name) + ": its tasks wait until /resume " + html.EscapeString(tt.Name) + ".", nil
	}
	return s.eachType(ctx, func(tt events.TaskType) bool { return !tt.Paused }, "Every type is already paused.", "⏸️ Paused",
		func(tt events.TaskType) error {
			_, err := s.PauseTaskType(ctx, tt.ID, "paused from Telegram by "+c.meta.Actor.Name, c.meta)
			return err
		})
}

func (s *Server) tgResume(ctx context.Context, c telegramCall) (string, error) {
	if len(c.args) > 0 {
		tt, err := s.typeArg(ctx, c.args[0])
		if err != nil {
			return "", err
		}
		if _, err := s.ResumeTaskType(ctx, tt.ID, reasonOf(c.args[1:], ""), c.meta); err != nil {
			return "", err
		}
		return "▶️ Resumed " + html.EscapeString(tt.Name) + ".", nil
	}
	return s.eachType(ctx, func(tt events.TaskType) bool { return tt.Paused }, "No type is paused.", "▶️ Resumed",
		func(tt events.TaskType) error {
			_, err := s.ResumeTaskType(ctx, tt.ID, "", c.meta)
			return err
		})
}

// eachType runs act on every active type that want picks and says which.
func (s *Server) eachType(ctx context.Context, want func(events.TaskType) bool, none, done string, act func(events.TaskType) error) (string, error) {
	types, err := s.db.ListTaskTypes(ctx, false)
	if err != nil {
		return "", err
	}
	var names []string
	for _, tt := range types {
		if !want(tt) {
			continue
		}
		if err := act(tt); err != nil {
			return "", err
		}
		names = append(names, tt.Name)
	}
	if len(names) == 0 {
		return none, nil
	}
	return fmt.Sprintf("%s %s: %s.", done, plural(len(names), "type", "types"), html.EscapeString(strings.Join(names, ", "))), nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func (s *Server) tgRetry(ctx context.Context, c telegramCall) (string, error) {
	id, err := s.resolveTask(ctx, c.args, "/retry <task> [hint]")
	if err != nil {
		return "", err
	}
	retry, err := s.RetryTask(ctx, id, reasonOf(c.args[1:], ""), c.meta)
	if err != nil {
		return "", err
	}
	return "🔁 Retry created: " + html.EscapeString(retry.Title) + "\n<code>" + retry.ID + "</code>", nil
}

func (s *Server) tgCancel(ctx context.Context, c telegramCall) (string, error) {
	id, err := s.resolveTask(ctx, c.args, "/cancel <task> [reason]")
	if err != nil {
		return "", err
	}
	t, err := s.CancelTask(ctx, id, reasonOf(c.args[1:], "cancelled from Telegram by "+c.meta.Actor.Name), c.meta)
	if err != nil {
		return "", err
	}
	return "🛑 Cancelled " + html.EscapeString(t.Title) + ".", nil
}

func (s *Server) tgAdd(ctx context.Context, c telegramCall) (string, error) {
	if len(c.args) == 0 {
		return "", events.Invalid("type", "is missing: /add <type alias> <key or name=value…>, e.g. /add reddit NVDA")
	}
	tt, err := s.typeArg(ctx, c.args[0])
	if err != nil {
		return "", err
	}
	if tt.ParamsTemplate == nil {
		return "", events.Invalid("params_template", "type %s has no params template to make a task from; an admin sets one in the type's form", tt.Name)
	}
	vars, err := addVars(c.args[1:])
	if err != nil {
		return "", err
	}
	tpl, err := paramtemplate.Parse(string(tt.ParamsTemplate))
	if err != nil {
		return "", events.Invalid("params_template", "type %s: %v", tt.Name, err)
	}
	params, err := tpl.Render(vars)
	if err != nil {
		return "", events.Invalid("params", "%v (the template wants %s)", err, strings.Join(tpl.Names(), ", "))
	}
	t, _, err := s.CreateTask(ctx, CreateTaskRequest{Title: addTitle(tt, c.args[1:]), TaskTypeID: tt.ID, Params: params}, c.meta)
	if err != nil {
		return "", err
	}
	return "➕ Created " + html.EscapeString(t.Title) + " (" + string(t.Priority) + ")\n<code>" + t.ID + "</code>", nil
}

// addVars reads /add's words: one bare word is {{key}}, name=value fills
// {{name}}.
func addVars(words []string) (map[string]string, error) {
	vars := map[string]string{}
	for _, w := range words {
		name, value, named := strings.Cut(w, "=")
		if !named {
			name, value = paramtemplate.Key, w
		}
		if name == "" {
			return nil, events.Invalid("params", "%q has no name before '='", w)
		}
		if _, dup := vars[name]; dup {
			return nil, events.Invalid("params", "%s is given twice", name)
		}
		vars[name] = value
	}
	return vars, nil
}

// addTitle names a task made by /add: the type's label and the words.
func addTitle(tt *events.TaskType, words []string) string {
	return strings.TrimSpace(tt.Label + " " + strings.Join(words, " "))
}

// tgBudget reports today's LLM usage of each type that used any or has a
// budget, against its budgets: counters read by key, flat at any size.
func (s *Server) tgBudget(ctx context.Context, _ telegramCall) (string, error) {
	types, err := s.db.TypesUsageToday(ctx)
	if err != nil {
		return "", err
	}
	var lines []string
	day := ""
	for _, u := range types {
		day = u.Day
		if u.Usage.Reports == 0 && u.DailyTokenBudget == nil && u.DailyCostBudgetUSD == nil {
			continue
		}
		line := fmt.Sprintf("<b>%s</b>: %d tokens", html.EscapeString(u.Name), u.Usage.Tokens)
		if u.DailyTokenBudget != nil {
			line += fmt.Sprintf(" of %d", *u.DailyTokenBudget)
		}
		line += fmt.Sprintf(", $%.2f", u.Usage.CostUSD)
		if u.DailyCostBudgetUSD != nil {
			line += fmt.Sprintf(" of $%.2f", *u.DailyCostBudgetUSD)
		}
		if u.Paused {
			line += " ⏸️ paused: " + html.EscapeString(u.PauseReason)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return "💰 No LLM usage reported today, and no type has a budget.", nil
	}
	return "💰 <b>LLM usage today</b> (" + day + ")\n" + strings.Join(lines, "\n"), nil
}
