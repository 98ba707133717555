package nsexec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRoot writes files (path → content) under a new directory standing
// for /.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestDiagnoseUserNS: each cause, from faked sysctl and proc files
// (ReadUserNSFacts under a fake root) and the errnos the attempt would
// give, is told apart and gets its own fix.
func TestDiagnoseUserNS(t *testing.T) {
	status := func(seccomp string) string {
		return "Name:\tstrata\nNoNewPrivs:\t0\nSeccomp:\t" + seccomp + "\nSeccomp_filters:\t1\n"
	}
	ubuntu := map[string]string{
		"proc/sys/user/max_user_namespaces":                     "63183\n",
		"proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1\n",
		"sys/module/apparmor/parameters/enabled":                "Y\n",
		"proc/self/status":                                      status("0"),
		"proc/self/ns/user":                                     "",
	}
	docker := map[string]string{
		"proc/sys/user/max_user_namespaces": "63183\n",
		"proc/self/status":                  status("2"),
		"proc/self/ns/user":                 "",
		".dockerenv":                        "",
	}
	zero := map[string]string{
		"proc/sys/user/max_user_namespaces": "0\n",
		"proc/self/status":                  status("0"),
		"proc/self/ns/user":                 "",
	}
	nested := map[string]string{
		"proc/sys/user/max_user_namespaces": "2147483647\n",
		"proc/self/status":                  status("0"),
		"proc/self/ns/user":                 "",
	}
	debian := map[string]string{
		"proc/sys/user/max_user_namespaces":         "63183\n",
		"proc/sys/kernel/unprivileged_userns_clone": "0\n",
		"proc/self/status":                          status("0"),
		"proc/self/ns/user":                         "",
	}
	plain := map[string]string{
		"proc/sys/user/max_user_namespaces": "63183\n",
		"proc/self/status":                  status("0"),
		"proc/self/ns/user":                 "",
	}
	noUserNS := map[string]string{"proc/self/status": status("0")}
	cases := []struct {
		name                   string
		files                  map[string]string
		unshare, mapIDs, mount string
		cause                  UserNSCause
		detail, fix            string
	}{
		{"works", plain, "", "", "", UserNSWorks, "work", ""},
		{"AppArmor: mount refused", ubuntu, "", "", "EPERM", UserNSAppArmor, "apparmor_restrict_unprivileged_userns=1", "strata setup apparmor"},
		{"AppArmor: map refused", ubuntu, "", "EPERM", "-", UserNSAppArmor, "mapping ids", "strata setup apparmor"},
		{"AppArmor: creation refused", ubuntu, "EACCES", "-", "-", UserNSAppArmor, "AppArmor denies", "strata setup apparmor"},
		{"seccomp container", docker, "EPERM", "-", "-", UserNSSeccomp, "docker container", "seccomp=unconfined"},
		{"seccomp: mount filtered", docker, "", "", "EPERM", UserNSSeccomp, "mounting inside it", "seccomp"},
		{"max_user_namespaces=0", zero, "ENOSPC", "-", "-", UserNSLimit, "user.max_user_namespaces=0", "sysctl -w user.max_user_namespaces="},
		{"enclosing namespace's limit (bwrap --disable-userns)", nested, "ENOSPC", "-", "-", UserNSLimit, "enclosing user namespace", "bwrap without --disable-userns"},
		{"kernel without user namespaces", noUserNS, "EINVAL", "-", "-", UserNSNoKernel, "CONFIG_USER_NS", "CONFIG_USER_NS=y"},
		{"kernel without /proc/self/ns/user, EPERM", noUserNS, "EPERM", "-", "-", UserNSNoKernel, "no /proc/self/ns/user", "CONFIG_USER_NS=y"},
		{"Debian's sysctl", debian, "EPERM", "-", "-", UserNSSysctl, "unprivileged_userns_clone=0", "sysctl -w kernel.unprivileged_userns_clone=1"},
		{"unexplained EPERM", plain, "EPERM", "-", "-", UserNSUnknown, "SELinux", ""},
		{"created, mount refused, no cause seen", plain, "", "", "EPERM", UserNSUnknown, "no AppArmor restriction or seccomp filter", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := ReadUserNSFacts(fakeRoot(t, c.files))
			p.Unshare, p.MapIDs, p.Mount = c.unshare, c.mapIDs, c.mount
			d := DiagnoseUserNS(p)
			if d.Cause != c.cause {
				t.Fatalf("cause %q, want %q (%s)", d.Cause, c.cause, d.Detail)
			}
			if !strings.Contains(d.Detail, c.detail) {
				t.Errorf("detail %q lacks %q", d.Detail, c.detail)
			}
			fixes := strings.Join(d.Fix, "\n")
			if c.fix != "" && !strings.Contains(fixes, c.fix) {
				t.Errorf("fix %q lacks %q", fixes, c.fix)
			}
			if c.cause != UserNSWorks && !strings.Contains(fixes, "reflink or copy backend") {
				t.Errorf("fix %q does not name the namespace-free backends", fixes)
			}
			if c.cause == UserNSWorks && len(d.Fix) != 0 {
				t.Errorf("a fix for what works: %v", d.Fix)
			}
		})
	}
}

// TestReadUserNSFacts: the files are read as they are; missing sysctls
// are -1.
func TestReadUserNSFacts(t *testing.T) {
	p := ReadUserNSFacts(fakeRoot(t, map[string]string{
		"proc/sys/user/max_user_namespaces":                     "12\n",
		"proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1",
		"sys/module/apparmor/parameters/enabled":                "Y",
		"proc/self/status":                                      "Name:\tx\nSeccomp:\t2\n",
		"proc/self/ns/user":                                     "",
		"run/.containerenv":                                     "",
	}))
	want := UserNSProbe{MaxUserNamespaces: 12, UnprivilegedUsernsClone: -1, AppArmorRestrict: 1, AppArmor: true, Seccomp: 2, HasUserNS: true, Container: "podman"}
	if p != want {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
	p = ReadUserNSFacts(t.TempDir())
	want = UserNSProbe{MaxUserNamespaces: -1, UnprivilegedUsernsClone: -1, AppArmorRestrict: -1, Seccomp: -1}
	if p != want {
		t.Errorf("empty root: got %+v\nwant %+v", p, want)
	}
}

// TestProbeUserNS: on this machine, where user namespaces work, the real
// probe creates one, maps the ids and mounts (as root and rootless).
func TestProbeUserNS(t *testing.T) {
	both(t, func(t *testing.T) {
		p := ProbeUserNS(context.Background())
		d := DiagnoseUserNS(p)
		if d.Cause != UserNSWorks || p.Unshare != "" || p.MapIDs != "" || p.Mount != "" {
			t.Fatalf("probe %+v: %s", p, d.Detail)
		}
	})
}
