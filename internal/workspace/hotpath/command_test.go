package hotpath

import (
	"slices"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	got := MergeEnv([]string{"A=1", "B=2", "C=3"}, []string{"B=20", "D=4", "A=10"})
	want := []string{"A=10", "B=20", "C=3", "D=4"}
	if !slices.Equal(got, want) {
		t.Errorf("mergeEnv = %q; want %q", got, want)
	}
}

func TestSandboxEnv(t *testing.T) {
	for _, tc := range []struct{ env, want []string }{
		{
			[]string{"PATH=/bin", "HOME=/home/u", "TMPDIR=/home/u/tmp", "XDG_CONFIG_HOME=/home/u/.config", "LANG=C"},
			[]string{"PATH=/bin", "LANG=C", "HOME=/tmp", "TMPDIR=/tmp",
				"NO_UPDATE_NOTIFIER=1", "npm_config_update_notifier=false", "PIP_DISABLE_PIP_VERSION_CHECK=1"},
		},
		{
			// The caller's own choice of an update switch stands; XDG
			// directories all go.
			[]string{"XDG_CACHE_HOME=/c", "XDG_DATA_HOME=/d", "XDG_STATE_HOME=/s", "XDG_RUNTIME_DIR=/r", "npm_config_update_notifier=true"},
			[]string{"npm_config_update_notifier=true", "HOME=/tmp", "TMPDIR=/tmp",
				"NO_UPDATE_NOTIFIER=1", "PIP_DISABLE_PIP_VERSION_CHECK=1"},
		},
	} {
		if got := SandboxEnv(tc.env); !slices.Equal(got, tc.want) {
			t.Errorf("SandboxEnv(%q) = %q; want %q", tc.env, got, tc.want)
		}
	}
}
