package nsexec

import (
	"encoding/json"
	"strconv"
	"time"
)

// decodeInfo decodes keeper.json. The file is json.Marshal's of a flat
// keeperInfo, and the front reads it on every exec: a small scanner of
// flat objects takes it without encoding/json, whose first use in a
// process (reflecting over the type) costs more than the rest of
// FindKeeper; anything it does not expect goes to encoding/json.
func decodeInfo(b []byte) (*keeperInfo, error) {
	if info, ok := scanInfo(b); ok {
		return info, nil
	}
	info := new(keeperInfo)
	return info, json.Unmarshal(b, info)
}

// scanInfo reads {"key":value,...} with string and integer values only.
func scanInfo(b []byte) (*keeperInfo, bool) {
	info := new(keeperInfo)
	i := 0
	peek := func(c byte) bool { return i < len(b) && b[i] == c }
	str := func() (string, bool) {
		if !peek('"') {
			return "", false
		}
		j := i + 1
		for ; j < len(b) && b[j] != '"'; j++ {
			if b[j] == '\\' {
				j++
			} else if b[j] < 0x20 {
				return "", false
			}
		}
		if j >= len(b) {
			return "", false
		}
		// JSON's escapes as Go's quoting reads them; "\/" and the
		// surrogate pairs it lacks go to encoding/json.
		s, err := strconv.Unquote(string(b[i : j+1]))
		i = j + 1
		return s, err == nil
	}
	num := func() (uint64, bool) {
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		n, err := strconv.ParseUint(string(b[i:j]), 10, 63)
		i = j
		return n, err == nil
	}
	if !peek('{') {
		return nil, false
	}
	i++
	for !peek('}') {
		key, ok := str()
		if !ok || !peek(':') {
			return nil, false
		}
		i++
		switch key {
		case "pid", "start_time":
			n, ok := num()
			if !ok {
				return nil, false
			}
			if key == "pid" {
				info.PID = int(n)
			} else {
				info.StartTime = n
			}
		case "name", "target", "started", "init":
			s, ok := str()
			if !ok {
				return nil, false
			}
			switch key {
			case "name":
				info.Name = s
			case "target":
				info.Target = s
			case "init":
				info.Init = s
			case "started":
				t, err := time.Parse(time.RFC3339Nano, s)
				if err != nil {
					return nil, false
				}
				info.Started = t
			}
		default:
			return nil, false
		}
		if peek(',') {
			i++
		} else if !peek('}') {
			return nil, false
		}
	}
	for i++; i < len(b) && (b[i] == '\n' || b[i] == ' '); i++ {
	}
	return info, i == len(b)
}
