package overlayfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxLowerLayers is the deepest layer stack the kernel mounts.
const maxLowerLayers = 500 // Linux: fs/overlayfs/params.h OVL_MAX_STACK

// maxParamLen is the longest value fsconfig(FSCONFIG_SET_STRING) accepts,
// NUL excluded; longer values fail with EINVAL.
const maxParamLen = 255 // Linux: fs/fsopen.c fsconfig: strndup_user(_value, 256)

var (
	// ErrInvalidConfig reports a Config the kernel would refuse, found
	// before any syscall.
	ErrInvalidConfig = errors.New("invalid overlay configuration")
	// ErrOptionsTooLong reports a layer stack whose mount options do not
	// fit the kernel's limits even with short relative paths.
	ErrOptionsTooLong = errors.New("overlay mount options too long")
)

// Flavour is the xattr namespace in which the kernel keeps its markers
// (whiteouts, opaque directories, redirects) in upper and lower layers.
type Flavour int

const (
	// FlavourTrusted is "trusted.overlay.": mounts by real root.
	FlavourTrusted Flavour = iota + 1
	// FlavourUser is "user.overlay.": mounts with userxattr, which
	// unprivileged mounts in a user namespace require (Linux 5.11+).
	FlavourUser
)

// XattrPrefix returns the namespace prefix, e.g. "user.overlay.".
// Linux: fs/overlayfs/overlayfs.h OVL_XATTR_TRUSTED_PREFIX, OVL_XATTR_USER_PREFIX
func (f Flavour) XattrPrefix() string {
	if f == FlavourUser {
		return "user.overlay."
	}
	return "trusted.overlay."
}

func (f Flavour) String() string {
	switch f {
	case FlavourUser:
		return "user"
	case FlavourTrusted:
		return "trusted"
	}
	return fmt.Sprintf("Flavour(%d)", int(f))
}

// Config describes one overlay mount. Paths must be absolute.
type Config struct {
	// Lowers are the read-only layers, topmost first. At least one, at
	// most 500; at least two when Upper is empty.
	Lowers []string
	// Upper and Work are both set (a writable mount) or both empty (a
	// read-only mount). Work must be on the same filesystem as Upper.
	Upper string
	Work  string
	// UserXattr stores overlay markers as user.overlay.* xattrs. Required
	// in a user namespace; excludes RedirectDir.
	UserXattr bool
	// RedirectDir lets directories that exist beneath be renamed (the
	// kernel records a redirect xattr). Real root only: the kernel refuses
	// it together with userxattr.
	RedirectDir bool
	// Volatile skips every sync to the upper filesystem. Faster, but after
	// a crash the upper may be incomplete; the kernel then refuses to
	// remount until the marker it left is removed (see Mount).
	Volatile bool
}

// Flavour returns the xattr namespace a mount with this Config writes.
func (c Config) Flavour() Flavour {
	if c.UserXattr {
		return FlavourUser
	}
	return FlavourTrusted
}

// DefaultConfig returns the Config strata uses for lowers, upper and work
// under feat: userxattr unless the probe ran as real root, and
// redirect_dir=on only as real root and only when the probe found it works.
func DefaultConfig(lowers []string, upper, work string, feat Features) Config {
	cfg := Config{Lowers: lowers, Upper: upper, Work: work}
	if feat.UserNS || feat.Euid != 0 {
		cfg.UserXattr = true
	} else {
		cfg.RedirectDir = feat.RedirectDir
	}
	return cfg
}

// Method is how a Plan hands the options to the kernel.
type Method int

