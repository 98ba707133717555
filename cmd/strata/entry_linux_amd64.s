// The front's ELF entry point on linux/amd64 (make build links it with
// `-ldflags "-E main.entry"`; without the flag it is unused and the Go
// runtime's own entry runs). It runs before the Go runtime starts and
// hands a command line the front cannot serve to strata-core at once:
// a Go start costs 5-7 ms on a VM whose page faults are dear
// (docs/hotpath.md, "Part 4"), and every verb but exec, shell and ws
// path paid it before strata-core's own.
//
// The test is deliberately coarse; anything it is unsure of goes on to
// the Go front, which decides as it always did:
//   - argv[0] starting with "strata:" is a re-executed child (nsexec);
//   - an argument that is exactly "exec", "shell" or "path" may be a hot
//     verb (`ws path` has both words; `ws create` and the other ws verbs
//     need no Go front) or a workspace so named: the Go front then hands
//     it over;
//   - STRATA_FRONT set in the environment (off, trace) wants the Go
//     front's behaviour, its trace lines included.
// Otherwise it execs strata-core beside /proc/self/exe with the same
// argv and environment, as main's hand-over does. If that fails (no
// strata-core, a path too long), the Go front runs and reports it.

#include "textflag.h"

#define SYS_readlink 89
#define SYS_execve 59

// pathMax bounds the executable's path read from /proc/self/exe; what
// is left of ·corePath holds "strata-core\0" after its last slash.
#define pathMax 4064

GLOBL ·corePath(SB), NOPTR, $4096

DATA ·procSelfExe+0(SB)/8, $"/proc/se"
DATA ·procSelfExe+8(SB)/8, $"lf/exe\x00\x00"
GLOBL ·procSelfExe(SB), RODATA|NOPTR, $16

DATA ·coreFile+0(SB)/8, $"strata-c"
DATA ·coreFile+8(SB)/8, $"ore\x00\x00\x00\x00\x00"
GLOBL ·coreFile(SB), RODATA|NOPTR, $16

DATA ·frontEnv+0(SB)/8, $"STRATA_F"
DATA ·frontEnv+8(SB)/8, $"RONT=\x00\x00\x00"
GLOBL ·frontEnv(SB), RODATA|NOPTR, $16

// BYTEIS goes on when the string at R has byte b at offset off, and
// jumps to no otherwise; chained, it compares a whole NUL-terminated
// word, stopping at the first byte that differs (no read past a NUL).
#define BYTEIS(R, off, b, no) MOVBLZX off(R), AX; CMPL AX, $(b); JNE no

// Registers: R8 argc, R9 argv, R10 envp (the process's initial stack,
// which _rt0_amd64_linux reads again: SP is left as it was); SYSCALL
// clobbers only AX, CX and R11.
TEXT ·entry(SB), NOSPLIT|NOFRAME, $0
	MOVQ	0(SP), R8
	CMPQ	R8, $1
	JLT	goruntime
	LEAQ	8(SP), R9
	LEAQ	8(R9)(R8*8), R10

	// A re-executed child: argv[0] is "strata:ENTRY".
	MOVQ	0(R9), SI
	BYTEIS(SI, 0, 's', args)
	BYTEIS(SI, 1, 't', args)
	BYTEIS(SI, 2, 'r', args)
	BYTEIS(SI, 3, 'a', args)
	BYTEIS(SI, 4, 't', args)
	BYTEIS(SI, 5, 'a', args)
	BYTEIS(SI, 6, ':', args)
	JMP	goruntime

args:
	// A word the front may serve: exec, shell, path.
	MOVQ	$1, R12
argloop:
	CMPQ	R12, R8
	JGE	env
	MOVQ	(R9)(R12*8), SI
	INCQ	R12
	MOVBLZX	0(SI), AX
	CMPL	AX, $'e'
	JEQ	isexec
	CMPL	AX, $'s'
	JEQ	isshell
	CMPL	AX, $'p'
	JNE	argloop
	BYTEIS(SI, 1, 'a', argloop)
	BYTEIS(SI, 2, 't', argloop)
	BYTEIS(SI, 3, 'h', argloop)
	BYTEIS(SI, 4, 0, argloop)
	JMP	goruntime
isexec:
	BYTEIS(SI, 1, 'x', argloop)
	BYTEIS(SI, 2, 'e', argloop)
	BYTEIS(SI, 3, 'c', argloop)
	BYTEIS(SI, 4, 0, argloop)
	JMP	goruntime
isshell:
	BYTEIS(SI, 1, 'h', argloop)
	BYTEIS(SI, 2, 'e', argloop)
	BYTEIS(SI, 3, 'l', argloop)
	BYTEIS(SI, 4, 'l', argloop)
	BYTEIS(SI, 5, 0, argloop)
	JMP	goruntime

env:
	// STRATA_FRONT=... in the environment.
	MOVQ	R10, R13
envloop:
	MOVQ	0(R13), SI
	TESTQ	SI, SI
	JEQ	exe
	ADDQ	$8, R13
	LEAQ	·frontEnv(SB), DI
	MOVQ	$13, R14
cmploop:
	MOVBLZX	0(SI), AX
	MOVBLZX	0(DI), BX
	CMPL	AX, BX
	JNE	envloop
	INCQ	SI
	INCQ	DI
	DECQ	R14
	JNE	cmploop
	JMP	goruntime

exe:
	// readlink("/proc/self/exe"): the kernel's path of this binary.
	LEAQ	·procSelfExe(SB), DI
	LEAQ	·corePath(SB), SI
	MOVQ	$pathMax, DX
	MOVQ	$SYS_readlink, AX
	SYSCALL
	CMPQ	AX, $0
	JLE	goruntime
	CMPQ	AX, $pathMax
	JGE	goruntime
	// Its last slash, then "strata-core\0" after it.
	LEAQ	·corePath(SB), SI
	MOVQ	AX, R14
slash:
	DECQ	R14
	JLT	goruntime
	MOVBLZX	(SI)(R14*1), AX
	CMPL	AX, $'/'
	JNE	slash
	LEAQ	1(SI)(R14*1), DI
	LEAQ	·coreFile(SB), BX
	MOVQ	0(BX), AX
	MOVQ	AX, 0(DI)
	MOVQ	8(BX), AX
	MOVQ	AX, 8(DI)

	// execve(core, argv, envp); it returns only on failure.
	LEAQ	·corePath(SB), DI
	MOVQ	R9, SI
	MOVQ	R10, DX
	MOVQ	$SYS_execve, AX
	SYSCALL

goruntime:
	JMP	_rt0_amd64_linux(SB)
