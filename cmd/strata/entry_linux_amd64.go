package main

// entry is the front's ELF entry point when make build links it with
// `-ldflags "-E main.entry"` (entry_linux_amd64.s): it hands command lines the
// front cannot serve to strata-core before the Go runtime starts, and
// jumps to the runtime's entry otherwise. Nothing calls it from Go.
func entry()
