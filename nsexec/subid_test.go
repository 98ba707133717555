package nsexec

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSubIDs(t *testing.T) {
	const file = `alice:100000:65536
bob:165536:65536
# not a comment format subuid knows, and malformed lines are skipped
1000:300000:10
alice:400000:0
alice:x:5
alice:4294967290:100
alice:500000:5
`
	got := parseSubIDs(strings.NewReader(file), "alice", 1000)
	want := []IDRange{{Host: 100000, Size: 65536}, {Host: 300000, Size: 10}, {Host: 500000, Size: 5}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseSubIDs = %+v, want %+v", got, want)
	}
	if got := parseSubIDs(strings.NewReader(file), "carol", 1002); len(got) != 0 {
		t.Errorf("a user without ranges got %+v", got)
	}
}

func TestMapAround(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  uint32
		host []IDRange
		want []IDRange
	}{
		{"split around own", 1000, []IDRange{{Host: 100000, Size: 65536}},
			[]IDRange{{1000, 1000, 1}, {0, 100000, 1000}, {1001, 101000, 64536}}},
		{"range below own", 70000, []IDRange{{Host: 100000, Size: 65536}},
			[]IDRange{{70000, 70000, 1}, {0, 100000, 65536}}},
		{"several ranges", 5, []IDRange{{Host: 100000, Size: 3}, {Host: 200000, Size: 4}},
			[]IDRange{{5, 5, 1}, {0, 100000, 3}, {3, 200000, 2}, {6, 200002, 2}}},
		{"range holding own", 100002, []IDRange{{Host: 100000, Size: 5}},
			[]IDRange{{100002, 100002, 1}, {0, 100000, 2}, {2, 100003, 2}}},
		{"own is 0", 0, []IDRange{{Host: 100000, Size: 10}},
			[]IDRange{{0, 0, 1}, {1, 100000, 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mapAround(tc.own, tc.host)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("mapAround(%d, %+v) = %+v, want %+v", tc.own, tc.host, got, tc.want)
			}
			// No inner id and no host id twice.
			inner, host := map[uint32]bool{}, map[uint32]bool{}
			for _, r := range got {
				for i := uint32(0); i < r.Size; i++ {
					if inner[r.Inner+i] || host[r.Host+i] {
						t.Fatalf("id mapped twice in %+v", got)
					}
					inner[r.Inner+i], host[r.Host+i] = true, true
				}
			}
		})
	}
}

func TestMapAroundLineLimit(t *testing.T) {
	var host []IDRange
	for i := range 1000 {
		host = append(host, IDRange{Host: 100000 + uint32(i)*10, Size: 1})
	}
	if got := mapAround(1000, host); len(got) != maxMapLines {
		t.Errorf("%d ranges: %d map lines, want the kernel's limit %d", len(host), len(got), maxMapLines)
	}
}