const (
	// Legacy is one mount(2) call with one option string, which the kernel
	// caps at one page (Linux: fs/namespace.c copy_mount_options).
	Legacy Method = iota + 1
	// Fsconfig is fsopen("overlay") and one fsconfig(FSCONFIG_SET_STRING)
	// per option, with "lowerdir+" per layer (Linux 6.8+), then fsmount
	// and move_mount. Each value is capped at 255 bytes.
	Fsconfig
	// FsconfigFD is Fsconfig with every layer directory passed as an open
	// file descriptor (FSCONFIG_SET_FD for lowerdir+, upperdir, workdir;
	// Linux 6.13+, fs/overlayfs/params.c fsparam_file_or_string): no length
	// limit, no escaping, no working directory.
	FsconfigFD
)

func (m Method) String() string {
	switch m {
	case Legacy:
		return "mount(2)"
	case Fsconfig:
		return "fsconfig"
	case FsconfigFD:
		return "fsconfig-fd"
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// ParamKind is the fsconfig command a Param becomes.
type ParamKind int

const (
	// ParamFlag is FSCONFIG_SET_FLAG Key.
	ParamFlag ParamKind = iota + 1
	// ParamString is FSCONFIG_SET_STRING Key=Value.
	ParamString
	// ParamDir is FSCONFIG_SET_FD Key=fd, the fd of directory Value opened
	// by Mount.
	ParamDir
)

// Param is one fsconfig call.
type Param struct {
	Kind  ParamKind
	Key   string
	Value string
}

func (p Param) String() string {
	switch p.Kind {
	case ParamFlag:
		return p.Key
	case ParamDir:
		return fmt.Sprintf("%s=fd(%q)", p.Key, p.Value)
	}
	return fmt.Sprintf("%s=%q", p.Key, p.Value)
}

// Plan is everything Mount passes to the kernel, computed without syscalls.
type Plan struct {
	Method Method
	// Dir, when set, is the directory the paths in Data or Params are
	// relative to. Mount resolves them from an OS thread that unshared its
	// working directory (unshare(CLONE_FS)) and changed into Dir, so other
	// goroutines never see the process's working directory change.
	Dir string
	// Data is the mount(2) option string (Legacy).
	Data string
	// Params are the fsconfig calls in order (Fsconfig, FsconfigFD).
	Params []Param
}

// String renders the plan for error messages and logs.
func (p Plan) String() string {
	var b strings.Builder
	if p.Method == Legacy {
		b.WriteString(p.Data)
	} else {
		for i, prm := range p.Params {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(prm.String())
		}
	}
	if p.Dir != "" {
		fmt.Fprintf(&b, " (relative to %s)", p.Dir)
	}
	return b.String()
}

// NewPlan validates cfg and describes how to mount it with method m. It
// fails with ErrInvalidConfig for configurations the kernel refuses and
// with ErrOptionsTooLong when even short relative paths do not fit.
func NewPlan(cfg Config, m Method) (Plan, error) {
	return newPlan(cfg, m, os.Getpagesize())
}

func newPlan(cfg Config, m Method, pageSize int) (Plan, error) {
	cfg, err := cleanConfig(cfg)
	if err != nil {
		return Plan{}, err
	}
	switch m {
	case Legacy:
		return legacyPlan(cfg, pageSize)
	case Fsconfig:
		return fsconfigPlan(cfg, false)
	case FsconfigFD:
		return fsconfigPlan(cfg, true)
	}
	return Plan{}, fmt.Errorf("%w: unknown method %d", ErrInvalidConfig, int(m))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// cleanConfig checks what the kernel would refuse and returns cfg with
// cleaned paths.
func cleanConfig(cfg Config) (Config, error) {
	switch n := len(cfg.Lowers); {
	case n == 0:
		return cfg, invalid("no lower layer")
	case n > maxLowerLayers:
		return cfg, invalid("%d lower layers; the kernel stacks at most %d (flatten the stack)", n, maxLowerLayers)
	}
	if (cfg.Upper == "") != (cfg.Work == "") {
		return cfg, invalid("upper and work must be set together (upper %q, work %q)", cfg.Upper, cfg.Work)
	}
	if cfg.Upper == "" {
		// Linux: fs/overlayfs/super.c ovl_get_lowerstack: "at least 2
		// lowerdir are needed while upperdir nonexistent".
		if len(cfg.Lowers) < 2 {
			return cfg, invalid("a read-only overlay needs at least two lower layers")
		}
		if cfg.Volatile {
			return cfg, invalid("volatile needs an upper directory")
		}
	}
	if cfg.UserXattr && cfg.RedirectDir {
		// Linux: fs/overlayfs/params.c ovl_fs_params_verify:
		// "conflicting options: userxattr,redirect_dir=on".
		return cfg, invalid("redirect_dir=on is refused with userxattr (rootless mounts cannot rename lower directories)")
	}
	clean := func(what, p string) (string, error) {
		switch {
		case p == "":
			return "", invalid("%s: empty path", what)
		case strings.IndexByte(p, 0) >= 0:
			return "", invalid("%s %q: NUL byte in path", what, p)
		case !filepath.IsAbs(p):
			return "", invalid("%s %q: path must be absolute", what, p)
		}
		return filepath.Clean(p), nil
	}
	out := cfg
	out.Lowers = make([]string, len(cfg.Lowers))
	var err error
	for i, l := range cfg.Lowers {
		if out.Lowers[i], err = clean(fmt.Sprintf("lower %d", i), l); err != nil {
			return cfg, err
		}
	}
	if cfg.Upper != "" {
		if out.Upper, err = clean("upper", cfg.Upper); err != nil {
			return cfg, err
		}
		if out.Work, err = clean("work", cfg.Work); err != nil {
			return cfg, err
		}
	}
	return out, nil
}

// flagOptions are the options after the directories, in mount order.
func flagOptions(cfg Config) []Param {
	var ps []Param
	switch {
	case cfg.UserXattr:
		// "nofollow" is the only redirect mode the kernel accepts with
		// userxattr; since 6.5 "off" means "follow" and conflicts
		// (Linux: fs/overlayfs/params.c ovl_fs_params_verify).
		ps = append(ps, Param{Kind: ParamFlag, Key: "userxattr"},
			Param{Kind: ParamString, Key: "redirect_dir", Value: "nofollow"})
	case cfg.RedirectDir:
		ps = append(ps, Param{Kind: ParamString, Key: "redirect_dir", Value: "on"})
	default:
		// Do not create redirects, but follow those a layer may carry.
		ps = append(ps, Param{Kind: ParamString, Key: "redirect_dir", Value: "off"})
	}
	// Explicit, whatever the kernel's build defaults: strata reads upper
	// directories offline, which neither feature allows.
	ps = append(ps, Param{Kind: ParamString, Key: "index", Value: "off"},
		Param{Kind: ParamString, Key: "metacopy", Value: "off"})
	if cfg.Volatile {
		ps = append(ps, Param{Kind: ParamFlag, Key: "volatile"})
	}
	return ps
}

// escapeOption escapes a path for the legacy option string: the kernel
// splits options at unescaped ',' and lowerdir at unescaped ':', then
// drops one backslash before any character.
// Linux: fs/overlayfs/params.c ovl_next_opt, ovl_parse_param_split_lowerdirs, ovl_unescape
func escapeOption(p string) string {
	if !strings.ContainsAny(p, `,:\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == ',' || c == ':' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// escapeUpperParam escapes upperdir/workdir values for fsconfig strings:
// the kernel unescapes them (ovl_mount_dir) but not lowerdir+ values
// (ovl_mount_dir_noesc). Linux: fs/overlayfs/params.c ovl_parse_layer
func escapeUpperParam(p string) string {
	return strings.ReplaceAll(p, `\`, `\\`)
}

func legacyData(lowers []string, upper, work string, flags []Param) string {
	var b strings.Builder
	b.WriteString("lowerdir=")
	for i, l := range lowers {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(escapeOption(l))
	}
	if upper != "" {
		b.WriteString(",upperdir=")
		b.WriteString(escapeOption(upper))
		b.WriteString(",workdir=")
		b.WriteString(escapeOption(work))
	}
	for _, f := range flags {
		b.WriteByte(',')
		b.WriteString(f.Key)
		if f.Kind == ParamString {
			b.WriteByte('=')
			b.WriteString(f.Value)
		}
	}
	return b.String()
}

func legacyPlan(cfg Config, pageSize int) (Plan, error) {
	flags := flagOptions(cfg)
	data := legacyData(cfg.Lowers, cfg.Upper, cfg.Work, flags)
	if len(data)+1 <= pageSize {
		return Plan{Method: Legacy, Data: data}, nil
	}
	dir, lowers, upper, work := relativize(cfg)
	short := legacyData(lowers, upper, work, flags)
	if len(short)+1 <= pageSize {
		return Plan{Method: Legacy, Dir: dir, Data: short}, nil
	}
	return Plan{}, fmt.Errorf("%w: %d layers need %d bytes of mount(2) options, %d relative to %s; the kernel takes %d including NUL: use shorter layer paths, fewer layers, or a kernel with fsconfig lowerdir+ (6.8+)",
		ErrOptionsTooLong, len(cfg.Lowers), len(data)+1, len(short)+1, dir, pageSize)
}

func fsconfigPlan(cfg Config, fds bool) (Plan, error) {
	build := func(lowers []string, upper, work string) []Param {
		var ps []Param
		kind := ParamString
		if fds {
			kind = ParamDir
		}
		for _, l := range lowers {
			ps = append(ps, Param{Kind: kind, Key: "lowerdir+", Value: l})
		}
		if upper != "" {
			if !fds {
				upper, work = escapeUpperParam(upper), escapeUpperParam(work)
			}
			ps = append(ps, Param{Kind: kind, Key: "upperdir", Value: upper},
				Param{Kind: kind, Key: "workdir", Value: work})
		}
		return append(ps, flagOptions(cfg)...)
	}
	tooLong := func(ps []Param) *Param {
		for i := range ps {
			if ps[i].Kind == ParamString && len(ps[i].Value) > maxParamLen {
				return &ps[i]
			}
		}
		return nil
	}
	method := Fsconfig
	if fds {
		method = FsconfigFD
	}
	ps := build(cfg.Lowers, cfg.Upper, cfg.Work)
	if tooLong(ps) == nil {
		return Plan{Method: method, Params: ps}, nil
	}
	dir, lowers, upper, work := relativize(cfg)
	short := build(lowers, upper, work)
	if p := tooLong(short); p != nil {
		return Plan{}, fmt.Errorf("%w: fsconfig %s is %d bytes even relative to %s; the kernel takes at most %d: use shorter layer paths or a kernel that takes layer fds (6.13+)",
			ErrOptionsTooLong, p.Key, len(p.Value), dir, maxParamLen)
	}
	return Plan{Method: method, Dir: dir, Params: short}, nil
}

// relativize rewrites the layer paths relative to the deepest directory
// that contains every lower. upper and work are made relative too when
// that is shorter (they may live elsewhere, e.g. on a tmpfs).
func relativize(cfg Config) (dir string, lowers []string, upper, work string) {
	dir = commonDir(cfg.Lowers)
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil || len(r) >= len(p) {
			return p
		}
		return r
	}
	lowers = make([]string, len(cfg.Lowers))
	for i, l := range cfg.Lowers {
		lowers[i] = rel(l)
	}
	if cfg.Upper != "" {
		upper, work = rel(cfg.Upper), rel(cfg.Work)
	}
	return dir, lowers, upper, work
}

// commonDir returns the deepest directory containing every path (all
// absolute and clean); a path counts as containing itself.
func commonDir(paths []string) string {
	common := paths[0]
	for _, p := range paths[1:] {
		for !within(p, common) {
			common = filepath.Dir(common)
		}
	}
	return common
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}
