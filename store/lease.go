package store

// Leases: a Writer's claim, recorded in the database, that the objects it
// wrote or retained are in use. gc treats the objects of live leases as
// roots. A lease is tied to its process: it is live while that process
// runs, and stale once the process is gone, so a killed import leaks
// nothing for longer than the next gc.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// procIdentity identifies a process across pid reuse and reboots.
type procIdentity struct {
	pid        int
	startTicks int64  // /proc/PID/stat field 22, clock ticks after boot
	bootID     string // /proc/sys/kernel/random/boot_id
	pidNS      string // readlink /proc/self/ns/pid, e.g. "pid:[4026531836]"
	hostname   string
}

var (
	selfOnce sync.Once
	self     procIdentity
	selfErr  error
)

func selfProcess() (procIdentity, error) {
	selfOnce.Do(func() {
		self.pid = os.Getpid()
		var zombie bool
		self.startTicks, zombie, selfErr = procStart(self.pid)
		if selfErr == nil && zombie {
			selfErr = fmt.Errorf("own process is a zombie")
		}
		if selfErr != nil {
			selfErr = fmt.Errorf("identify process: %w", selfErr)
			return
		}
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			selfErr = fmt.Errorf("identify process: %w", err)
			return
		}
		self.bootID = string(bytes.TrimSpace(b))
		// Without pid namespaces (or /proc/self/ns) all processes share "".
		self.pidNS, _ = os.Readlink("/proc/self/ns/pid")
		self.hostname, _ = os.Hostname()
	})
	return self, selfErr
}

// procStart returns a process's start time from /proc/PID/stat and
// whether it is a zombie. os.ErrNotExist means no such process.
func procStart(pid int) (ticks int64, zombie bool, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false, err
	}
	return parseProcStat(b)
}

// parseProcStat extracts state (field 3) and starttime (field 22) from
// the contents of /proc/PID/stat. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so fields
// are counted from the last ')'.
func parseProcStat(b []byte) (ticks int64, zombie bool, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false, fmt.Errorf("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, false, fmt.Errorf("malformed /proc stat: %d fields", len(f))
	}
	ticks, err = strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("malformed /proc stat start time: %w", err)
	}
	return ticks, f[0] == "Z" || f[0] == "X", nil
}

// leaseInfo is a row of the leases table.
type leaseInfo struct {
	ID         int64
	PID        int
	StartTicks int64
	BootID     string
	PidNS      string
	Hostname   string
	CreatedNs  int64
	Purpose    string
}

// unverifiableTTL is how long a lease is presumed live when its process
// cannot be checked because it ran in another pid namespace (a container
// sharing the store). A Writer that runs for a day is not a use case; a
// container killed mid-import must not pin its objects forever.
const unverifiableTTL = 24 * time.Hour

// leaseState says whether a lease's process still runs, and if not why.
// A lease from another boot is stale: its process died with the machine.
// (A store is used by one machine; SQLite does not support sharing one
// over a network filesystem.)
func leaseState(l *leaseInfo, me procIdentity, now time.Time) (live bool, why string) {
	if l.BootID != me.bootID {
		return false, "process from an earlier boot"
	}
	if l.PidNS != me.pidNS {
		if now.Sub(time.Unix(0, l.CreatedNs)) > unverifiableTTL {
			return false, "process in another pid namespace, older than " + unverifiableTTL.String()
		}
		return true, ""
	}
	ticks, zombie, err := procStart(l.PID)
	switch {
	case err != nil && os.IsNotExist(err):
		return false, fmt.Sprintf("process %d exited", l.PID)
	case err != nil:
		return true, "" // cannot tell: keep it
	case zombie:
		return false, fmt.Sprintf("process %d exited", l.PID)
	case ticks != l.StartTicks:
		return false, fmt.Sprintf("process %d exited (pid reused)", l.PID)
	}
	return true, ""
}

func (tx *Tx) leases() ([]leaseInfo, error) {
	rows, err := tx.query(`SELECT id, pid, start_ticks, boot_id, pid_ns, hostname, created_ns, purpose FROM leases ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	defer rows.Close()
	var ls []leaseInfo
	for rows.Next() {
		var l leaseInfo
		if err := rows.Scan(&l.ID, &l.PID, &l.StartTicks, &l.BootID, &l.PidNS, &l.Hostname, &l.CreatedNs, &l.Purpose); err != nil {
			return nil, fmt.Errorf("list leases: %w", mapErr(err))
		}
		ls = append(ls, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", mapErr(err))
	}
	return ls, nil
}

// Lease describes a Writer's lease, for `strata gc` and `fsck` output.
type Lease struct {
	ID        int64  `json:"id"`
	PID       int    `json:"pid"`
	Hostname  string `json:"hostname"`
	CreatedNs int64  `json:"created_ns"`
	Purpose   string `json:"purpose"`
	Live      bool   `json:"live"`
	Why       string `json:"why,omitempty"` // why it is stale
}

// Leases lists the leases of Writers, live and stale.
func (tx *Tx) Leases() ([]Lease, error) {
	ls, err := tx.leases()
	if err != nil {
		return nil, err
	}
	me, err := selfProcess()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]Lease, len(ls))
	for i := range ls {
		l := &ls[i]
		live, why := leaseState(l, me, now)
		out[i] = Lease{ID: l.ID, PID: l.PID, Hostname: l.Hostname, CreatedNs: l.CreatedNs, Purpose: l.Purpose, Live: live, Why: why}
	}
	return out, nil
}
