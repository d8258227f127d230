package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store"
)

var workflowsCommand = group("workflows", "Workflows: a graph of tasks created at once; each task waits (blocked) until the tasks it depends on completed.", map[string]subcommand{
	"create": {"create a workflow from a JSON file", (*app).workflowsCreate},
	"list":   {"list workflows with status and progress", (*app).workflowsList},
	"show":   {"show a workflow's tasks and their dependencies", (*app).workflowsShow},
	"cancel": {"cancel a workflow and its tasks that may still run", (*app).workflowsCancel},
})

// workflowFile is what workflows create reads: the API's body, where a
// task may name its type by name or id in task_type instead of task_type_id.
type workflowFile struct {
	Name  string             `json:"name"`
	Tasks []workflowFileTask `json:"tasks"`
}

type workflowFileTask struct {
	client.NewWorkflowTask
	TaskType string `json:"task_type,omitempty"`
}

var workflowsCreateSpec = cmdSpec{
	name: "workflows create", args: "FILE.json [--json]",
	summary: "Create a workflow from a JSON file: its name and its tasks, each with a ref (its name in the\n" +
		"workflow), a title, a type (task_type: a name or id, or task_type_id), params and depends_on (refs).\n" +
		"The whole graph is created at once or not at all: a cycle, an unknown ref or an invalid task is\n" +
		"refused naming the task (tasks[i]...). Tasks with dependencies start blocked and become claimable\n" +
		"when the last one completes; each gets its dependencies' results as inputs when claimed.\n" +
		`on_dependency_failure: "wait" keeps a task blocked for an admin when a dependency fails for good
(default: it is cancelled with reason dependency_failed). "-" reads the file from standard input.`,
	example: `cat > nvda.json <<'JSON'
{"name": "NVDA sentiment", "tasks": [
  {"ref": "reddit", "title": "Crawl Reddit for NVDA", "task_type": "reddit_crawl", "params": {"ticker": "NVDA"}},
  {"ref": "stocktwits", "title": "Crawl StockTwits for NVDA", "task_type": "stocktwits_crawl", "params": {"ticker": "NVDA"}},
  {"ref": "report", "title": "Sentiment report", "task_type": "report", "depends_on": ["reddit", "stocktwits"]}]}
JSON
taskctl workflows create nvda.json`,
}

func (a *app) workflowsCreate(args []string) int {
	spec := workflowsCreateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the workflow as JSON")
	call, code := a.start(fs, spec, args, api, 1, "FILE.json")
	if call == nil {
		return code
	}
	defer call.cancel()
	var raw []byte
	var err error
	if call.pos[0] == "-" {
		raw, err = io.ReadAll(a.stdin)
	} else {
		raw, err = os.ReadFile(call.pos[0])
	}
	if err != nil {
		return a.fail(spec.name, usagef("read %s: %v", call.pos[0], err))
	}
	var f workflowFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return a.fail(spec.name, usagef("%s is not a workflow file: %v (see taskctl workflows create --help)", call.pos[0], err))
	}
	w := client.NewWorkflow{Name: f.Name, Tasks: make([]client.NewWorkflowTask, len(f.Tasks))}
	types := map[string]string{}
	for i, t := range f.Tasks {
		if t.TaskType != "" {
			id, ok := types[t.TaskType]
			if !ok {
				tt, err := resolveType(call.ctx, call.c, t.TaskType)
				if err != nil {
					return a.fail(spec.name, fmt.Errorf("tasks[%d].task_type: %w", i, err))
				}
				id = tt.ID
				types[t.TaskType] = id
			}
			t.TaskTypeID = id
		}
		w.Tasks[i] = t.NewWorkflowTask
	}
	v, err := call.c.CreateWorkflow(call.ctx, w)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(v)
	}
	fmt.Fprintf(a.stdout, "Created workflow %q with %d tasks (%d claimable now, %d blocked), id %s.\nWatch it: taskctl workflows show %s\n",
		v.Name, v.Progress.Total, v.Progress.Pending, v.Progress.Blocked, v.ID, v.ID)
	return exitOK
}

