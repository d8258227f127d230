package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
)

const (
	// maxResultLine is the longest stdout line still considered as the
	// result; longer lines are only posted as updates.
	maxResultLine = 1 << 20
	// stderrTail is how much of stderr a failure reason carries.
	stderrTail = 2 << 10
	// drainWait bounds reading leftover output after the process group is
	// gone (a process that escaped the group may hold the pipe open).
	drainWait = 2 * time.Second
)

// procSpec is one run of a task's command.
type procSpec struct {
	Command   string
	Dir       string
	Env       []string
	StdinFile string
	Timeout   time.Duration
	KillGrace time.Duration
	OnLine    func(line string) // each stdout line, in order, never concurrently
	Log       zerolog.Logger
}

// stopCause says why the worker stopped a command.
type stopCause int

const (
	stopNone     stopCause = iota
	stopTimeout            // the task's time limit passed
	stopShutdown           // the worker is shutting down and the grace period ended
)

// procResult is how a run ended.
type procResult struct {
	StartErr   error
	Pid        int
	Started    time.Time
	Exited     time.Time
	ExitCode   int    // -1 when a signal ended it
	Signal     string // the signal that ended it, if one did
	Stopped    stopCause
	LastJSON   json.RawMessage // the last stdout line that is a JSON object
	StderrTail string
}

// runProcess runs spec.Command with sh -c in a new process group, feeding
// it the stdin file and streaming its stdout lines to OnLine. It returns
// when the command has exited and its output is read. The group is stopped
// (SIGTERM, then SIGKILL after KillGrace) on timeout or when kill ends; and
// whatever the command leaves behind in its group is killed when it exits.
func runProcess(kill context.Context, p procSpec) procResult {
	var res procResult
	stdin, err := os.Open(p.StdinFile)
	if err != nil {
		res.StartErr = err
		return res
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		res.StartErr = err
		return res
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		res.StartErr = err
		return res
	}
	defer errR.Close()

	cmd := exec.Command("/bin/sh", "-c", p.Command)
	cmd.Dir, cmd.Env = p.Dir, p.Env
	// *os.File ends are handed to the child as they are: no copying
	// goroutines inside exec, and our reader decides when to stop reading.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, outW, errW
	// Own process group, so the whole tree can be signalled; Pdeathsig so
	// the command dies with a crashed worker instead of running on unseen
	// (the next start releases its task).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		res.StartErr = err
		return res
	}
	res.Started = time.Now()
	res.Pid = cmd.Process.Pid
	pgid := res.Pid

	var wg sync.WaitGroup
	var lastJSON []byte
	var tail []byte
	wg.Add(2)
	go func() {
		defer wg.Done()
		lastJSON = readStdout(outR, p.OnLine)
	}()
	go func() {
		defer wg.Done()
		tail = readStderr(errR, p.Log)
	}()

	exited := make(chan error, 1)
	go func() { exited <- waitExited(pgid) }()
	timer := time.NewTimer(p.Timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-timer.C:
		res.Stopped = stopTimeout
		waitErr = terminate(pgid, exited, p.KillGrace, p.Log)
	case <-kill.Done():
		res.Stopped = stopShutdown
		waitErr = terminate(pgid, exited, p.KillGrace, p.Log)
	}
	res.Exited = time.Now()
	if waitErr == nil {
		// The leader is a zombie until Wait reaps it, so its pid (the
		// group id) cannot have been reused: this reaches only the
		// command's own leftovers.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	} else {
		p.Log.Error().Err(waitErr).Msg("waitid failed; leftover processes of the command are not killed")
	}
	_ = cmd.Wait()
	ps := cmd.ProcessState
	res.ExitCode = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal().String()
	}

	deadline := time.Now().Add(drainWait)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	wg.Wait()
	res.LastJSON = lastJSON
	res.StderrTail = string(lastRunes(bytes.TrimSpace(tail), stderrTail))
	return res
}

// terminate stops a process group: SIGTERM to every member, then SIGKILL
// once grace has passed and some member still runs. It returns when the
// leader has exited (with the error of waiting for it).
func terminate(pgid int, exited <-chan error, grace time.Duration, log zerolog.Logger) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var waitErr error
	leaderDone := false
	for {
		select {
		case waitErr = <-exited:
			leaderDone = true
			exited = nil
		case <-tick.C:
		case <-deadline.C:
			log.Warn().Str("grace", logDuration(grace)).Msg("command ignored SIGTERM; sending SIGKILL")
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			if !leaderDone {
				waitErr = <-exited
			}
			return waitErr
		}
		// The whole group gets the grace, not only the leader: a shell
		// dies at once on SIGTERM while the program it started may still
		// be cleaning up.
		if leaderDone && (waitErr != nil || !groupRunning(pgid)) {
			return waitErr
		}
	}
}

// groupRunning reports whether a process of group pgid is still running
// (zombies do not count). It reads /proc; without it, it says false, and
// the group is killed as soon as its leader has exited.
func groupRunning(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	want := strconv.Itoa(pgid)
	for _, e := range entries {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[2] == want && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// waitExited blocks until pid has exited without reaping it
// (waitid(P_PID, pid, WEXITED|WNOWAIT)), so its process group id stays
// reserved until exec.Cmd.Wait reaps it.
func waitExited(pid int) error {
	const pPID, wExited, wNoWait = 1, 4, 0x1000000
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return errno
		}
	}
}

// readStdout hands each line to onLine and returns the last line that is
// a JSON object. It stops at EOF or at the read deadline.
func readStdout(r io.Reader, onLine func(string)) []byte {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	var last []byte
	tooLong := false
	emit := func() {
		onLine(string(line))
		if !tooLong {
			if t := bytes.TrimSpace(line); len(t) >= 2 && t[0] == '{' && t[len(t)-1] == '}' && json.Valid(t) {
				last = bytes.Clone(t)
			}
		}
		line, tooLong = line[:0], false
	}
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		switch {
		case err == nil:
			line = line[:len(line)-1]
			emit()
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line) >= maxResultLine {
				// Too long to be the result; post it in pieces.
				onLine(string(line))
				line, tooLong = line[:0], true
			}
		default:
			if len(line) > 0 {
				emit()
			}
			return last
		}
	}
}

// readStderr keeps the tail of stderr and logs its lines at debug level.
func readStderr(r io.Reader, log zerolog.Logger) []byte {
	br := bufio.NewReaderSize(r, 16<<10)
	var tail []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(frag) > 0 {
			tail = append(tail, frag...)
			if len(tail) > 4*stderrTail {
				tail = append(tail[:0], tail[len(tail)-2*stderrTail:]...)
			}
			if log.GetLevel() <= zerolog.DebugLevel {
				log.Debug().Str("stderr", string(lastRunes(bytes.TrimRight(frag, "\n"), 1024))).Msg("command stderr")
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return tail
		}
	}
}

// killLeftovers SIGKILLs every process whose environment carries
// TASK_WORKER_KEY=key: commands a crashed run of this worker left behind
// (Pdeathsig only reaches a command's first process, and a shell's children
// outlive it). It reads /proc and returns how many it killed.
func killLeftovers(key string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	tag := []byte(envKey + "=" + key + "\x00")
	self := os.Getpid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or another user's
		}
		if bytes.HasPrefix(env, tag) || bytes.Contains(env, append([]byte{0}, tag...)) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// lastRunes is the last at most n bytes of b, starting at a rune boundary.
func lastRunes(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[len(b)-n:]
	for i := 0; i < len(b) && i < 4; i++ {
		if b[i]&0xC0 != 0x80 {
			return b[i:]
		}
	}
	return b[len(b):]
}
