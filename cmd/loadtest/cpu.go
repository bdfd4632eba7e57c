package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTimes is CPU time spent so far: by this process (API, workers, NATS, mail world and the
// load clients), by the Postgres server's processes, and by the whole machine (busy and idle), so
// that a phase's report can say where a request's CPU goes and whether the machine was saturated.
// Linux only (/proc); elsewhere the Postgres and machine figures stay zero.
type cpuTimes struct {
	self, postgres, busy, idle time.Duration
}

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

func readCPU() cpuTimes {
	var t cpuTimes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		t.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid … utime stime: fields 14 and 15, counted after the comm's ')'.
		open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
		if open < 0 || end < open || string(raw[open+1:end]) != "postgres" {
			continue
		}
		f := strings.Fields(string(raw[end+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		t.postgres += time.Duration(u+s) * clockTick
	}
	if raw, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(raw), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal …
		for i := 1; i < len(f); i++ {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			if i == 4 || i == 5 {
				t.idle += time.Duration(n) * clockTick
			} else if i <= 8 {
				t.busy += time.Duration(n) * clockTick
			}
		}
	}
	return t
}

func (t cpuTimes) sub(u cpuTimes) cpuTimes {
	return cpuTimes{t.self - u.self, t.postgres - u.postgres, t.busy - u.busy, t.idle - u.idle}
}

// perRequest is the CPU time per request of this process, of Postgres and of everything else on
// the machine, in microseconds, and how busy the machine was (0–1).
func (t cpuTimes) perRequest(requests int) (self, postgres, others float64, busy float64) {
	if requests == 0 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(requests) }
	if total := t.busy + t.idle; total > 0 {
		busy = float64(t.busy) / float64(total)
	}
	return us(t.self), us(t.postgres), us(max(0, t.busy-t.self-t.postgres)), busy
}