var workflowsListSpec = cmdSpec{
	name: "workflows list", args: "[--limit N] [--json]",
	summary: "List workflows, newest first, with status (running, completed, failed, cancelled), progress and duration.",
	example: "taskctl workflows list",
}

func (a *app) workflowsList(args []string) int {
	spec := workflowsListSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	limit := fs.Int("limit", 50, "at most this many (1-200)")
	asJSON := fs.Bool("json", false, "print the workflows as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	page, err := call.c.Workflows(call.ctx, "", *limit)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(page.Workflows)
	}
	tw := a.table()
	fmt.Fprintln(tw, "NAME\tSTATUS\tPROGRESS\tDURATION\tCREATED\tID")
	for _, v := range page.Workflows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clip(v.Name, 40), v.Status, progressText(v.Progress),
			(time.Duration(v.DurationSeconds) * time.Second).String(), v.CreatedAt.Format(time.RFC3339), v.ID)
	}
	tw.Flush()
	if len(page.Workflows) == 0 {
		fmt.Fprintln(a.stdout, "(no workflows: taskctl workflows create --help)")
	}
	return exitOK
}

func progressText(p store.WorkflowProgress) string {
	s := fmt.Sprintf("%d/%d done", p.Completed, p.Total)
	for _, x := range []struct {
		n    int
		what string
	}{{p.InProgress, "running"}, {p.Pending, "pending"}, {p.Blocked, "blocked"}, {p.Failed, "failed"}, {p.Cancelled, "cancelled"}} {
		if x.n > 0 {
			s += fmt.Sprintf(", %d %s", x.n, x.what)
		}
	}
	return s
}

var workflowsShowSpec = cmdSpec{
	name: "workflows show", args: "WORKFLOW_ID [--json]",
	summary: "Show a workflow: status, progress, duration, and each task (the latest of its retry chain) with\n" +
		"the refs it depends on. A task shown blocked waits for those; taskctl tasks show ID tells more.",
	example: "taskctl workflows show 0193a7c2-...",
}

func (a *app) workflowsShow(args []string) int {
	spec := workflowsShowSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the workflow as JSON")
	call, code := a.start(fs, spec, args, api, 1, "WORKFLOW_ID")
	if call == nil {
		return code
	}
	defer call.cancel()
	v, err := call.c.Workflow(call.ctx, call.pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(v)
	}
	fmt.Fprintf(a.stdout, "Workflow %q (%s): %s, %s, %s\n\n", v.Name, v.ID, v.Status, progressText(v.Progress),
		(time.Duration(v.DurationSeconds) * time.Second).String())
	tw := a.table()
	fmt.Fprintln(tw, "REF\tSTATUS\tDEPENDS ON\tTITLE\tTASK")
	for _, n := range v.Tasks {
		status := string(n.Status)
		if n.RetryCount > 0 {
			status += fmt.Sprintf(" (retry %d)", n.RetryCount)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Ref, status, clip(strings.Join(n.DependsOn, ","), 40), clip(n.Title, 40), n.TaskID)
	}
	tw.Flush()
	return exitOK
}

var workflowsCancelSpec = cmdSpec{
	name: "workflows cancel", args: "WORKFLOW_ID [--reason TEXT]",
	summary: "Cancel a workflow: every task of it that may still run is cancelled (a failed one awaiting its retry\n" +
		"gets no retry). Tasks that ended keep their outcome.",
	example: `taskctl workflows cancel 0193a7c2-... --reason "wrong ticker"`,
}

func (a *app) workflowsCancel(args []string) int {
	spec := workflowsCancelSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why, for the record")
	call, code := a.start(fs, spec, args, api, 1, "WORKFLOW_ID")
	if call == nil {
		return code
	}
	defer call.cancel()
	v, err := call.c.CancelWorkflow(call.ctx, call.pos[0], *reason)
	if err != nil {
		return a.fail(spec.name, err)
	}
	fmt.Fprintf(a.stdout, "Workflow %q is %s: %s.\n", v.Name, v.Status, progressText(v.Progress))
	return exitOK
}
