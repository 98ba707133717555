package nsexec

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestDecodeInfo: keeper.json's scanner reads what json.Marshal writes as
// encoding/json does — names and targets with quotes, backslashes, <>&,
// non-ASCII, invalid UTF-8, control characters — and what it does not
// expect (another field, a fractional number) goes to encoding/json.
func TestDecodeInfo(t *testing.T) {
	started := time.Date(2026, 12, 5, 20, 1, 2, 345678901, time.FixedZone("X", 3600))
	for _, s := range []string{"w", "/tmp/a b/c", `q"uote`, `back\slash`, "<a&b>", "ünïcödé ✓", "bad\xffutf8", "tab\there\nnl", "\u2028\u2029", "😀"} {
		in := keeperInfo{PID: 4242, StartTime: 1 << 40, Name: s, Target: "/t/" + s, Started: started, Init: "/bin/" + s}
		b, err := json.Marshal(&in)
		if err != nil {
			t.Fatal(err)
		}
		want := new(keeperInfo)
		json.Unmarshal(b, want)
		got, ok := scanInfo(append(b, '\n')) // as writeInfo writes it
		if !ok {
			t.Errorf("%q: the scanner gave up on %s", s, b)
			continue
		}
		if !reflect.DeepEqual(got, want) && !(got.Started.Equal(want.Started) && got.Name == want.Name && got.Target == want.Target && got.Init == want.Init && got.PID == want.PID && got.StartTime == want.StartTime) {
			t.Errorf("%q: scanned %+v; encoding/json %+v", s, got, want)
		}
	}
	for _, b := range []string{`{"pid":1,"extra":true}`, `{"pid":1.5}`, `{"pid":1,"target":"\/x"}`, `{"pid":1`, `[1]`, `{"pid":1} x`} {
		if _, ok := scanInfo([]byte(b)); ok {
			t.Errorf("the scanner took %s", b)
		}
	}
	if info, err := decodeInfo([]byte(`{"pid":7,"target":"\/x","extra":1}`)); err != nil || info.PID != 7 || info.Target != "/x" {
		t.Errorf("fallback: %+v, %v", info, err)
	}
}
