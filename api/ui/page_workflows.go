package ui

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type workflowsData struct {
	Page *store.WorkflowPage
}

func (u *UI) workflows(c echo.Context) error {
	page, err := u.db.ListWorkflows(c.Request().Context(), c.QueryParam("after"), 50)
	if err != nil {
		return u.fail(c, err)
	}
	return u.render(c, http.StatusOK, "workflows", workflowsData{Page: page})
}

type workflowData struct {
	W     *store.WorkflowView
	Graph graph
	Error string
}

func (u *UI) workflow(c echo.Context) error {
	return u.renderWorkflow(c, http.StatusOK, "")
}

func (u *UI) renderWorkflow(c echo.Context, status int, problem string) error {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return u.notFound(c, "no workflow "+c.Param("id"))
	}
	w, err := u.db.GetWorkflow(c.Request().Context(), id)
	if err != nil {
		return u.fail(c, err)
	}
	return u.render(c, status, "workflow", workflowData{W: w, Graph: layoutGraph(w.Tasks), Error: problem})
}

func (u *UI) cancelWorkflow(c echo.Context) error {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return u.notFound(c, "no workflow "+c.Param("id"))
	}
	if _, err := u.db.CancelWorkflow(c.Request().Context(), id, strings.TrimSpace(c.FormValue("reason")), actor(c)); err != nil {
		_, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.renderWorkflow(c, status, err.Error())
	}
	return c.Redirect(http.StatusSeeOther, "/workflows/"+id)
}

// graph is a workflow laid out for an SVG: each task in the column of its
// depth (the longest path from a task without dependencies), edges from a
// dependency's right side to its dependent's left.
type graph struct {
	Width, Height int
	Nodes         []graphNode
	Edges         []graphEdge
}

type graphNode struct {
	X, Y, W, H int
	Ref, Title string
	TaskID     string
	Status     events.Status
	Label      string // the ref, cut to fit the box
}

type graphEdge struct{ X1, Y1, X2, Y2 int }

const (
	nodeW, nodeH = 140, 28
	colGap       = 60
	rowGap       = 12
	graphPad     = 8
)

func layoutGraph(tasks []store.WorkflowNode) graph {
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.Ref] = i
	}
	depth := make([]int, len(tasks))
	for i := range depth {
		depth[i] = -1
	}
	var depthOf func(i, guard int) int
	depthOf = func(i, guard int) int {
		if depth[i] >= 0 || guard > len(tasks) {
			return max(depth[i], 0)
		}
		d := 0
		for _, ref := range tasks[i].DependsOn {
			if j, ok := index[ref]; ok {
				d = max(d, depthOf(j, guard+1)+1)
			}
		}
		depth[i] = d
		return d
	}
	rows := map[int]int{}
	g := graph{}
	pos := make([]graphNode, len(tasks))
	for i, t := range tasks {
		col := depthOf(i, 0)
		row := rows[col]
		rows[col]++
		n := graphNode{X: graphPad + col*(nodeW+colGap), Y: graphPad + row*(nodeH+rowGap), W: nodeW, H: nodeH,
			Ref: t.Ref, Title: t.Title, TaskID: t.TaskID, Status: t.Status, Label: clipRunes(t.Ref, 18)}
		pos[i] = n
		g.Width = max(g.Width, n.X+nodeW+graphPad)
		g.Height = max(g.Height, n.Y+nodeH+graphPad)
	}
	g.Nodes = pos
	for i, t := range tasks {
		for _, ref := range t.DependsOn {
			if j, ok := index[ref]; ok {
				g.Edges = append(g.Edges, graphEdge{X1: pos[j].X + nodeW, Y1: pos[j].Y + nodeH/2, X2: pos[i].X, Y2: pos[i].Y + nodeH/2})
			}
		}
	}
	return g
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// progressText says how far a workflow is: "2/3 done, 1 blocked".
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
