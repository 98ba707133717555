package strata

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// ParseShard reads a batch's --shard: "K/N" (0 <= K < N), or "auto",
// which takes K from $JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) with
// N from shards (--shards), or K and N from $SLURM_ARRAY_TASK_ID and
// $SLURM_ARRAY_TASK_COUNT (a Slurm job array; its ids must be 0..N-1,
// --array=0-(N-1)). getenv is os.Getenv in the CLI.
func ParseShard(spec string, shards int, getenv func(string) string) (k, n int, err error) {
	bad := func(format string, a ...any) (int, int, error) {
		return 0, 0, invalidf("--shard %s: "+format, append([]any{spec}, a...)...)
	}
	if spec == "auto" {
		switch {
		case getenv("JOB_COMPLETION_INDEX") != "":
			if shards < 1 {
				return bad("$JOB_COMPLETION_INDEX is set: give the job's completions as --shards N")
			}
			k, err := strconv.Atoi(getenv("JOB_COMPLETION_INDEX"))
			if err != nil {
				return bad("$JOB_COMPLETION_INDEX=%q is not a number", getenv("JOB_COMPLETION_INDEX"))
			}
			spec = fmt.Sprintf("%d/%d", k, shards)
		case getenv("SLURM_ARRAY_TASK_ID") != "":
			if shards > 0 {
				return bad("under Slurm the count is $SLURM_ARRAY_TASK_COUNT; --shards is for Kubernetes")
			}
			spec = getenv("SLURM_ARRAY_TASK_ID") + "/" + getenv("SLURM_ARRAY_TASK_COUNT")
		default:
			return bad("neither $JOB_COMPLETION_INDEX (Kubernetes Indexed Job) nor $SLURM_ARRAY_TASK_ID (Slurm array) is set")
		}
	} else if shards > 0 {
		return bad("--shards goes with --shard auto")
	}
	ks, ns, ok := strings.Cut(spec, "/")
	k, err1 := strconv.Atoi(ks)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || n < 1 || k < 0 || k >= n {
		return bad("want K/N with 0 <= K < N (resolved to %q)", spec)
	}
	return k, n, nil
}

// MergeReport is what BatchMerge found.
type MergeReport struct {
	Files     []string       `json:"files"`
	Results   int            `json:"results"`
	Jobs      int            `json:"jobs,omitempty"` // in the batch file, if given
	Missing   []string       `json:"missing"`        // job ids with no result
	Duplicate []string       `json:"duplicate"`      // job ids with more than one
	Unknown   []string       `json:"unknown"`        // result ids the batch file does not hold
	Shards    map[string]int `json:"shards"`         // results per shard
}

// OK is true when every job has exactly one result.
func (m *MergeReport) OK() bool {
	return len(m.Missing) == 0 && len(m.Duplicate) == 0 && len(m.Unknown) == 0
}

// BatchMerge reads the result files of a batch's shards and writes their
// lines to w ordered by job index (line number). If jobsFile is given,
// every job of it must have exactly one result; without it, the results'
// indexes must be 1..max, each once. The report lists what is missing,
// duplicated or unknown; the caller fails if !OK().
func BatchMerge(files []string, jobsFile string, w io.Writer) (*MergeReport, error) {
	rep := &MergeReport{Files: files, Shards: map[string]int{}, Missing: []string{}, Duplicate: []string{}, Unknown: []string{}}
	type line struct {
		index int
		id    string
		raw   []byte
	}
	var lines []line
	count := map[string]int{}
	byIndex := map[int]string{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("batch-merge: %w", err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for n := 1; sc.Scan(); n++ {
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			var r struct {
				ID    string `json:"id"`
				Index int    `json:"index"`
				Shard string `json:"shard"`
			}
			if err := json.Unmarshal(b, &r); err != nil || r.ID == "" || r.Index < 1 {
				fh.Close()
				return nil, invalidf("batch-merge %s:%d: not a batch result line", f, n)
			}
			lines = append(lines, line{r.Index, r.ID, append([]byte(nil), b...)})
			count[r.ID]++
			byIndex[r.Index] = r.ID
			rep.Shards[r.Shard]++
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("batch-merge %s: %w", f, err)
		}
	}
	rep.Results = len(lines)
	for id, c := range count {
		if c > 1 {
			rep.Duplicate = append(rep.Duplicate, id)
		}
	}
	if jobsFile != "" {
		jobs, err := readJobs(jobsFile)
		if err != nil {
			return nil, err
		}
		rep.Jobs = len(jobs)
		known := map[string]bool{}
		for _, j := range jobs {
			known[j.ID] = true
			if count[j.ID] == 0 {
				rep.Missing = append(rep.Missing, j.ID)
			}
		}
		for id := range count {
			if !known[id] {
				rep.Unknown = append(rep.Unknown, id)
			}
		}
	} else {
		max := 0
		for i := range byIndex {
			if i > max {
				max = i
			}
		}
		for i := 1; i <= max; i++ {
			if _, ok := byIndex[i]; !ok {
				rep.Missing = append(rep.Missing, "line "+strconv.Itoa(i))
			}
		}
	}
	sort.Strings(rep.Duplicate)
	sort.Strings(rep.Unknown)
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].index < lines[j].index })
	bw := bufio.NewWriter(w)
	for _, l := range lines {
		bw.Write(l.raw)
		bw.WriteByte('\n')
	}
	return rep, bw.Flush()
}
