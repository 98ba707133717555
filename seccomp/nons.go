package seccomp

// PlanNoNamespaces is Plan for a command that runs without any namespace
// (a reflink or copy workspace where user namespaces are denied): p's
// filter plus socket(AF_UNIX) denied (EPERM), and on i386 socketcall(2),
// whose arguments seccomp cannot see. Without a mount namespace the host's
// pathname sockets — the session bus, ssh-agent, docker.sock — are on
// paths the command can reach, and Landlock does not govern connect(2) to
// them; a process that cannot create a unix socket cannot connect to
// one. socketpair(2) stays allowed (pipes between a command's own
// processes: node's and python's child-process channels). See
// docs/sandbox.md, "When user namespaces are not available".
func PlanNoNamespaces(p Policy, goarch string) (*Filter, error) {
	f, err := Plan(p, goarch)
	if err != nil {
		return nil, err
	}
	for i := range f.Arches {
		a := &f.Arches[i]
		// The family is an int: compare its low 32 bits, which is what
		// the kernel uses, whatever the upper half of the register holds.
		a.Rules = append(a.Rules, Rule{Syscall: "socket", Errno: "EPERM", Args: []Arg{{Index: 0, Op: OpMaskedEq, Mask: 0xffffffff, Value: afUnix}}})
		if a.Arch == "x86" && !p.DenyNetwork {
			a.Rules = append(a.Rules, Rule{Syscall: "socketcall", Errno: "EPERM"})
		}
	}
	return f, nil
}
